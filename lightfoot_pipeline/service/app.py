"""The query service's ASGI application: routes, token check, request parsing and work pools.

Endpoints (JSON in and out)::

    POST /query     {"question": "...", "top_k": 10, "answer": true, "rerank": true, "mode": "lightfoot"}
                    ("mode": "deep": a multi-step answer from a working memory, retrieval/deep)
    GET  /status    whom it answers as, the served snapshot and the counts of that principal's
                    view, reloads, the reranker, its own answer spend and budget (the operator's:
                    every principal's and the totals) (authenticated)
    GET  /snapshot  the manifest of the principal's view of the served snapshot and whether the
                    published one is the one served (the operator: its id) (authenticated)
    GET  /health    {"status": "ok" | "no_snapshot"}: liveness, open to all, nothing more
    GET  /          the web page (also at /batch/ID), and POST /explain/query, GET /explain/entity,
                    /explain/fact, /explain/doc, /explain/batch (page.py)
    GET  /v1/models, POST /v1/chat/completions   the OpenAI-compatible chat endpoint (chat.py)
    POST /mcp       the MCP server over streamable HTTP, stateless, JSON responses (mcp_server.py)

Every endpoint but ``/health`` and the page and its static files needs ``Authorization: Bearer
<token>`` when the service has tokens (auth.py); a missing or wrong token gets 401 with
``WWW-Authenticate``. The token names the principal the request is answered as; a service
without tokens answers every request as ``local_principal`` (``lightfoot serve --as``; by default
the public documents only). Every endpoint answers from that principal's view (queries.py), and
every response and prompt holds nothing of a document it may not read. GET endpoints answer HEAD too, and query strings are ignored but by the
``/explain`` routes. Every request first passes the gate (gate.py): its
``Host``, its framing, its content type and its client's rate, and every response carries the
security headers and an access-log line.

Errors tell a client what it can act on and nothing of the deployment: no model endpoint, no
model name, no filesystem path. What went wrong inside is logged with an error id that the
response names (:func:`private_error`).

What the application bounds (:class:`HttpLimits`, which holds the server's bounds too: see
server.py):

- **Bodies**: a ``Content-Length`` above ``max_body_bytes`` gets 413 before a byte of the body is
  read; a chunked body is counted as it arrives and cut at the limit (413). A body must arrive
  within ``body_timeout_s`` (408).
- **Rates**: each client address may make ``client_rate`` requests a second (``client_burst`` at
  once), each token ``token_rate`` (``token_burst``); past that, 429 with ``Retry-After``.
- **Work**: retrieval runs in a pool of ``workers`` threads, with at most ``queue`` queries
  waiting for one; a query beyond that gets 503 with ``Retry-After`` at once, rather than piling
  up. Answer calls (seconds each) have a pool of their own, the model client's concurrency wide,
  so that they never hold the retrieval workers; a deletion's dry run (``/explain/doc``) has a
  pool of one thread, so that however many ask, it takes one core at most. The worker threads run at a lower scheduling
  priority (``worker_nice``) than the event loop.
- **Malformed requests** get 400 with the reason: invalid JSON or UTF-8, lone surrogates, nesting
  too deep to parse, unknown fields, values of the wrong type or range.

The chat endpoint and the MCP server are doors onto the same calls, not assemblies of their own:
a chat completion is ``/query``'s retrieval and answer (QueryService), in the same pools, within
the same budgets; an MCP tool is ``/query`` without an answer or an ``/explain`` route
(explanations.py), in the same pools. Both sit behind the same gate, token check and rate limits,
and their bodies have the same bounds (``max_body_bytes``, ``body_timeout_s``).

The event loop only parses, authenticates and routes: retrieval and JSON encoding run in the
worker threads, so ``/health`` answers within milliseconds while every worker is busy.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import anyio.to_thread
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.retrieval.deep import DeepQueryError
from lightfoot_pipeline.retrieval.retrieve import RetrievalError
from lightfoot_pipeline.service.auth import PRINCIPAL_SCOPE_KEY, PUBLIC_PRINCIPAL, Tokens, request_principal
from lightfoot_pipeline.service.chat import chat_routes, error_payload, is_api_path
from lightfoot_pipeline.service.explanations import Explanations
from lightfoot_pipeline.service.gate import TOKEN_SCOPE_KEY, Gate, HostPolicy, RateLimiter, TokenRate
from lightfoot_pipeline.service.mcp_server import build_mcp_server, http_principal
from lightfoot_pipeline.service.page import BATCH_PAGE_PREFIX, STATIC_PREFIX, page_routes
from lightfoot_pipeline.service.queries import (
    DEFAULT_TOP_K,
    MAX_QUESTION_CHARS,
    MAX_TOP_K,
    NoSnapshotLoaded,
    QueryService,
)

log = logging.getLogger(__name__)

QUERY_MODES = ("lightfoot", "deep")
OPEN_PATHS = frozenset({"/health", "/"})  # answered without a token; so is everything under these prefixes:
OPEN_PREFIXES = (STATIC_PREFIX, BATCH_PAGE_PREFIX)  # the page's files, and the page opening a batch
REALM = "lightfoot"
MCP_PATH = "/mcp"
DRY_RUN_NICE = 15  # the deletion preview's thread: below the retrieval workers


@dataclass(frozen=True)
class HttpLimits:
    """The bounds of one server: the application's (see the module docstring) and uvicorn's (server.py)."""

    max_body_bytes: int = 64 * 1024
    workers: int = field(default_factory=lambda: os.cpu_count() or 2)  # retrieval threads: queries at once
    queue: int = 64  # queries waiting for a retrieval thread before 503
    answer_workers: int = 8  # answer calls at once (the model client's concurrency)
    answer_queue: int = 64  # answer calls waiting before 503
    max_connections: int = 1000
    max_connections_per_client: int = 32  # open connections of one client address, within max_connections
    client_rate: float = 20.0  # requests a second of one client address (0: no limit)
    client_burst: float = 40.0
    token_rate: float = 20.0  # requests a second with one token (0: no limit)
    token_burst: float = 40.0
    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    keep_alive_s: float = 5.0
    backlog: int = 1024
    worker_nice: int = 5  # scheduling priority of the worker threads, below the event loop's (Linux)

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "workers", "answer_workers", "max_connections", "max_connections_per_client",
                     "backlog"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        RateLimiter(self.client_rate, self.client_burst)  # each refuses a rate it cannot keep
        RateLimiter(self.token_rate, self.token_burst)
        if not 0 <= self.worker_nice <= 19:
            raise ValueError(f"worker_nice must be from 0 to 19, got {self.worker_nice}")
        for name in ("queue", "answer_queue"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


# -- requests ------------------------------------------------------------------------------------


class BadRequest(LightfootError, ValueError):
    """A request the service refuses with 400 (the message says why)."""


def parse_query_request(body: bytes) -> dict:
    """The arguments of a POST /query body, or BadRequest saying what is wrong."""
    try:
        payload = json.loads(body or b"")
    except RecursionError:
        raise BadRequest("the body is nested too deeply") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, an integer too long to read
        raise BadRequest(f"the body is not JSON: {err}") from None
    if not isinstance(payload, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = set(payload) - {"question", "top_k", "answer", "rerank", "mode"}
    if unknown:
        names = ", ".join(sorted(ascii(name)[:40] for name in unknown))
        raise BadRequest(f"unknown fields: {names}; the fields are question, top_k, answer, rerank, mode")
    question = payload.get("question")
    if not isinstance(question, str) or not question.strip():
        raise BadRequest("question must be a non-empty string")
    if len(question) > MAX_QUESTION_CHARS:
        raise BadRequest(f"question is longer than {MAX_QUESTION_CHARS} characters")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError as err:
        raise BadRequest(f"question holds a lone surrogate (\\u{ord(question[err.start]):04x} at "
                         f"character {err.start}), which is not text") from None
    top_k = payload.get("top_k", DEFAULT_TOP_K)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
        raise BadRequest(f"top_k must be an integer from 1 to {MAX_TOP_K}")
    flags = {}
    for name in ("answer", "rerank"):
        value = payload.get(name, True)
        if not isinstance(value, bool):
            raise BadRequest(f"{name} must be true or false")
        flags[name] = value
    mode = payload.get("mode", "lightfoot")
    if mode not in QUERY_MODES:
        raise BadRequest(f"mode must be one of {', '.join(QUERY_MODES)}")
    if mode == "deep" and not flags["answer"]:
        raise BadRequest("mode deep answers through the model at every step; it cannot run with answer false")
    deep = {"mode": mode} if mode != "lightfoot" else {}  # the default mode is left implicit
    return {"question": question, "top_k": top_k, **flags, **deep}


class HttpError(LightfootError):
    """A response other than 200, with its status and message."""

    def __init__(self, status: int, message: str, headers: dict | None = None, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}
        self.close = close


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The request body, refused (413) as soon as it is known to pass ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        declared = declared.strip()
        if not (declared.isascii() and declared.isdigit()):
            raise HttpError(400, "Content-Length must be a non-negative integer", close=True)
        if len(declared) > 18 or int(declared) > limit:
            raise HttpError(413, f"the body is larger than {limit:,} bytes", close=True)
    chunks, size = [], 0
    try:
        with anyio.fail_after(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise HttpError(413, f"the body is larger than {limit:,} bytes", close=True)
                chunks.append(chunk)
    except TimeoutError:
        raise HttpError(408, f"the body did not arrive within {timeout_s:g}s", close=True) from None
    return b"".join(chunks)


def json_response(status: int, payload: dict | bytes, headers: dict | None = None, close: bool = False) -> Response:
    body = payload if isinstance(payload, bytes) else encode(payload)
    response = Response(body, status_code=status, media_type="application/json", headers=headers)
    if close:
        response.headers["connection"] = "close"
    return response


def encode(payload: dict) -> bytes:
    """JSON as the service sends it (ASCII, so no text can fail to encode)."""
    return json.dumps(payload, default=str).encode("ascii")


def private_error(what: str, detail: str) -> str:
    """A client's message for a failure inside the service: ``what`` failed, with an error id; the
    ``detail`` (which may name an endpoint, a model or a path) goes to the service's log only."""
    error_id = secrets.token_hex(4)
    log.error("error %s: %s: %s", error_id, what, detail)
    return f"{what} (error {error_id}; the details are in the service's log)"


def redact_answers(payload: dict) -> dict:
    """``payload`` with what an answer or a model call says of the model taken out: its model
    name is dropped and its error, if any, replaced by :func:`private_error`'s line."""
    def scrub(record: dict) -> None:
        record.pop("model", None)
        if record.get("error"):
            record["error"] = private_error(f"the model call failed ({record.get('error_kind') or 'no answer'})",
                                            record["error"])

    if isinstance(payload.get("answer"), dict):
        scrub(payload["answer"])
    for call in payload.get("calls") or []:
        if isinstance(call, dict):
            scrub(call)
    return payload


def _may_have_body(scope) -> bool:
    """Whether a request announced a body (which a response sent before reading it leaves unread)."""
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


# -- work pools ----------------------------------------------------------------------------------


_thread_state = threading.local()


def _lower_priority(nice: int) -> None:
    """Lower the calling thread's scheduling priority to ``nice`` once (Linux: per thread; elsewhere
    a no-op). The event loop's thread stays at the process's priority, so the kernel runs it first
    when a connection or a /health probe arrives while the workers compute."""
    if getattr(_thread_state, "nice", 0) >= nice:
        return
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    _thread_state.nice = nice


class WorkPool:
    """At most ``workers`` calls run at once, each in a thread; at most ``queue`` more wait; a call
    beyond that is refused at once (503). Used from the event loop only, so the count needs no lock."""

    def __init__(self, name: str, workers: int, queue: int, nice: int = 0) -> None:
        self.name = name
        self.workers = workers
        self.bound = workers + queue
        self.nice = nice
        self.limiter: anyio.CapacityLimiter | None = None  # made in the server's event loop
        self.active = 0  # running or waiting

    async def run(self, fn: Callable, *args):
        if self.active >= self.bound:
            raise HttpError(503, f"the service is busy: {self.active} {self.name} calls are running or waiting; "
                                 "retry shortly", headers={"retry-after": "1"})
        if self.limiter is None:
            self.limiter = anyio.CapacityLimiter(self.workers)
        self.active += 1
        try:
            return await anyio.to_thread.run_sync(self._call, fn, args, limiter=self.limiter)
        finally:
            self.active -= 1

    def _call(self, fn: Callable, args: tuple):
        if self.nice:
            _lower_priority(self.nice)
        return fn(*args)


# -- the application -----------------------------------------------------------------------------


class TokenAuth:
    """ASGI middleware: every request but those to OPEN_PATHS must carry an accepted bearer token,
    and is answered as the principal it names; without tokens, every request is answered as
    ``local_principal``."""

    def __init__(self, app, tokens: Tokens | None, local_principal: Principal = PUBLIC_PRINCIPAL) -> None:
        self.app = app
        self.tokens = tokens if tokens is not None and tokens.configured else None
        self.local_principal = local_principal

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or scope["path"].startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)  # the page and its files: no data, no principal
            return
        if self.tokens is None:
            scope[PRINCIPAL_SCOPE_KEY] = self.local_principal
            await self.app(scope, receive, send)
            return
        header = next((value for name, value in scope["headers"] if name == b"authorization"), None)
        presented, identity = self.tokens.authenticate_header(
            header.decode("utf-8", "surrogateescape") if header else None)
        if identity is not None:
            scope[TOKEN_SCOPE_KEY] = identity.token_id  # for the token's rate and the access log
            scope[PRINCIPAL_SCOPE_KEY] = identity.principal
            await self.app(scope, receive, send)
            return
        if not presented:
            challenge, message = f'Bearer realm="{REALM}"', "a bearer token is required: Authorization: Bearer <token>"
        else:
            challenge, message = f'Bearer realm="{REALM}", error="invalid_token"', "the token is not valid"
        body = error_payload(401, message, code="invalid_api_key") if is_api_path(scope["path"]) else {"error": message}
        response = json_response(401, body, headers={"www-authenticate": challenge}, close=_may_have_body(scope))
        await response(scope, receive, send)


class McpEndpoint:
    """ASGI endpoint of the MCP server's streamable HTTP transport (stateless, JSON responses):
    the body is read within the service's bounds (:func:`read_body`: 413, 408) before the SDK
    parses it, then handed to the SDK's session manager, which runs in the application's
    lifespan."""

    def __init__(self, manager, limits: HttpLimits) -> None:
        self.manager = manager
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            body = await read_body(request, self.limits.max_body_bytes, self.limits.body_timeout_s)
        except HttpError as err:
            await json_response(err.status, {"error": str(err)}, err.headers, close=err.close)(scope, receive, send)
            return
        except ClientDisconnect:
            return
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # the disconnect, when it comes

        await self.manager.handle_request(scope, replay, send)


def make_app(service: QueryService, tokens: Tokens | None = None, limits: HttpLimits | None = None, *,
             hosts: HostPolicy | None = None, insecure_no_auth: bool = False,
             local_principal: Principal = PUBLIC_PRINCIPAL) -> Starlette:
    """The ASGI application over a service. ``hosts``: the Host names it answers to (by default
    the loopback names). Without a token, unless ``insecure_no_auth``, it answers only requests
    to a loopback name from no other site (gate.py), as ``local_principal``. The views of the
    tokens' principals (or of ``local_principal``) are built now and with every new snapshot."""
    limits = limits or HttpLimits()
    authenticated = tokens is not None and tokens.configured
    service.expect(tokens.principals if authenticated else lambda: [local_principal])
    retrieval = WorkPool("retrieval", limits.workers, limits.queue, limits.worker_nice)
    answers = WorkPool("answer", limits.answer_workers, limits.answer_queue, limits.worker_nice)
    previews = WorkPool("deletion preview", 1, limits.queue, DRY_RUN_NICE)
    explanations = Explanations(service)
    mcp = build_mcp_server(explanations, http_principal, retrieval.run, private_error, previews.run)
    mcp.streamable_http_app(  # the session manager; the routes are this application's (MCP_PATH)
        streamable_http_path=MCP_PATH, json_response=True, stateless_http=True,
        max_request_body_size=limits.max_body_bytes,
        # the gate checks Host and Origin (gate.py) before a request reaches the SDK
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    local_only = not (tokens is not None and tokens.configured) and not insecure_no_auth

    def retrieve_and_encode(arguments: dict, principal: Principal) -> tuple[bytes | None, dict, object]:
        payload, pending = service.retrieve(**arguments, principal=principal)
        return (encode(payload) if pending is None else None), payload, pending

    def answer_and_encode(payload: dict, pending) -> bytes:
        service.answer(payload, pending)
        return encode(redact_answers(payload))

    def deep_and_encode(arguments: dict, principal: Principal) -> bytes:
        return encode(redact_answers(service.deep(arguments["question"], rerank=arguments["rerank"],
                                                  principal=principal)))

    def snapshot_info(principal: Principal) -> dict:
        info = service.snapshot_info(principal)
        if isinstance(info.get("serving"), dict):
            info["serving"].pop("uri", None)  # a path on the server
        if info.get("published_error"):
            info["published_error"] = private_error("the published snapshot cannot be read", info["published_error"])
        return info

    async def parse_body(request: Request) -> tuple[str, int, bool]:
        arguments = await read_arguments(request)
        return arguments["question"], arguments["top_k"], arguments["rerank"]

    async def read_arguments(request: Request) -> dict:
        body = await read_body(request, limits.max_body_bytes, limits.body_timeout_s)
        try:
            return parse_query_request(body)
        except BadRequest as err:
            raise HttpError(400, str(err)) from None

    def guard(endpoint):
        """The endpoint, with the service's errors answered as query's are."""
        async def guarded(request: Request) -> Response:
            try:
                return await endpoint(request)
            except HttpError as err:
                return json_response(err.status, {"error": str(err)}, err.headers, close=err.close)
            except ClientDisconnect:
                return Response(status_code=400)
            except NoSnapshotLoaded as err:
                return json_response(503, {"error": str(err)}, {"retry-after": "5"})
            except RetrievalError as err:
                return json_response(422, {"error": private_error("retrieval cannot run as configured", str(err))})
            except Exception as err:
                log.exception("%s failed", request.url.path)
                return json_response(500, {"error": private_error("the request failed inside the service", repr(err))})
        return guarded

    async def query(request: Request) -> Response:
        try:
            arguments = await read_arguments(request)
            principal = request_principal(request.scope)
            if arguments.pop("mode", "lightfoot") == "deep":  # model calls between retrievals: the answer pool
                encoded = await answers.run(deep_and_encode, arguments, principal)
            else:
                encoded, payload, pending = await retrieval.run(retrieve_and_encode, arguments, principal)
                if encoded is None:
                    encoded = await answers.run(answer_and_encode, payload, pending)
        except HttpError as err:
            return json_response(err.status, {"error": str(err)}, err.headers, close=err.close)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is listening; the connection is gone
        except NoSnapshotLoaded as err:
            return json_response(503, {"error": str(err)}, {"retry-after": "5"})
        except RetrievalError as err:
            return json_response(422, {"error": private_error("retrieval cannot run as configured", str(err))})
        except DeepQueryError as err:  # the model endpoint cannot serve
            return json_response(502, {"error": private_error("the model endpoint cannot serve", str(err))})
        except Exception as err:  # a bug must not take the server down; the details stay in the log
            log.exception("query failed")
            return json_response(500, {"error": private_error("the query failed inside the service", repr(err))})
        return json_response(200, encoded)

    async def health(request: Request) -> Response:
        payload = service.health()
        return json_response(200 if payload["status"] == "ok" else 503, payload)

    async def status(request: Request) -> Response:
        try:  # a principal's first request may build its view: in a worker, not the event loop
            payload = await retrieval.run(service.status, request_principal(request.scope))
        except HttpError as err:
            return json_response(err.status, {"error": str(err)}, err.headers)
        return json_response(200 if payload["status"] == "ok" else 503, payload)

    async def snapshot(request: Request) -> Response:
        try:
            return json_response(200, await retrieval.run(snapshot_info, request_principal(request.scope)))
        except HttpError as err:
            return json_response(err.status, {"error": str(err)}, err.headers)

    async def http_error(request: Request, err: HTTPException) -> Response:
        message = {404: f"no such resource {request.url.path}; try POST /query, GET /status, GET /snapshot, "
                        "GET /health, GET /v1/models, POST /v1/chat/completions, POST /mcp, or the page at GET /",
                   405: f"{request.method} is not allowed on {request.url.path}"}
        text = message.get(err.status_code, err.detail)
        body = error_payload(err.status_code, text) if is_api_path(request.url.path) else {"error": text}
        return json_response(err.status_code, body, dict(err.headers or {}), close=_may_have_body(request.scope))

    async def read_chat_body(request: Request) -> bytes:
        return await read_body(request, limits.max_body_bytes, limits.body_timeout_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        async with mcp.session_manager.run():  # the MCP transport's task group
            yield

    return Starlette(
        routes=[
            Route("/query", query, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/status", status, methods=["GET"]),
            Route("/snapshot", snapshot, methods=["GET"]),
            *page_routes(explanations, retrieval.run, guard, json_response, HttpError, parse_body, previews.run),
            *chat_routes(service, retrieval.run, answers.run, read_chat_body, private_error, HttpError),
            Route(MCP_PATH, McpEndpoint(mcp.session_manager, limits), methods=["POST"]),
        ],
        lifespan=lifespan,
        middleware=[
            Middleware(Gate, hosts=hosts or HostPolicy(), client_rate=RateLimiter(limits.client_rate, limits.client_burst),
                       local_only=local_only),
            Middleware(TokenAuth, tokens=tokens, local_principal=local_principal),
            Middleware(TokenRate, limiter=RateLimiter(limits.token_rate, limits.token_burst)),
        ],
        exception_handlers={HTTPException: http_error},
    )
