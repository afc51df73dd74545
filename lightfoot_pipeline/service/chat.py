"""The OpenAI-compatible chat endpoint of the service, for clients that already speak it (Open WebUI,
the ``openai`` library, editors' assistants)::

    GET  /v1/models             one model per retrieval mode: ``lightfoot`` and ``lightfoot-deep``
    GET  /v1/models/ID          one of them
    POST /v1/chat/completions   the answer to the conversation's last user message, from the
                                principal's view, streamed (``"stream": true``: server-sent events)
                                or not

A completion is the service's answer to ``/query``'s question, made by the same calls:
:meth:`QueryService.retrieve` then :meth:`QueryService.answer` (``lightfoot``), or
:meth:`QueryService.deep` (``lightfoot-deep``), on the view of the principal the bearer token
names, within the same budgets (the service's and the principal's), the same rate limits and the
same work pools as ``/query``; every model call is in the cost ledger as theirs are. The reply's
content is the answer, then its sources: the documents of the passages the answer was given (each
one the principal may read, being of its view), numbered, with their titles; the same list is the
completion's ``citations`` field (``doc_id``, ``title``, ``source``). ``usage`` gives the answer
call's tokens as the ledger counts them (the deep mode's: the sum of its calls).

**The conversation as context.** The messages before the last user message are the principal's
own conversation: up to :data:`HISTORY_TURNS` of its latest user and assistant turns, at most
:data:`HISTORY_CHARS` characters together (the oldest dropped first, a turn never cut), go to the
answer model before the retrieved knowledge and the question, so that a follow-up ("and where was
it founded?") is read in its context. Retrieval itself runs on the last message alone. The client's
system and developer messages are accepted and not passed on: the answer model's instructions are
the service's. The deep mode answers the last message alone.

**What a body may hold** (:func:`parse_chat_request`; anything else gets 400): ``model`` (one of
:data:`CHAT_MODELS`), ``messages`` (1 to :data:`MAX_MESSAGES`, each ``{"role", "content", "name"?}``
with a role of :data:`ROLES`, a content of text or of text parts, at most
:data:`MAX_MESSAGE_CHARS` characters; the last a user message of at most ``MAX_QUESTION_CHARS``),
``stream``, ``stream_options.include_usage``, and the sampling fields clients send by habit
(:data:`ACCEPTED_FIELDS`: accepted and not used, since the service sets its own). Tools, function
calls, tool messages and non-text parts are refused: this endpoint offers no tools, so a
conversation cannot carry a call to one.

**Errors** are in the OpenAI shape, ``{"error": {"message", "type", "param", "code"}}``
(:func:`error_payload`), with the status ``/query`` would give: 400 for a body it refuses, 401
(from the token check), 429 past a rate or when the principal's answer budget is spent (``code``
``insufficient_quota``), 502 when the model endpoint fails, 503 when the service has no answer
model or is busy. The gate and the token check answer every path under ``/v1/`` in this shape too.
"""

from __future__ import annotations

import functools
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.retrieval.deep import DeepQueryError
from lightfoot_pipeline.retrieval.retrieve import RetrievalError
from lightfoot_pipeline.service.auth import request_principal
from lightfoot_pipeline.service.queries import MAX_QUESTION_CHARS, MAX_TOP_K, NoSnapshotLoaded, QueryService

API_PREFIX = "/v1/"
CHAT_MODELS = {"lightfoot": "lightfoot", "lightfoot-deep": "deep"}  # model id -> retrieval mode
MAX_MESSAGES = 64
MAX_MESSAGE_CHARS = 16_000
HISTORY_TURNS = 6  # earlier user and assistant turns given to the answer model, the latest kept
HISTORY_CHARS = 6_000  # their characters together
MAX_NAME_CHARS = 64  # a message's "name" (accepted, not used)
ROLES = ("system", "developer", "user", "assistant")
# Fields clients send by habit: accepted, not used (the service sets its own sampling and length).
ACCEPTED_FIELDS = frozenset({"temperature", "top_p", "max_tokens", "max_completion_tokens", "user", "seed", "stop",
                             "presence_penalty", "frequency_penalty", "logit_bias", "metadata", "store",
                             "parallel_tool_calls", "reasoning_effort"})
REFUSED_FIELDS = frozenset({"tools", "tool_choice", "functions", "function_call", "response_format", "logprobs",
                            "top_logprobs", "audio", "modalities", "prediction", "web_search_options"})
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 405: "invalid_request_error", 408: "timeout", 413: "invalid_request_error",
               415: "invalid_request_error", 421: "invalid_request_error", 422: "invalid_request_error",
               429: "rate_limit_error"}
BUDGET_SPENT = "insufficient_quota"


def error_payload(status: int, message: str, code: str | None = None, param: str | None = None) -> dict:
    """An error as OpenAI's API gives it."""
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "server_error"), "param": param,
                      "code": code}}


def is_api_path(path: str) -> bool:
    """Whether a path is the chat endpoint's (its errors take the OpenAI shape)."""
    return path.startswith(API_PREFIX)


class ChatError(LightfootError):
    """A response other than 200, in the OpenAI error shape."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None,
                 headers: dict | None = None, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.code, self.param, self.headers = status, code, param, dict(headers or {})
        if close:  # a body left unread (413, 408): the connection is not reused
            self.headers["connection"] = "close"


@dataclass(frozen=True)
class ChatRequest:
    model: str
    mode: str  # "lightfoot" or "deep"
    question: str
    history: tuple[dict, ...]  # the earlier turns given to the answer model (bounded)
    stream: bool = False
    include_usage: bool = False


def _text(content, where: str) -> str:
    """A message's content as text: a string, or a list of ``{"type": "text", "text": ...}`` parts."""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        if len(content) > MAX_MESSAGES:
            raise ChatError(400, f"{where}.content has more than {MAX_MESSAGES} parts", param="messages")
        pieces = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ChatError(400, f"{where}.content: only text parts are accepted ({{\"type\": \"text\", "
                                     "\"text\": ...}})", param="messages")
            pieces.append(part["text"])
        text = "\n".join(pieces)
    else:
        raise ChatError(400, f"{where}.content must be text or a list of text parts", param="messages")
    if len(text) > MAX_MESSAGE_CHARS:
        raise ChatError(400, f"{where}.content is longer than {MAX_MESSAGE_CHARS} characters", param="messages")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ChatError(400, f"{where}.content holds a lone surrogate at character {err.start}, which is not text",
                        param="messages") from None
    return text


def conversation_context(turns: list[tuple[str, str]]) -> tuple[dict, ...]:
    """The earlier turns the answer model is given: the latest :data:`HISTORY_TURNS` user and
    assistant turns whose characters together stay within :data:`HISTORY_CHARS`, in order."""
    kept: list[dict] = []
    total = 0
    for role, text in reversed(turns):
        if role not in ("user", "assistant") or not text.strip():
            continue
        if len(kept) == HISTORY_TURNS or total + len(text) > HISTORY_CHARS:
            break
        kept.append({"role": role, "content": text})
        total += len(text)
    return tuple(reversed(kept))


def parse_chat_request(body: bytes) -> ChatRequest:
    """The request of a POST /v1/chat/completions body, or ChatError (400) saying what is wrong."""
    try:
        payload = json.loads(body or b"")
    except RecursionError:
        raise ChatError(400, "the body is nested too deeply") from None
    except ValueError as err:
        raise ChatError(400, f"the body is not JSON: {err}") from None
    if not isinstance(payload, dict):
        raise ChatError(400, "the body must be a JSON object")
    refused = sorted(set(payload) & REFUSED_FIELDS)
    if refused:
        raise ChatError(400, f"{refused[0]} is not supported: this endpoint offers no tools and answers in text",
                        param=refused[0])
    unknown = set(payload) - {"model", "messages", "stream", "stream_options", "n"} - ACCEPTED_FIELDS
    if unknown:
        names = ", ".join(sorted(ascii(name)[:40] for name in unknown)[:10])
        raise ChatError(400, f"unknown fields: {names}", param=sorted(unknown)[0][:40])
    model = payload.get("model")
    if model not in CHAT_MODELS:
        raise ChatError(404 if isinstance(model, str) else 400,
                        f"model must be one of {', '.join(CHAT_MODELS)}", code="model_not_found", param="model")
    if payload.get("n", 1) != 1:
        raise ChatError(400, "n must be 1", param="n")
    stream = payload.get("stream", False)
    if not isinstance(stream, bool):
        raise ChatError(400, "stream must be true or false", param="stream")
    options = payload.get("stream_options") or {}
    if not isinstance(options, dict) or set(options) - {"include_usage", "include_obfuscation"}:
        raise ChatError(400, "stream_options may hold include_usage only", param="stream_options")
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise ChatError(400, "stream_options.include_usage must be true or false", param="stream_options")
    messages = payload.get("messages")
    if not isinstance(messages, list) or not 1 <= len(messages) <= MAX_MESSAGES:
        raise ChatError(400, f"messages must be a list of 1 to {MAX_MESSAGES} messages", param="messages")
    turns = []
    for number, message in enumerate(messages):
        where = f"messages[{number}]"
        if not isinstance(message, dict):
            raise ChatError(400, f"{where} must be an object", param="messages")
        role = message.get("role")
        if role in ("tool", "function") or "tool_calls" in message or "function_call" in message:
            raise ChatError(400, f"{where}: tool calls and tool results are not accepted: this endpoint offers "
                                 "no tools", param="messages")
        if role not in ROLES:
            raise ChatError(400, f"{where}.role must be one of {', '.join(ROLES)}", param="messages")
        extra = set(message) - {"role", "content", "name", "refusal"}
        if extra:
            raise ChatError(400, f"{where} has unknown fields: {', '.join(sorted(ascii(n)[:40] for n in extra))}",
                            param="messages")
        name = message.get("name")
        if name is not None and not (isinstance(name, str) and len(name) <= MAX_NAME_CHARS):
            raise ChatError(400, f"{where}.name must be a string of at most {MAX_NAME_CHARS} characters",
                            param="messages")
        content = message.get("content")
        turns.append((role, "" if content is None and role == "assistant" else _text(content, where)))
    role, question = turns[-1]
    if role != "user" or not question.strip():
        raise ChatError(400, "the last message must be a user message with text", param="messages")
    if len(question) > MAX_QUESTION_CHARS:
        raise ChatError(400, f"the last user message is longer than {MAX_QUESTION_CHARS} characters",
                        param="messages")
    return ChatRequest(model, CHAT_MODELS[model], question, conversation_context(turns[:-1]), stream,
                       include_usage)


def citations(passages: list[dict], titles: dict[str, str | None] | None = None) -> list[dict]:
    """The documents of ``passages`` (each with ``doc_id`` and, where known, ``title`` and
    ``location``), once each, in order."""
    cited: dict[str, dict] = {}
    for passage in passages:
        doc_id = passage.get("doc_id")
        if doc_id and doc_id not in cited:
            title = passage.get("title") if "title" in passage else (titles or {}).get(doc_id)
            cited[doc_id] = {"doc_id": doc_id, "title": title, "source": passage.get("location")}
    return list(cited.values())


def reply_text(answer: str, cited: list[dict]) -> str:
    """The reply's content: the answer, then its numbered sources."""
    if not cited:
        return answer
    lines = [answer, "", "Sources:"]
    lines += [f"[{n}] {c['title'] or c['doc_id']} ({c['doc_id']})" for n, c in enumerate(cited, start=1)]
    return "\n".join(lines)


def models_payload() -> dict:
    return {"object": "list", "data": [model_card(name) for name in CHAT_MODELS]}


def model_card(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "lightfoot"}


def chat_routes(service: QueryService, run_retrieval: Callable[..., Awaitable], run_answer: Callable[..., Awaitable],
                read_body: Callable[[Request], Awaitable[bytes]], private_error: Callable[[str, str], str],
                http_error: type[Exception]) -> list[Route]:
    """The routes of the chat endpoint. ``run_retrieval`` and ``run_answer`` run a function in the
    service's retrieval and answer pools (app.py), whose refusal when full is ``http_error`` (with
    ``status`` and ``headers``); ``read_body`` reads a request's body within its bounds or raises
    ``http_error``; ``private_error`` logs an inside failure and names it by an error id."""

    def failure(err: ChatError) -> Response:
        return _json(err.status, error_payload(err.status, str(err), err.code, err.param), err.headers)

    async def models(request: Request) -> Response:
        return _json(200, models_payload())

    async def model(request: Request) -> Response:
        name = request.path_params["model"]
        if name not in CHAT_MODELS:
            return failure(ChatError(404, f"no model {name[:80]!r}; the models are {', '.join(CHAT_MODELS)}",
                                     code="model_not_found", param="model"))
        return _json(200, model_card(name))

    async def answered(chat: ChatRequest, principal) -> tuple[str, list[dict], dict]:
        """(answer, citations, usage) of a chat request, or ChatError."""
        if service.answerer is None:
            raise ChatError(503, f"this service gives no answers: {service.answer_status}",
                            code="answers_unavailable")
        if chat.mode == "deep":
            payload = await run_answer(functools.partial(service.deep, chat.question, principal=principal))
            deep = payload.get("deep") or {}
            served_titles = await run_retrieval(service.document_titles, principal,
                                                [p["doc_id"] for p in deep.get("passages", [])])
            cited = citations(deep.get("passages", []), served_titles)
            tokens = (deep.get("tokens_in", 0), deep.get("tokens_out", 0))
        else:
            top_k = min(service.answerer.n_passages, MAX_TOP_K)
            payload, pending = await run_retrieval(functools.partial(
                service.retrieve, chat.question, top_k=top_k, answer=True, principal=principal, history=chat.history))
            if pending is not None:
                await run_answer(service.answer, payload, pending)
            cited = citations(payload["passages"])
            record = payload.get("answer") or {}
            if record.get("error"):
                raise ChatError(502, private_error(f"the model call failed ({record.get('error_kind') or 'no answer'})",
                                                   record["error"]))
            tokens = (record.get("tokens_in", 0), record.get("tokens_out", 0))
        answer = payload.get("answer")
        answer = answer.get("answer") if isinstance(answer, dict) else answer
        if not answer:
            status = payload.get("answer_status") or "no answer"
            # no call was made (the lightfoot mode), or the deep mode stopped with its budget spent
            if (chat.mode != "deep" and payload.get("answer") is None) or service.budget_of(principal).exhausted:
                raise ChatError(429, status, code=BUDGET_SPENT)
            raise ChatError(502, private_error("the answer model gave no answer", status))
        usage = {"prompt_tokens": tokens[0], "completion_tokens": tokens[1], "total_tokens": tokens[0] + tokens[1]}
        return answer, cited, usage

    async def completions(request: Request) -> Response:
        try:
            try:
                chat = parse_chat_request(await read_body(request))
            except http_error as err:
                raise ChatError(err.status, str(err), headers=err.headers,  # type: ignore[attr-defined]
                                close=err.close) from None  # type: ignore[attr-defined]
            principal = request_principal(request.scope)
            try:
                answer, cited, usage = await answered(chat, principal)
            except http_error as err:  # a pool is full
                raise ChatError(err.status, str(err), headers=err.headers) from None  # type: ignore[attr-defined]
        except ChatError as err:
            return failure(err)
        except ClientDisconnect:
            return Response(status_code=400)
        except NoSnapshotLoaded as err:
            return failure(ChatError(503, str(err), headers={"retry-after": "5"}))
        except RetrievalError as err:
            return failure(ChatError(422, private_error("retrieval cannot run as configured", str(err))))
        except DeepQueryError as err:
            return failure(ChatError(502, private_error("the model endpoint cannot serve", str(err))))
        except Exception as err:  # a bug must not take the server down; the details stay in the log
            return failure(ChatError(500, private_error("the chat completion failed inside the service", repr(err))))
        completion_id, created = "chatcmpl-" + secrets.token_hex(12), int(time.time())
        content = reply_text(answer, cited)
        if not chat.stream:
            return _json(200, {"id": completion_id, "object": "chat.completion", "created": created,
                               "model": chat.model, "choices": [{
                                   "index": 0, "message": {"role": "assistant", "content": content},
                                   "finish_reason": "stop", "logprobs": None}],
                               "usage": usage, "citations": cited})
        return StreamingResponse(_events(completion_id, created, chat, content, cited, usage),
                                 media_type="text/event-stream", headers={"cache-control": "no-store"})

    return [
        Route(API_PREFIX + "models", models, methods=["GET"]),
        Route(API_PREFIX + "models/{model}", model, methods=["GET"]),
        Route(API_PREFIX + "chat/completions", completions, methods=["POST"]),
    ]


async def _events(completion_id: str, created: int, chat: ChatRequest, content: str, cited: list[dict],
                  usage: dict) -> AsyncIterator[bytes]:
    """The completion as OpenAI streams it: the role, the content, the finish (with the citations),
    the usage when asked for, then ``[DONE]``."""
    def chunk(delta: dict, finish: str | None = None, **extra) -> bytes:
        body = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": chat.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra}
        return b"data: " + _encode(body) + b"\n\n"

    yield chunk({"role": "assistant", "content": ""})
    yield chunk({"content": content})
    yield chunk({}, "stop", citations=cited)
    if chat.include_usage:
        yield b"data: " + _encode({"id": completion_id, "object": "chat.completion.chunk", "created": created,
                                   "model": chat.model, "choices": [], "usage": usage}) + b"\n\n"
    yield b"data: [DONE]\n\n"


def _encode(payload: dict) -> bytes:
    return json.dumps(payload).encode("ascii")


def _json(status: int, payload: dict, headers: dict | None = None) -> Response:
    return Response(_encode(payload), status_code=status, media_type="application/json", headers=headers)
