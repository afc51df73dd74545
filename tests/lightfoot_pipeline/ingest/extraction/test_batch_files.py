"""Request and output files of batch extraction: within the provider's limits, read within bounds."""

from __future__ import annotations

import io
import json

import pytest

from lightfoot_pipeline.ingest.extraction.batch_files import (
    FileLimits,
    RequestFileWriter,
    read_output,
    request_body,
    request_line,
)
from lightfoot_pipeline.ingest.extraction.prompt import ExtractionPrompt
from lightfoot_pipeline.ingest.passages import Passage

PROMPT = ExtractionPrompt()


def passage(n: int) -> Passage:
    return Passage(f"c{n}", f"d{n}", 0, f"Title {n}", f"Text number {n}. " * 5)


def answer_line(custom_id: str, content: str = '{"entities":[],"facts":[]}', **extra) -> bytes:
    line = {"id": "r", "custom_id": custom_id, "error": None, "response": {"status_code": 200, "body": {
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}}}, **extra}
    return json.dumps(line).encode() + b"\n"


def test_the_request_body_is_what_a_synchronous_call_sends():
    body = request_body(PROMPT, passage(1), "m", 0.0)
    assert body["messages"] == PROMPT.messages(passage(1))
    assert body["max_tokens"] == PROMPT.max_output_tokens
    assert body["response_format"]["json_schema"]["schema"] == PROMPT.schema
    line = json.loads(request_line("x-1", body))
    assert (line["custom_id"], line["method"], line["url"]) == ("x-1", "POST", "/v1/chat/completions")


def test_files_stay_within_the_request_and_byte_limits(tmp_path):
    size = len(request_line("x-00", request_body(PROMPT, passage(0), "m")))
    limits = FileLimits(max_requests=3, max_bytes=int(size * 2.5))
    with RequestFileWriter(tmp_path, limits) as writer:
        for n in range(7):
            writer.add(f"x-{n:02d}", request_body(PROMPT, passage(n), "m"))
    assert [len(f.custom_ids) for f in writer.files] == [2, 2, 2, 1]  # bytes bind before requests
    for f in writer.files:
        data = f.path.read_bytes()
        assert len(data) == f.n_bytes <= limits.max_bytes
        assert [json.loads(line)["custom_id"] for line in data.splitlines()] == f.custom_ids
    by_requests = FileLimits(max_requests=3)
    with RequestFileWriter(tmp_path / "r", by_requests) as writer:
        for n in range(7):
            writer.add(f"x-{n:02d}", request_body(PROMPT, passage(n), "m"))
    assert [len(f.custom_ids) for f in writer.files] == [3, 3, 1]
    with pytest.raises(ValueError, match="more than a whole file"), \
            RequestFileWriter(tmp_path / "s", FileLimits(max_bytes=100)) as writer:
        writer.add("x", request_body(PROMPT, passage(0), "m"))


def test_every_bad_line_is_a_recorded_problem_and_its_request_stays_unanswered():
    data = b"".join([
        answer_line("a"),
        b"not json\n",
        answer_line("stranger"),
        answer_line("a", '{"entities":[{"name":"second"}],"facts":[]}'),
        b"{\"no\": \"custom id\"}\n",
        b"x" * 1000 + b"\n",  # over the line bound
        json.dumps({"custom_id": "b", "response": None, "error": {"code": "batch_expired", "message": "<text>"}})
        .encode() + b"\n",
        json.dumps({"custom_id": "c", "response": {"status_code": 500, "body": {}}, "error": None}).encode() + b"\n",
    ])
    reading = read_output(io.BytesIO(data), {"a", "b", "c", "d"}, limits=FileLimits(max_line_bytes=450), max_bytes=10**6)
    assert set(reading.answers) == {"a"} and reading.answers["a"].text == '{"entities":[],"facts":[]}'
    assert reading.failed == {"b": "the request failed at the provider (batch_expired)",
                              "c": "the request failed at the provider (HTTP 500)"}
    assert "<text>" not in json.dumps(reading.failed)  # the provider's message is not kept
    assert reading.n_problems == 5
    assert [p.split(" ", 2)[2] for p in reading.problems] == [
        "is not JSON", "names a custom_id this batch did not ask for", "answers a again: the first line is kept",
        "names no custom_id", "is longer than 450 bytes: not read"]


def test_an_output_larger_than_its_requests_can_make_is_read_no_further():
    data = answer_line("a") * 3 + answer_line("b")
    reading = read_output(io.BytesIO(data), {"a", "b"}, max_bytes=len(answer_line("a")) * 2)
    assert set(reading.answers) == {"a"} and "b" not in reading.failed
    assert reading.problems[-1].startswith("the file is larger than its 2 requests can make")
