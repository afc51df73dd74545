"""Batch extraction's files at scale: building the request files and reading an output file for
N passages (time and peak memory), beside the synchronous extractor's overhead per call.

    python benchmarks/batch_files.py [--passages 100000] [--calls 200] [--json OUT.json]

- ``build``: N synthetic passages (generated one at a time) written as chat requests
  (ingest/extraction/batch_files.py: ``request_body``, ``RequestFileWriter``) into files within
  the provider's limits (50,000 requests, 200 MB a file): seconds, files, bytes, and, in a second
  pass under tracemalloc (which slows it), the peak of Python's allocations while writing, which
  follows one request and the custom ids kept (``custom_ids_mb``), not the requests' text.
- ``read``: an output file of N answers in the provider's format read back with ``read_output``
  (every line parsed and checked against the batch's custom ids): seconds, bytes and peak
  allocations, which follow the answers kept (the file's size), not the requests' text.
- ``synchronous``: ``--calls`` calls of the synchronous client (models/llm.py: ``LLMClient``) to
  a chat-completions server on 127.0.0.1 that answers at once, one at a time: the client's own
  cost per call (HTTP round trip, JSON, retries' bookkeeping), which a batch does not pay per
  passage; the provider's time to answer is in neither figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lightfoot_pipeline.ingest.extraction.batch_files import (
    FileLimits,
    RequestFileWriter,
    read_output,
    request_body,
)
from lightfoot_pipeline.ingest.extraction.cache import cache_key_for
from lightfoot_pipeline.ingest.extraction.prompt import ExtractionPrompt
from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.models.llm import LLMClient, LLMSettings

ANSWER = json.dumps({"entities": [{"name": "Topic", "type": "concept", "description": "the passage's topic"}],
                     "facts": [["Topic", "is described by", "a passage", "Topic is described by a passage"]]})
TEXT = ("The passage is about a topic and what happened to it over the years, with names, places and dates "
        "that an extraction would turn into entities and facts. ") * 4


def passages(n: int):
    for i in range(n):
        yield Passage(f"c{i:07d}", f"d{i // 3:07d}", i % 3, f"Title {i}", f"{TEXT} Number {i}.")


def _write(n: int, directory: Path, prompt: ExtractionPrompt) -> tuple[list, list[str]]:
    keys = []
    with RequestFileWriter(directory, FileLimits()) as writer:
        for passage in passages(n):
            key = cache_key_for("m", prompt.prompt_hash, prompt.schema_hash, prompt.text_hash(passage))
            keys.append(key)
            writer.add(key, request_body(prompt, passage, "m"))
    return writer.files, keys


def build(n: int, directory: Path, prompt: ExtractionPrompt) -> tuple[dict, list[str]]:
    """Timed on its own, then again under tracemalloc for the peak (which slows it)."""
    started = time.perf_counter()
    files, keys = _write(n, directory / "timed", prompt)
    seconds = time.perf_counter() - started
    for f in files:
        f.path.unlink()
    tracemalloc.start()
    _write(n, directory / "traced", prompt)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # The custom ids kept: one str each (49 bytes of header), referenced from the caller's list and its file's.
    keys_bytes = sum(len(k) + 49 + 16 for k in keys)
    return {"seconds": round(seconds, 2), "files": len(files), "bytes": sum(f.n_bytes for f in files),
            "requests_per_s": round(n / seconds), "peak_alloc_mb": round(peak / 2**20, 1),
            "custom_ids_mb": round(keys_bytes / 2**20, 1)}, keys


def read(keys: list[str], directory: Path) -> dict:
    output = directory / "output.jsonl"
    with output.open("wb") as sink:
        for n, key in enumerate(keys):
            body = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": ANSWER}}],
                    "usage": {"prompt_tokens": 700, "completion_tokens": 90}}
            sink.write(json.dumps({"id": f"r{n}", "custom_id": key, "error": None,
                                   "response": {"status_code": 200, "request_id": f"q{n}", "body": body}}).encode() + b"\n")
    expected = set(keys)
    started = time.perf_counter()
    with output.open("rb") as handle:
        reading = read_output(handle, expected)
    seconds = time.perf_counter() - started
    del reading
    tracemalloc.start()
    with output.open("rb") as handle:
        reading = read_output(handle, expected)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(reading.answers) == len(keys) and reading.n_problems == 0
    return {"seconds": round(seconds, 2), "bytes": output.stat().st_size, "answers_per_s": round(len(keys) / seconds),
            "peak_alloc_mb": round(peak / 2**20, 1)}


def synchronous(calls: int, prompt: ExtractionPrompt) -> dict:
    payload = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": ANSWER}}],
                          "usage": {"prompt_tokens": 700, "completion_tokens": 90, "total_tokens": 790}}).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # else a delayed ACK adds ~40 ms to each keep-alive round trip

        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = LLMClient(LLMSettings(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", model="m"))
        sample = next(passages(1))
        messages = prompt.messages(sample)
        client.complete(messages, json_schema=prompt.schema, max_tokens=prompt.max_output_tokens)  # warm
        started = time.perf_counter()
        for _ in range(calls):
            client.complete(messages, json_schema=prompt.schema, max_tokens=prompt.max_output_tokens)
        seconds = time.perf_counter() - started
    finally:
        server.shutdown()
        server.server_close()
    return {"calls": calls, "ms_per_call": round(seconds / calls * 1000, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()
    prompt = ExtractionPrompt()
    with tempfile.TemporaryDirectory(prefix="lightfoot-batch-bench-") as scratch:
        built, keys = build(args.passages, Path(scratch) / "requests", prompt)
        for f in (Path(scratch) / "requests" / "traced").iterdir():
            f.unlink()  # the disk back before the output is written
        result = {"passages": args.passages, "build": built, "read": read(keys, Path(scratch)),
                  "synchronous": synchronous(args.calls, prompt)}
    result["build"]["ms_per_passage"] = round(built["seconds"] / args.passages * 1000, 3)
    result["read"]["ms_per_passage"] = round(result["read"]["seconds"] / args.passages * 1000, 3)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
