"""Extraction: the extractions asset asks the model only for passages that neither the store nor
the extraction cache has an answer for, and reports calls and retries apart."""

from __future__ import annotations

import json

from assets.resources import ExtractorResource
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.ingest.passages import split_passages

ANSWER = {"entities": [{"name": "Oslo", "type": "location", "description": "a city"}],
          "facts": [["Oslo", "capital of", "Norway", "Oslo is the capital of Norway"]]}


def test_extractions_reuse_a_crashed_runs_answers_and_count_retries_apart_from_calls(
    lightfoot, twenty, chat_server, monkeypatch
):
    answer = chat_server.Reply(content=json.dumps(ANSWER), usage=(500, 50))
    chat_server.queue(answer)
    url = chat_server.base_url
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
    assert chat_server.count == 1

    chat_server.queue(chat_server.Reply(status=500), answer)  # the next request gets a 500, and is sent again
    lightfoot.drop_documents("two", [cached, asked], {})
    result = lightfoot.run(lightfoot.tick("document_inbox").run_requests[0])
    assert result.success
    assert chat_server.count == 1 + 2  # the asked passage only: one call, retried once
    by_partition = {m.partition: m.metadata for m in result.asset_materializations_for_node("extractions")}
    metadata = by_partition[asked.doc_id]
    values = {k: metadata[f"run_{k}"].value for k in ("model_calls", "retries", "from_cache", "already_extracted",
                                                      "extracted", "failed")}
    assert values == {"model_calls": 1, "retries": 1, "from_cache": 1, "already_extracted": 1, "extracted": 1,
                      "failed": 0}
    assert (metadata["model_calls"].value, metadata["retries"].value) == (1, 1)
    assert (by_partition[cached.doc_id]["model_calls"].value, by_partition[cached.doc_id]["from_cache"].value) == (0, 1)
    totals = ledger.totals(lightfoot.store())
    assert (totals["calls"], totals["retries"], totals["runs"]) == (2, 1, 2)
    assert lightfoot.store().read("extractions").get_column("status").to_list() == ["ok", "ok"]
