"""A provider's Batch API on 127.0.0.1: ``/v1/files`` and ``/v1/batches`` as the ``openai`` client speaks them.

A batch moves one state each time it is looked at (``validating → in_progress → finalizing →``
its ending), so a test drives it by polling. ``ending`` picks how batches end: ``completed``,
``failed`` (validation errors, no output), ``expired`` (output for the first ``expire_after``
requests, error lines for the rest). ``answer(line) -> str | int | None`` gives each request's
answer: the completion's text, an HTTP status for an error line, None for no line at all.
``refuse_upload`` makes ``POST /v1/files`` answer 400. The files it holds are in ``files``
(content included), so a test can search them for a document's text.
"""

from __future__ import annotations

import email.parser
import email.policy
import itertools
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from tests.conftest import LoopbackServer

STEPS = ("validating", "in_progress", "finalizing")


def default_answer(line: dict) -> str:
    return '{"entities":[],"facts":[]}'


class BatchServer(LoopbackServer):
    def __init__(self) -> None:
        self.files: dict[str, dict] = {}
        self.batches: dict[str, dict] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self.ending = "completed"
        self.expire_after = 0
        self.answer: Callable[[dict], str | int | None] = default_answer
        self.refuse_upload = False
        self.chat_calls = 0  # synchronous chat completions answered
        self.lines_asked: list[str] = []  # the custom_id of every request line a batch ran
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, payload, content_type: str = "application/json") -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("content-length") or 0))

            def do_GET(self) -> None:
                self._route("GET", b"")

            def do_DELETE(self) -> None:
                self._route("DELETE", b"")

            def do_POST(self) -> None:
                self._route("POST", self._body())

            def _route(self, method: str, body: bytes) -> None:
                url = urlparse(self.path)
                parts = url.path.rstrip("/").split("/")[2:]  # after /v1
                with server._lock:
                    server.requests.append((method, url.path))
                    status, payload, kind = server.handle(method, parts, parse_qs(url.query), body,
                                                          self.headers.get("content-type", ""))
                self._send(status, payload, kind)

        self._listen(Handler)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    def holding(self, text: str) -> list[str]:
        """The ids of the files whose content holds ``text``."""
        needle = text.encode()
        return [f for f, item in self.files.items() if needle in item["content"]]

    # -- the protocol ------------------------------------------------------------------------

    def handle(self, method: str, parts: list[str], query: dict, body: bytes, content_type: str):
        error = (404, {"error": {"message": "not found", "type": "invalid_request_error", "code": "not_found"}},
                 "application/json")
        if parts[:1] == ["files"]:
            if method == "POST" and len(parts) == 1:
                return self.upload(body, content_type)
            if method == "GET" and len(parts) == 1:
                purpose = query.get("purpose", [None])[0]
                data = [self.file_object(f) for f, item in self.files.items() if purpose in (None, item["purpose"])]
                return 200, {"object": "list", "data": data, "has_more": False}, "application/json"
            if len(parts) >= 2 and parts[1] not in self.files:
                return error
            if method == "GET" and len(parts) == 2:
                return 200, self.file_object(parts[1]), "application/json"
            if method == "GET" and parts[2:] == ["content"]:
                return 200, self.files[parts[1]]["content"], "application/octet-stream"
            if method == "DELETE" and len(parts) == 2:
                del self.files[parts[1]]
                return 200, {"id": parts[1], "object": "file", "deleted": True}, "application/json"
        if parts == ["chat", "completions"] and method == "POST":  # the same provider answers synchronously too
            return self.chat(json.loads(body))
        if parts[:1] == ["batches"]:
            if method == "POST" and len(parts) == 1:
                return self.create(json.loads(body))
            if method == "GET" and len(parts) == 1:
                data = [self.batches[b] for b in self.batches]
                return 200, {"object": "list", "data": data, "has_more": False}, "application/json"
            if len(parts) >= 2 and parts[1] not in self.batches:
                return error
            if method == "GET" and len(parts) == 2:
                return 200, self.advance(parts[1]), "application/json"
            if method == "POST" and parts[2:] == ["cancel"]:
                batch = self.batches[parts[1]]
                if batch["status"] in STEPS:
                    batch["status"] = "cancelling"
                return 200, batch, "application/json"
        return error

    def chat(self, body: dict):
        """One synchronous chat completion, answered as a batch line with that body would be."""
        self.chat_calls += 1
        answer = self.answer({"custom_id": f"chat-{self.chat_calls}", "body": body})
        if not isinstance(answer, str):
            return answer or 500, {"error": {"message": "scripted", "type": "server_error"}}, "application/json"
        return 200, {"id": self.new_id("chatcmpl"), "object": "chat.completion", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": answer}}],
                     "usage": {"prompt_tokens": 700, "completion_tokens": 90, "total_tokens": 790}}, "application/json"

    def file_object(self, file_id: str) -> dict:
        item = self.files[file_id]
        return {"id": file_id, "object": "file", "bytes": len(item["content"]), "created_at": item["created_at"],
                "filename": item["filename"], "purpose": item["purpose"], "status": "processed"}

    def upload(self, body: bytes, content_type: str):
        if self.refuse_upload:
            return 400, {"error": {"message": "scripted refusal", "type": "invalid_request_error",
                                   "code": "invalid_file"}}, "application/json"
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"content-type: " + content_type.encode() + b"\r\n\r\n" + body)
        fields: dict = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            fields[name] = (part.get_filename(), part.get_payload(decode=True))
        filename, content = fields["file"]
        purpose = fields["purpose"][1].decode()
        file_id = self.new_id("file")
        expiry = {key[len("expires_after["):-1]: value[1].decode() for key, value in fields.items()
                  if key.startswith("expires_after[")}  # the form's nested fields, as the client sends them
        self.files[file_id] = {"filename": filename, "content": content, "purpose": purpose,
                               "created_at": int(time.time()) + len(self.files), "expires_after": expiry or None}
        return 200, self.file_object(file_id), "application/json"

    def create(self, params: dict):
        if params.get("input_file_id") not in self.files:
            return 400, {"error": {"message": "no such file", "type": "invalid_request_error",
                                   "code": "invalid_file"}}, "application/json"
        batch_id = self.new_id("batch")
        self.batches[batch_id] = {
            "id": batch_id, "object": "batch", "endpoint": params["endpoint"], "errors": None,
            "input_file_id": params["input_file_id"], "completion_window": params["completion_window"],
            "status": "validating", "output_file_id": None, "error_file_id": None,
            "created_at": int(time.time()) + len(self.batches), "metadata": params.get("metadata") or {},
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "output_expires_after": params.get("output_expires_after"),
        }
        return 200, self.batches[batch_id], "application/json"

    def advance(self, batch_id: str) -> dict:
        batch = self.batches[batch_id]
        status = batch["status"]
        if status == "cancelling":
            batch["status"] = "cancelled"
        elif status in STEPS[:-1]:
            batch["status"] = STEPS[STEPS.index(status) + 1]
        elif status == "finalizing":
            self.finish(batch)
        return batch

    def finish(self, batch: dict) -> None:
        if self.ending == "failed":
            batch["status"] = "failed"
            batch["errors"] = {"object": "list", "data": [{"code": "invalid_json_line", "message": "scripted",
                                                           "line": 1, "param": None}]}
            return
        lines = [json.loads(line) for line in self.files[batch["input_file_id"]]["content"].splitlines() if line]
        output, errors = [], []
        for n, line in enumerate(lines):
            if self.ending == "expired" and n >= self.expire_after:
                errors.append({"id": self.new_id("req"), "custom_id": line["custom_id"], "response": None,
                               "error": {"code": "batch_expired", "message": "not run before the batch expired"}})
                continue
            self.lines_asked.append(line["custom_id"])
            answer = self.answer(line)
            if answer is None:
                continue
            if isinstance(answer, int):
                errors.append({"id": self.new_id("req"), "custom_id": line["custom_id"],
                               "response": {"status_code": answer, "request_id": "r", "body": {"error": {}}},
                               "error": None})
                continue
            output.append({"id": self.new_id("req"), "custom_id": line["custom_id"], "error": None, "response": {
                "status_code": 200, "request_id": "r", "body": {
                    "id": "chatcmpl", "object": "chat.completion", "created": 0, "model": line["body"]["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": answer}}],
                    "usage": {"prompt_tokens": 700, "completion_tokens": 90, "total_tokens": 790}}}})
        for name, rows in (("output_file_id", output), ("error_file_id", errors)):
            if rows:
                file_id = self.new_id("file")
                self.files[file_id] = {"filename": f"{batch['id']}_{name}.jsonl", "purpose": "batch_output",
                                       "content": b"".join(json.dumps(r).encode() + b"\n" for r in rows),
                                       "created_at": int(time.time())}
                batch[name] = file_id
        batch["status"] = "expired" if self.ending == "expired" else "completed"
        batch["request_counts"] = {"total": len(lines), "completed": len(output), "failed": len(errors)}
