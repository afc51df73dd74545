"""The files of a batch extraction: chat requests in, answers out, one JSON object a line.

This is the format of OpenAI's Batch API, which vLLM's ``run-batch`` also reads and writes: a
request line is ``{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body"}`` with
the body a synchronous call would send (:func:`request_body`: the same prompt, schema, output
budget and temperature), and an output line is ``{"custom_id", "response": {"status_code",
"body"}, "error"}``. The ``custom_id`` of a request is the cache key of its passage text
(ingest/extraction/cache.py), so an answer goes into the extraction cache under the key it was
asked for, and a text is asked once however many passages share it.

Bounds, so that memory follows one file and never the corpus:

- :class:`RequestFileWriter` streams lines to disk and starts a new file before one would pass
  the provider's limits (``max_requests`` lines, ``max_bytes`` bytes a file);
- :func:`read_output` reads a file line by line, refuses a line longer than ``max_line_bytes``
  and stops at ``max_output_bytes``; each problem (a line that does not parse, an unknown or
  repeated ``custom_id``, an error line, a file cut short) is a recorded reason, and a request with
  no usable answer stays unanswered, never dropped.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from lightfoot_pipeline.ingest.extraction.prompt import ExtractionPrompt
from lightfoot_pipeline.ingest.passages import Passage

CHAT_URL = "/v1/chat/completions"
# OpenAI's Batch API: at most 50,000 requests and 200 MB an input file.
MAX_REQUESTS_PER_FILE = 50_000
MAX_BYTES_PER_FILE = 200 * 1024 * 1024
# An output line holds one answer of at most MAX_ANSWER_CHARS characters (parse.py) in its JSON
# envelope; a longer line is refused unread.
MAX_LINE_BYTES = 1024 * 1024
# Problems listed by name in a reading (the rest are counted).
MAX_LISTED_PROBLEMS = 50


@dataclass(frozen=True)
class FileLimits:
    """What one request file may hold, and what its output may be."""

    max_requests: int = MAX_REQUESTS_PER_FILE
    max_bytes: int = MAX_BYTES_PER_FILE
    max_line_bytes: int = MAX_LINE_BYTES

    def __post_init__(self) -> None:
        for name in ("max_requests", "max_bytes", "max_line_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def max_output_bytes(self, requests: int) -> int:
        """The largest output file that ``requests`` answers can make: one bounded line each."""
        return requests * self.max_line_bytes


def request_body(prompt: ExtractionPrompt, passage: Passage, model: str, temperature: float = 0.0) -> dict:
    """The chat-completion request for a passage, as a synchronous call in ``json_schema`` mode sends it."""
    schema = prompt.schema
    return {
        "model": model,
        "messages": prompt.messages(passage),
        "temperature": temperature,
        "max_tokens": prompt.max_output_tokens,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": str(schema.get("title") or "answer"), "schema": schema,
                                            "strict": True}},
    }


def request_line(custom_id: str, body: dict) -> bytes:
    """One line of a request file (newline included)."""
    line = {"custom_id": custom_id, "method": "POST", "url": CHAT_URL, "body": body}
    return (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


@dataclass
class RequestFile:
    """A request file written to disk: its path, the custom ids in it (in order), its size and digest."""

    path: Path
    custom_ids: list[str] = field(default_factory=list)
    n_bytes: int = 0
    sha256: str = ""


class RequestFileWriter:
    """Writes request lines into files of at most ``limits.max_requests`` lines and
    ``limits.max_bytes`` bytes in ``directory`` (``{stem}-{n}.jsonl``); one line is held at a time.

    A single request larger than a whole file is refused (ValueError): no file could carry it.
    """

    def __init__(self, directory: Path, limits: FileLimits | None = None, stem: str = "requests") -> None:
        self.directory = Path(directory)
        self.limits = limits or FileLimits()
        self.stem = stem
        self.files: list[RequestFile] = []
        self._handle: BinaryIO | None = None
        self._digest = hashlib.sha256()

    def __enter__(self) -> RequestFileWriter:
        self.directory.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, *exc) -> None:
        self._close()

    def add(self, custom_id: str, body: dict) -> None:
        line = request_line(custom_id, body)
        if len(line) > self.limits.max_bytes:
            raise ValueError(f"the request {custom_id} is {len(line):,} bytes, more than a whole file may hold "
                             f"({self.limits.max_bytes:,})")
        current = self.files[-1] if self.files and self._handle is not None else None
        if current is None or (len(current.custom_ids) >= self.limits.max_requests
                               or current.n_bytes + len(line) > self.limits.max_bytes):
            self._close()
            current = RequestFile(self.directory / f"{self.stem}-{len(self.files) + 1}.jsonl")
            self.files.append(current)
            self._handle = current.path.open("wb")
            self._digest = hashlib.sha256()
        assert self._handle is not None
        self._handle.write(line)
        self._digest.update(line)
        current.custom_ids.append(custom_id)
        current.n_bytes += len(line)

    def _close(self) -> None:
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None
            self.files[-1].sha256 = self._digest.hexdigest()


@dataclass
class Answer:
    """One answer of an output file: the completion's text, its usage and why it stopped."""

    text: str
    tokens_in: int
    tokens_out: int
    finish_reason: str | None
    usage_reported: bool = True


@dataclass
class OutputReading:
    """What an output (or error) file said: answers by custom id, failed requests with their reason,
    and the problems of the file itself (counted in ``n_problems``, the first ones listed)."""

    answers: dict[str, Answer] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    n_problems: int = 0
    lines: int = 0
    n_bytes: int = 0

    def problem(self, reason: str) -> None:
        self.n_problems += 1
        if len(self.problems) < MAX_LISTED_PROBLEMS:
            self.problems.append(reason)

    def merge(self, other: OutputReading) -> None:
        """Fold another file's reading in (an error file's beside the output file's)."""
        for custom_id, answer in other.answers.items():
            if custom_id in self.answers:
                self.problem(f"a second answer for {custom_id}: the first is kept")
            else:
                self.answers[custom_id] = answer
                self.failed.pop(custom_id, None)
        for custom_id, reason in other.failed.items():
            if custom_id not in self.answers:
                self.failed.setdefault(custom_id, reason)
        for reason in other.problems:
            self.problem(reason)
        self.n_problems += other.n_problems - len(other.problems)
        self.lines += other.lines
        self.n_bytes += other.n_bytes


def _lines(handle: BinaryIO, max_line_bytes: int) -> Iterator[tuple[bytes | None, int]]:
    """Each line (None for one over the bound, skipped unread past it) and its byte count."""
    while True:
        line = handle.readline(max_line_bytes + 1)
        if not line:
            return
        if len(line) > max_line_bytes and not line.endswith(b"\n"):
            size = len(line)
            while line and not line.endswith(b"\n"):  # the rest of the over-long line, in bounded reads
                line = handle.readline(max_line_bytes + 1)
                size += len(line)
            yield None, size
            continue
        yield line, len(line)


def read_output(handle: BinaryIO, expected: Collection[str], *, limits: FileLimits | None = None,
                max_bytes: int | None = None) -> OutputReading:
    """The answers and failures of one output or error file, read line by line within bounds.

    ``expected``: the custom ids the batch asked for; a line naming another is a problem and its
    answer is not taken. ``max_bytes``: the most the file may hold (default: what the expected
    requests can make); reading stops there, and the requests not read yet stay unanswered.
    """
    limits = limits or FileLimits()
    cap = max_bytes if max_bytes is not None else limits.max_output_bytes(max(len(expected), 1))
    reading = OutputReading()
    wanted = set(expected)
    for number, (line, size) in enumerate(_lines(handle, limits.max_line_bytes), start=1):
        if reading.n_bytes + size > cap:
            reading.problem(f"the file is larger than its {len(wanted):,} requests can make ({cap:,} bytes): "
                            f"read to line {number - 1}, the rest left unread")
            break
        reading.n_bytes += size
        reading.lines += 1
        if line is None:
            reading.problem(f"line {number} is longer than {limits.max_line_bytes:,} bytes: not read")
            continue
        if not line.strip():
            continue
        _take(reading, number, line, wanted)
    return reading


def _take(reading: OutputReading, number: int, line: bytes, wanted: set[str]) -> None:
    try:
        item = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        reading.problem(f"line {number} is not JSON")
        return
    custom_id = item.get("custom_id") if isinstance(item, dict) else None
    if not isinstance(custom_id, str):
        reading.problem(f"line {number} names no custom_id")
        return
    if custom_id not in wanted:
        reading.problem(f"line {number} names a custom_id this batch did not ask for")
        return
    if custom_id in reading.answers or custom_id in reading.failed:
        reading.problem(f"line {number} answers {custom_id} again: the first line is kept")
        return
    error = item.get("error")
    response = item.get("response") if isinstance(item.get("response"), dict) else None
    if error:
        code = error.get("code") if isinstance(error, dict) else None
        reading.failed[custom_id] = f"the request failed at the provider ({_word(code) or 'no code given'})"
        return
    if response is None:
        reading.failed[custom_id] = "the line has neither a response nor an error"
        return
    status = response.get("status_code")
    body = response.get("body") if isinstance(response.get("body"), dict) else None
    if status != 200 or body is None:
        reading.failed[custom_id] = f"the request failed at the provider (HTTP {_word(status) or 'status missing'})"
        return
    answer = _answer(body)
    if answer is None:
        reading.failed[custom_id] = "the response holds no completion"
        return
    reading.answers[custom_id] = answer


def _word(value) -> str:
    """A provider's code as the engine keeps it: short, and only letters, digits and ``_-.``."""
    text = str(value) if value is not None else ""
    return "".join(c for c in text[:40] if c.isalnum() or c in "_-.")


def _answer(body: dict) -> Answer | None:
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message") if isinstance(choices[0].get("message"), dict) else {}
    text = message.get("content")
    if not isinstance(text, str):
        return None
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    tokens_in, tokens_out = usage.get("prompt_tokens"), usage.get("completion_tokens")
    reported = isinstance(tokens_in, int) and isinstance(tokens_out, int)
    return Answer(text=text, tokens_in=tokens_in if reported else -1, tokens_out=tokens_out if reported else -1,
                  finish_reason=choices[0].get("finish_reason"), usage_reported=reported)
