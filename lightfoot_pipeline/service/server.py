"""The query service over HTTP: the application of app.py under uvicorn, on one socket.

uvicorn's HTTP/1.1 protocol (h11) is extended here where it would leave a connection unbounded;
the endpoints, the token check and the bounds on bodies and work are the application's
(app.py). Every bound is set in :class:`HttpLimits`.

- **Closing after a refusal**: a response sent before the body was read (413, 401, 404, 408)
  closes the connection, lingering: the server half-closes, so the client reads the response to
  its end, and drops unparsed whatever the client still sends, for at most ``LINGER_S`` or
  ``LINGER_BYTES``, before it closes for good. (Closed at once, the unread bytes would make the
  kernel reset the connection, and a client still sending would lose the response.) An invalid
  ``Content-Length`` (negative, not a number) gets 400 from the HTTP parser (h11).
- **Headers**: at most 16 KiB (400 beyond, whether they arrive in pieces, which h11 bounds, or
  whole in one read, which it would take: counted while they arrive), and they must be complete within
  ``header_timeout_s`` of a connection's first byte (or of its opening), else the connection is
  closed. uvicorn alone times out only idle keep-alive connections (``keep_alive_s``): a
  connection that sent half its headers would be held open for ever, counting against
  ``max_connections``; the header timer here closes it.
- **Connections**: at most ``max_connections_per_client`` open at once from one client address,
  and ``max_connections`` in all (:class:`ConnectionCount`). The count is kept as connections are
  accepted, before a byte is read: a connection past either bound is answered at once, with JSON
  (429 past the client's bound, 503 past the total, both with ``Retry-After``), and closed. It
  never counts, so a flood of idle connections from one address holds that address's slots and
  no one else's. A refused connection that sends a request gets its refusal as soon as the
  request's first bytes arrive; one that sends nothing is held, idle, for the header timeout
  before it gets it (at most ``HELD_PER_CLIENT`` of one address, ``HELD_TOTAL`` in all; past
  those it is answered and closed at once). A flood that reopens each socket as it closes thus
  opens a few connections a second, not thousands, and its accepts do not crowd the event loop.
- **Descriptors**: every socket is a file descriptor, and the process's limit (often 1,024) is
  the first thing a flood of idle connections exhausts: past it, ``accept`` fails for everyone and
  the snapshot watcher cannot open a file. ``lightfoot serve`` raises the soft limit to the hard
  one at start (:func:`raise_descriptor_limit`), and the bounds are cut to what the limit allows
  (:class:`Descriptors`): an eighth of it (at least ``MIN_RESERVE``) is kept for the work of
  requests, open connections take at most ``OPEN_SHARE`` of the rest and refused connections
  awaiting their refusal the others (a quarter of those from one address); a refused connection
  past that is answered and closed at once, so the sockets the process holds never pass its
  share of the limit, whoever opens them. (uvicorn's own bound, ``limit_concurrency``, counts every client together and
  answers in plain text; it is not used.)
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.service.app import HttpLimits, make_app
from lightfoot_pipeline.service.auth import PUBLIC_PRINCIPAL, Tokens
from lightfoot_pipeline.service.gate import NO_STORE, SECURITY_HEADERS, HostPolicy
from lightfoot_pipeline.service.queries import QueryService

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8410
MAX_HEADER_BYTES = 16 * 1024
# How long, and how much of a refused body, a closing connection still takes (and drops) so that
# the client can read the refusal before the close resets the connection.
LINGER_S = 2.0
LINGER_BYTES = 16 * 1024 * 1024
# How long a thread holding the GIL keeps it while another waits (Python's default is 5 ms): the
# event loop waits for the GIL at every step of a request, so a retrieval thread's Python code
# would add up to this much to each step of a /health probe.
SWITCH_INTERVAL_S = 0.001
# How long a refused connection is kept half-closed, so that the client reads its refusal.
REFUSED_LINGER_S = 1.0
# Idle refused connections held before their refusal, per client address and in all (file descriptors),
# at most: fewer where the descriptor limit is lower (Descriptors).
HELD_PER_CLIENT = 2048
HELD_TOTAL = 8192
# Descriptors kept from sockets for the work of requests (the snapshot watcher, the store's files, the
# ledger, the tokens file): an eighth of the limit, at least this many.
MIN_RESERVE = 64
RESERVE_SHARE = 8
OPEN_SHARE = 0.75  # of the descriptors for sockets, those that open connections may take; refused ones the rest


def raise_descriptor_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (Linux and macOS); the soft
    limit now. A server's sockets are files: at the usual soft limit of 1,024, a flood of idle
    connections exhausts it long before the memory or the CPU."""
    try:
        import resource
    except ImportError:  # not a Unix
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):  # macOS caps it below the hard limit (OPEN_MAX)
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@dataclass(frozen=True)
class Descriptors:
    """How the process's open-file limit is shared: ``reserve`` descriptors kept for the work of
    requests, the rest (less those already open) for sockets: open connections at most
    ``OPEN_SHARE`` of them, refused connections awaiting their refusal the others."""

    limit: int
    in_use: int
    reserve: int

    @classmethod
    def now(cls) -> Descriptors:
        """The limit and the descriptors open now (Linux's /proc; elsewhere, a reserve covers them)."""
        try:
            import resource
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except ImportError:
            limit = -1
        if limit < 0:  # unlimited, or unknown
            limit = 1 << 20
        try:
            in_use = len(os.listdir("/proc/self/fd"))
        except OSError:
            in_use = 0
        return cls(limit, in_use, max(MIN_RESERVE, limit // RESERVE_SHARE))

    @property
    def sockets(self) -> int:
        return max(2, self.limit - self.in_use - self.reserve)

    def as_dict(self) -> dict:
        return {"limit": self.limit, "in_use_at_start": self.in_use, "reserve": self.reserve,
                "sockets": self.sockets}


def refusal_bytes(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 response refusing a connection before its request is read."""
    body = json.dumps({"error": message}).encode("ascii")
    head = [f"HTTP/1.1 {status} {reason}", "content-type: application/json", f"content-length: {len(body)}",
            "retry-after: 1", "connection: close",
            *(f"{name.decode()}: {value.decode()}" for name, value in [*SECURITY_HEADERS, NO_STORE])]
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


CLIENT_FULL = refusal_bytes(429, "Too Many Requests", "too many connections from this address; close some and retry")
SERVER_FULL = refusal_bytes(503, "Service Unavailable", "the service has too many connections open; retry shortly")


class Slots:
    """Places counted by client address and in all, each bounded; used from the event loop only."""

    def __init__(self, per_client: int, total: int) -> None:
        self.per_client, self.total = min(per_client, total), total
        self.by_client: Counter[str] = Counter()
        self.taken = 0

    def take(self, client: str) -> str | None:
        """None when ``client`` gets a place (it is counted), else which bound is full: ``client``
        or ``total``."""
        if self.by_client[client] >= self.per_client:
            return "client"
        if self.taken >= self.total:
            return "total"
        self.by_client[client] += 1
        self.taken += 1
        return None

    def give(self, client: str) -> None:
        self.taken -= 1
        self.by_client[client] -= 1
        if self.by_client[client] <= 0:
            del self.by_client[client]


class ConnectionCount:
    """Open connections by client address, and in all, and the refused ones held (idle before their
    refusal, then while it is read); used from the event loop only. Together they never pass the
    descriptors for sockets (:class:`Descriptors`): a refused connection past the held bound is
    answered and closed at once."""

    def __init__(self, per_client: int, total: int, descriptors: Descriptors | None = None) -> None:
        self.descriptors = descriptors or Descriptors.now()
        sockets = self.descriptors.sockets
        opened = max(1, min(total, int(sockets * OPEN_SHARE)))
        held = max(0, min(HELD_TOTAL, sockets - opened))
        self.opened = Slots(per_client, opened)
        self.held = Slots(min(HELD_PER_CLIENT, max(1, held // 4)), held)  # refused connections held
        self.refused = 0

    @property
    def by_client(self) -> Counter[str]:
        return self.opened.by_client

    @property
    def open(self) -> int:
        return self.opened.taken

    def hold(self, client: str) -> bool:
        """Whether a refused connection from ``client`` may be held idle (it is counted) before its refusal."""
        return self.held.take(client) is None

    def unhold(self, client: str) -> None:
        self.held.give(client)

    def admit(self, client: str) -> bytes | None:
        """None when a connection from ``client`` may open (it is counted), else its refusal."""
        full = self.opened.take(client)
        if full is None:
            return None
        self.refused += 1
        return CLIENT_FULL if full == "client" else SERVER_FULL

    def release(self, client: str) -> None:
        self.opened.give(client)


class LingeringTransport:
    """A connection's transport whose ``close`` lingers while a request body is still arriving.

    It half-closes at once (the client sees the response end), then drops what the client still
    sends, unparsed, and closes for good after ``LINGER_S``, after ``LINGER_BYTES``, or when the
    client closes its side. Everything else goes to the transport itself.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop,
                 body_unread: Callable[[], bool]) -> None:
        self._transport = transport
        self._loop = loop
        self._body_unread = body_unread
        self._timer: asyncio.TimerHandle | None = None
        self.lingering = False
        self.dropped = 0

    def __getattr__(self, name: str):
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        if self.lingering or self._transport.is_closing():
            return
        if not self._body_unread() or not self._transport.can_write_eof():
            self._transport.close()
            return
        self.lingering = True
        self._transport.write_eof()
        self._transport.resume_reading()
        self._timer = self._loop.call_later(LINGER_S, self.finish)

    def drop(self, data: bytes) -> None:
        self.dropped += len(data)
        if self.dropped > LINGER_BYTES:
            self.finish()

    def finish(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._transport.is_closing():
            self._transport.close()


def bounded_protocol(header_timeout_s: float, connections: ConnectionCount) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, admitting a connection only within ``connections``' bounds (else
    answering it with a refusal and closing it), closing a connection whose request headers are not
    complete within ``header_timeout_s`` of its opening or of the request's first byte (a slowloris
    client), and closing with a linger (:class:`LingeringTransport`)."""

    class BoundedH11(H11Protocol):
        def connection_made(self, transport) -> None:
            peer = transport.get_extra_info("peername")
            self._peer = str(peer[0]) if isinstance(peer, tuple) and peer else "-"
            refusal = connections.admit(self._peer)
            self._refused = refusal is not None
            if refusal is not None:  # never handed to uvicorn: held idle, or answered and closed now
                self.transport = transport
                self._refusal, self._held = refusal, connections.hold(self._peer)
                self._close_timer: asyncio.TimerHandle | None = None
                if self._held:
                    self._close_timer = self.loop.call_later(header_timeout_s, self._refuse)
                else:  # past the held bound: its descriptor is not kept a moment longer
                    transport.write(refusal)
                    transport.close()
                return
            lingering = LingeringTransport(transport, self.loop, lambda: self.conn.their_state is h11.SEND_BODY)
            super().connection_made(lingering)
            self._header_timer: asyncio.TimerHandle | None = None
            self._seen_cycle = None
            self._header_bytes, self._header_tail = 0, b""  # of the request whose headers are arriving
            self._arm_header_timer()

        def _refuse(self) -> None:
            """Answer a held refused connection, half-close it, and close it after REFUSED_LINGER_S
            (it stays held, and counted, until it is closed)."""
            if self._close_timer is not None:
                self._close_timer.cancel()
            if self.transport.is_closing():
                return
            self.transport.write(self._refusal)
            self._refusal = b""
            if self.transport.can_write_eof():
                self.transport.write_eof()
                self._close_timer = self.loop.call_later(REFUSED_LINGER_S, self.transport.close)
            else:
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._refused:  # its request is dropped unread; the refusal goes out if it has not yet
                if self._refusal and self._held:
                    self._refuse()
                return
            if self.transport.lingering:
                self.transport.drop(data)
                return
            if self._headers_too_large(data):
                self.send_400_response(f"Request headers larger than {MAX_HEADER_BYTES} bytes.")
                return
            try:
                super().data_received(data)
            except ValueError:  # a header h11 validates but cannot convert (a 5,000-digit length)
                self.send_400_response("Invalid HTTP request received.")
                return
            if self.cycle is not self._seen_cycle:  # a request's headers are complete
                self._seen_cycle = self.cycle
                self._cancel_header_timer()
            elif (self.cycle is None or self.cycle.response_complete) and self._header_timer is None:
                self._arm_header_timer()  # the first bytes of a next request on a kept-alive connection

        def _headers_too_large(self, data: bytes) -> bool:
            """Whether the request whose headers ``data`` continues has more than MAX_HEADER_BYTES
            of them. h11 bounds only what it holds incomplete, so headers that arrive whole in
            one read (up to the transport's read size) would pass; they are counted here while
            the connection waits for a request's headers."""
            if self.conn.their_state not in (h11.IDLE, h11.DONE):
                self._header_bytes, self._header_tail = 0, b""
                return False
            seen = self._header_tail + data
            ends = [(at, len(mark)) for mark in (b"\r\n\r\n", b"\n\n") if (at := seen.find(mark)) >= 0]
            if not ends:
                self._header_bytes += len(data)
                self._header_tail = seen[-3:]
                return self._header_bytes > MAX_HEADER_BYTES
            at, mark = min(ends)
            total = self._header_bytes + at + mark - len(self._header_tail)
            self._header_bytes, self._header_tail = 0, b""
            return total > MAX_HEADER_BYTES

        def send_400_response(self, msg: str) -> None:
            """h11's own refusal of a request it cannot parse (no ``Host``, headers too large, a
            malformed line), with the security headers that uvicorn's own version leaves out."""
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close"),
                       *SECURITY_HEADERS, NO_STORE]
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                          h11.Data(data=msg.encode("ascii")), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()

        def eof_received(self) -> bool | None:
            if self._refused:
                self.transport.close()
                return None
            if self.transport.lingering:
                self.transport.finish()
            return super().eof_received()

        def connection_lost(self, exc) -> None:
            if self._refused:
                if self._held:
                    self._held = False
                    connections.unhold(self._peer)
                if self._close_timer is not None:
                    self._close_timer.cancel()
                return
            connections.release(self._peer)
            self._cancel_header_timer()
            self.transport.finish()
            super().connection_lost(exc)

        def pause_writing(self) -> None:
            if not self._refused:
                super().pause_writing()

        def resume_writing(self) -> None:
            if not self._refused:
                super().resume_writing()

        def _arm_header_timer(self) -> None:
            self._header_timer = self.loop.call_later(header_timeout_s, self._header_timeout)

        def _cancel_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _header_timeout(self) -> None:
            self._header_timer = None
            waiting = self.cycle is None or self.cycle.response_complete
            if waiting and not self.transport.is_closing():
                self.transport.close()

    return BoundedH11


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port); port 0 takes a free one."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


class QueryServer:
    """uvicorn serving :func:`make_app` on one socket, bound when the server is made."""

    def __init__(self, service: QueryService, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
                 tokens: Tokens | None = None, limits: HttpLimits | None = None,
                 allowed_hosts: tuple[str, ...] | list[str] = (), insecure_no_auth: bool = False,
                 local_principal: Principal = PUBLIC_PRINCIPAL) -> None:
        """``allowed_hosts``: Host names the service answers to beside the loopback names and
        ``host`` (gate.py); ``insecure_no_auth``: without a token, answer any Host and Origin;
        ``local_principal``: whom a service without tokens answers as (``lightfoot serve --as``)."""
        self.service = service
        self.limits = limits or HttpLimits()
        self.connections = ConnectionCount(self.limits.max_connections_per_client, self.limits.max_connections)
        self.socket = bind(host, port)
        self.socket.listen(self.limits.backlog)  # connections wait in the backlog until uvicorn starts
        app = make_app(service, tokens, self.limits, hosts=HostPolicy(host, allowed_hosts),
                       insecure_no_auth=insecure_no_auth, local_principal=local_principal)
        config = uvicorn.Config(
            app,
            http=bounded_protocol(self.limits.header_timeout_s, self.connections),
            ws="none",
            lifespan="on",  # the MCP transport's session manager (app.py)
            log_config=None,
            access_log=False,
            server_header=False,
            # on every response the server sends, its own errors and Starlette's 500 among them (gate.py)
            headers=[(name.decode("ascii"), value.decode("ascii")) for name, value in SECURITY_HEADERS],
            proxy_headers=False,
            limit_concurrency=None,  # bounded per client and in all by ConnectionCount
            timeout_keep_alive=self.limits.keep_alive_s,
            backlog=self.limits.backlog,
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.socket.getsockname()[:2]
        return host, port

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def serve_forever(self) -> None:
        """Serve until SIGINT or SIGTERM (in the main thread) or :meth:`stop`, as the process's work.

        What is loaded by now (the models, the snapshot: half a million objects) is moved out of
        the garbage collector's sight first (``gc.freeze``): a full collection over it takes about
        300 ms with the GIL held, and under load one would stall every request for that long.
        """
        gc.collect()
        gc.freeze()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._run()

    def _run(self) -> None:
        self._server.run(sockets=[self.socket])

    def start(self, timeout_s: float = 30.0) -> QueryServer:
        """Serve from a background thread; returns once the server accepts connections."""
        self._thread = threading.Thread(target=self._run, name="query-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            raise RuntimeError("the query server did not start")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.socket.close()
