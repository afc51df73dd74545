"""What every request passes before it reaches an endpoint, and what every response carries.

:class:`Gate` is the outermost ASGI middleware of the service (app.py puts it around the token
check). In order, it refuses:

- a ``Host`` that is not one of the service's names (:class:`HostPolicy`: the loopback names, the
  bind address and every ``--allowed-host``), with 421, so that a DNS name rebound to the
  service's address does not reach it (``GET /health``, which tells nothing, answers to any, for
  probes that name the process by its address); and, on a service without a token (not opened with
  ``--insecure-no-auth``), any request whose ``Host`` is not a loopback name or whose ``Origin``
  is another site (403, see :func:`~lightfoot_pipeline.service.auth.local_origin_only`);
- a request with both ``Content-Length`` and ``Transfer-Encoding`` (400: the two framings
  disagree, the ground of request smuggling through a proxy);
- a POST whose ``Content-Type`` is not ``application/json`` (415): a page cannot send that
  type to another origin without the browser asking first, so a blind cross-site form post never
  runs a query;
- a client address past its request rate (429 with ``Retry-After``, :class:`RateLimiter`).

:class:`TokenRate` (inside the token check) limits each token's rate the same way. Every
response gets ``Cache-Control: no-store`` unless the endpoint set its own; the security headers of
:data:`SECURITY_HEADERS` are put on every response by the server (server.py: uvicorn's
``headers``, so that uvicorn's and Starlette's own errors carry them too, and h11's 400 and the
server's connection refusals by hand), and every request gets an access-log line
(:func:`access_logger`): time, client address, token id (never the token), method, path without
its query string, status and milliseconds; never a question.

The rate limits are token buckets kept per key in a bounded table: hand-written, because a
bucket's check must cost microseconds on the event loop and no maintained library offers an
in-process one over ASGI without a store behind it.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import math
import time
from collections import OrderedDict
from pathlib import Path

from lightfoot_pipeline.service.auth import host_name, is_loopback_name, local_origin_only
from lightfoot_pipeline.service.chat import error_payload, is_api_path

ACCESS_LOGGER = "lightfoot.access"
TOKEN_SCOPE_KEY = "lightfoot.token_id"  # set by the token check for an accepted token
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode("ascii")),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
]
NO_STORE = (b"cache-control", b"no-store")
MAX_BUCKETS = 100_000  # clients (or tokens) whose rate is remembered; the idlest are forgotten first


class RateLimiter:
    """A token bucket per key: ``rate`` requests a second, ``burst`` at once. Used from the event
    loop only (no lock). A rate of 0 turns the limit off."""

    def __init__(self, rate: float, burst: float, max_keys: int = MAX_BUCKETS) -> None:
        if rate < 0 or burst < 0 or (rate > 0 and burst < 1):
            raise ValueError(f"a rate limit needs rate >= 0 and burst >= 1, got rate {rate:g}, burst {burst:g}")
        self.rate, self.burst, self.max_keys = rate, burst, max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)
        self.refused = 0

    def take(self, key: str, now: float | None = None) -> float:
        """0 when ``key`` may make a request now (and it is counted), else the seconds until it may."""
        if self.rate == 0:
            return 0.0
        now = time.monotonic() if now is None else now
        tokens, at = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            wait = 0.0
        else:
            self._buckets[key] = (tokens, now)
            wait = (1.0 - tokens) / self.rate
            self.refused += 1
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)  # the least recently seen key: it has refilled the longest
        return wait


class HostPolicy:
    """The ``Host`` names the service answers to: the loopback names, the bind address (unless it
    is a wildcard) and the names allowed; ``*`` among them allows any."""

    def __init__(self, bind_host: str = "127.0.0.1", allowed: tuple[str, ...] | list[str] = ()) -> None:
        names = {host_name(name) for name in allowed if name.strip()}
        self.any = "*" in names
        wildcard = bind_host.strip("[]") in ("0.0.0.0", "::", "")
        if not wildcard:
            names.add(host_name(f"[{bind_host}]" if ":" in bind_host and not bind_host.startswith("[")
                                else bind_host))
        self.names = frozenset(names - {"*"})

    def allows(self, host: str | None) -> bool:
        if not host:
            return False
        if self.any:
            return True
        name = host_name(host)
        return name in self.names or is_loopback_name(name)


def _header(scope, wanted: bytes) -> str | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return value.decode("latin-1")
    return None


def _client(scope) -> str:
    client = scope.get("client")
    return client[0] if client else "-"


async def send_json(send, status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None,
                    close: bool = False, path: str = "") -> None:
    """A JSON error response straight from the gate (the security headers are added by the caller);
    on the chat endpoint's paths, in the OpenAI error shape (chat.py)."""
    payload = error_payload(status, message) if is_api_path(path) else {"error": message}
    body = json.dumps(payload).encode("ascii")
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        head.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


def _announces_body(scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


class Gate:
    """ASGI middleware: the checks and headers of the module docstring, and the access log."""

    def __init__(self, app, hosts: HostPolicy, client_rate: RateLimiter, local_only: bool = False,
                 access_log: logging.Logger | None = None) -> None:
        self.app = app
        self.hosts = hosts
        self.client_rate = client_rate
        self.local_only = local_only
        self.access_log = access_log or logging.getLogger(ACCESS_LOGGER)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status_seen = [0]

        async def guarded_send(message) -> None:
            if message["type"] == "http.response.start":
                status_seen[0] = message["status"]
                headers = list(message.get("headers", []))
                if b"cache-control" not in {name.lower() for name, _ in headers}:
                    headers.append(NO_STORE)
                message = {**message, "headers": headers}
            await send(message)

        try:
            refusal = self.refusal(scope)
            if refusal is None:
                await self.app(scope, receive, guarded_send)
            else:
                status, text, headers = refusal
                await send_json(guarded_send, status, text, headers, close=_announces_body(scope), path=scope["path"])
        finally:
            token_id = scope.get(TOKEN_SCOPE_KEY) or "-"
            self.access_log.info("%s %s %s %s %d %.1fms", _client(scope), token_id, scope["method"],
                                 scope["path"][:200], status_seen[0], (time.perf_counter() - started) * 1000.0)

    def refusal(self, scope) -> tuple[int, str, list] | None:
        """(status, message, headers) of the refusal a request gets here, or None to pass it on."""
        host = _header(scope, b"host")
        # /health tells nothing and is what probes ask, by whatever address reaches the process
        # (a Kubernetes probe names the pod's IP): it answers to any Host.
        probe = scope["path"] == "/health" and scope["method"] in ("GET", "HEAD")
        if not probe and not self.hosts.allows(host):
            return 421, "this service does not answer to that Host name (see --allowed-host)", []
        if self.local_only:
            why = local_origin_only(host, _header(scope, b"origin"))
            if why is not None:
                return 403, why, []
        if _header(scope, b"content-length") is not None and _header(scope, b"transfer-encoding") is not None:
            return 400, "a request may have Content-Length or Transfer-Encoding, not both", []
        if scope["method"] == "POST":
            kind = (_header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
            if kind != "application/json":
                return 415, "a POST body must be sent as Content-Type: application/json", []
        wait = self.client_rate.take(_client(scope))
        if wait:
            return 429, "too many requests from this address; retry later", [
                (b"retry-after", str(max(1, math.ceil(wait))).encode())]
        return None


class TokenRate:
    """ASGI middleware inside the token check: each accepted token's request rate (429 past it)."""

    def __init__(self, app, limiter: RateLimiter) -> None:
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope, receive, send) -> None:
        token_id = scope.get(TOKEN_SCOPE_KEY) if scope["type"] == "http" else None
        wait = self.limiter.take(token_id) if token_id else 0.0
        if wait:
            await send_json(send, 429, "too many requests with this token; retry later",
                            [(b"retry-after", str(max(1, math.ceil(wait))).encode())], close=_announces_body(scope),
                            path=scope["path"])
            return
        await self.app(scope, receive, send)


def access_logger(path: str | Path | None, max_bytes: int = 10 * 1024 * 1024, backups: int = 5) -> logging.Logger:
    """The access log: to ``path``, rotated when it passes ``max_bytes`` (``backups`` old files
    kept as ``path.1`` …), or, without a path, to the process's log. Each line:
    ``<time> <client> <token id> <method> <path> <status> <ms>ms``."""
    logger = logging.getLogger(ACCESS_LOGGER)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    logger.setLevel(logging.INFO)
    if path is None:
        logger.propagate = True
        return logger
    if max_bytes < 1 or backups < 0:
        raise ValueError(f"the access log needs max_bytes >= 1 and backups >= 0, got {max_bytes}, {backups}")
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
    formatter = logging.Formatter("%(asctime)s.%(msecs)03dZ %(message)s", "%Y-%m-%dT%H:%M:%S")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    logger.addHandler(handler)
    logger.propagate = False
    return logger
