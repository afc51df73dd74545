"""Extraction: the extractions asset asks the model only for passages that neither the store nor
the extraction cache has an answer for, and reports calls and retries apart."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from assets.resources import ExtractorResource
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.ingest.passages import split_passages

ANSWER = {"entities": [{"name": "Oslo", "type": "location", "description": "a city"}],
          "facts": [["Oslo", "capital of", "Norway", "Oslo is the capital of Norway"]]}


@pytest.fixture
def endpoint():
    """A chat-completions endpoint on 127.0.0.1: ``fail[0]`` next requests get a 500, the rest ANSWER."""
    requests: list[int] = []
    fail = [0]
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            with lock:
                requests.append(len(requests) + 1)
                failing = fail[0] > 0
                fail[0] -= failing
            if failing:
                status, payload = 500, json.dumps({"error": {"message": "try again", "type": "server"}}).encode()
            else:
                status, payload = 200, json.dumps({
                    "id": f"chatcmpl-{len(requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": json.dumps(ANSWER)}}],
                    "usage": {"prompt_tokens": 500, "completion_tokens": 50, "total_tokens": 550},
                }).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", requests, fail
    finally:
        server.shutdown()
        server.server_close()


def test_extractions_reuse_a_crashed_runs_answers_and_count_retries_apart_from_calls(
    lightfoot, twenty, endpoint, monkeypatch
):
    url, requests, fail = endpoint
    monkeypatch.setenv("LIGHTFOOT_LLM_BACKOFF_S", "0.01")
    lightfoot.resources["extractor"] = ExtractorResource(mode="openai", base_url=url, model="test-model",
                                                         api_key="sk-test")
    lightfoot.defs = lightfoot.defs.__class__(
        assets=lightfoot.defs.assets, asset_checks=lightfoot.defs.asset_checks, jobs=lightfoot.defs.jobs,
        sensors=lightfoot.defs.sensors, schedules=lightfoot.defs.schedules, resources=lightfoot.resources,
    )
    cached, asked = twenty[0], twenty[1]
    # An earlier run paid for the first document's answer and died before it stored anything else.
    settings = LLMSettings(base_url=url, model="test-model", api_key="sk-test", backoff_s=0.01)
    build_openai_extractor(lightfoot.store(), llm_settings=settings, run_id="crashed").extract(
        split_passages(cached, 4000))
    assert len(requests) == 1

    fail[0] = 1  # the next request gets a 500, and is sent again
    lightfoot.drop_documents("two", [cached, asked], {})
    result = lightfoot.run(lightfoot.tick("document_inbox").run_requests[0])
    assert result.success
    assert len(requests) == 1 + 2  # the asked passage only: one call, retried once
    metadata = next(e.event_specific_data.materialization.metadata for e in result.get_asset_materialization_events()
                    if e.event_specific_data.materialization.asset_key.to_user_string() == "extractions")
    values = {k: metadata[k].value for k in ("model_calls", "retries", "from_cache", "already_extracted",
                                             "extracted", "failed")}
    assert values == {"model_calls": 1, "retries": 1, "from_cache": 1, "already_extracted": 1, "extracted": 1,
                      "failed": 0}
    totals = ledger.totals(lightfoot.store())
    assert (totals["calls"], totals["retries"], totals["runs"]) == (2, 1, 2)
    assert lightfoot.store().read("extractions").get_column("status").to_list() == ["ok", "ok"]
