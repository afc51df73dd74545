"""What every request passes and every response carries (gate.py), the bound on one client's
connections (server.py), and what errors tell a client: against a real uvicorn server on
127.0.0.1, as test_serve.py does."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import pytest

from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.retrieval.answer import AnswerBudget, Answerer
from lightfoot_pipeline.service import gate
from lightfoot_pipeline.service.auth import Tokens, local_origin_only
from lightfoot_pipeline.service.gate import HostPolicy, RateLimiter, access_logger
from lightfoot_pipeline.service.queries import QueryService
from lightfoot_pipeline.snapshot.export import export_snapshot
from tests.lightfoot_pipeline.service import test_serve
from tests.lightfoot_pipeline.service.test_serve import QUESTION, TOKEN, ingest, raw_exchange, request

embedder, running, served = test_serve.embedder, test_serve.running, test_serve.served  # the same fixtures

QUERY = {"question": QUESTION, "answer": False, "top_k": 3}


def service_over(store, embedder, **kwargs) -> QueryService:
    ingest(store, embedder, late=False)
    export_snapshot(store, embedder)
    service = QueryService(store, embedder, **kwargs)
    assert service.refresh()
    return service


def raw(method: str, path: str, host: str = "127.0.0.1", headers: dict | None = None, body: bytes = b"") -> bytes:
    headers = {"connection": "close", **(headers or {})}  # the server closes once it has answered
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def body_of(reply: bytes) -> dict:
    return json.loads(reply.split(b"\r\n\r\n", 1)[1])


@pytest.mark.slow
def test_a_flood_of_idle_connections_from_one_client_takes_no_one_elses_slots(store, embedder, running):
    server = running(service_over(store, embedder), max_connections=200, max_connections_per_client=16,
                     header_timeout_s=0.5)
    flood_host = "127.0.0.9"
    stop = threading.Event()
    opened = [0]
    refusals: list[bytes] = []

    def flood() -> None:  # 300 sockets, each reopened as soon as the server closes it
        socks: list[socket.socket] = []
        while not stop.is_set():
            while len(socks) < 300 and not stop.is_set():
                sock = socket.create_connection(server.address, timeout=5, source_address=(flood_host, 0))
                sock.setblocking(False)
                socks.append(sock)
                opened[0] += 1
            time.sleep(0.01)
            for sock in list(socks):
                try:
                    data = sock.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data and len(refusals) < 5:
                    refusals.append(data)
                if not data or data.startswith(b"HTTP/1.1 429"):
                    sock.close()
                    socks.remove(sock)
        for sock in socks:
            sock.close()

    flooder = threading.Thread(target=flood)
    flooder.start()
    try:
        while opened[0] < 600:
            time.sleep(0.05)
        assert server.connections.by_client[flood_host] <= 16
        for _ in range(20):  # another client, meanwhile
            assert request(server.url, "GET", "/health", token=None)[0] == 200
            status, body, _ = request(server.url, "POST", "/query", QUERY)
            assert status == 200 and body["passages"]
    finally:
        stop.set()
        flooder.join(30)
    reply = refusals[0]
    assert status_of(reply) == 429 and b"content-type: application/json" in reply
    assert "too many connections from this address" in body_of(reply)["error"]
    assert server.connections.refused > 0


@pytest.mark.slow
def test_a_client_past_its_request_rate_gets_429_and_others_do_not(store, embedder, running):
    server = running(service_over(store, embedder), client_rate=2.0, client_burst=5, token_rate=0)
    statuses = [request(server.url, "GET", "/health", token=None) for _ in range(8)]
    assert [s for s, _, _ in statuses[:5]] == [200] * 5
    status, body, headers = statuses[-1]
    assert status == 429 and "too many requests from this address" in body["error"]
    assert int(headers["retry-after"]) >= 1 and headers["content-type"] == "application/json"
    with socket.create_connection(server.address, timeout=10, source_address=("127.0.0.5", 0)) as sock:
        sock.sendall(raw("GET", "/health"))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    time.sleep(1.1)  # two requests' worth refilled
    assert request(server.url, "GET", "/health", token=None)[0] == 200


def test_a_token_past_its_request_rate_gets_429_from_any_address(store, embedder, running):
    server = running(service_over(store, embedder), client_rate=0, token_rate=1.0, token_burst=3)
    head = raw("POST", "/query", headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json",
                                          "content-length": str(len(json.dumps(QUERY)))}, body=json.dumps(QUERY).encode())
    statuses = [status_of(raw_exchange(server.address, head, timeout=10)) for _ in range(3)]
    assert statuses == [200, 200, 200]
    with socket.create_connection(server.address, timeout=10, source_address=("127.0.0.6", 0)) as sock:
        sock.sendall(head)
        reply = sock.recv(65536)
    assert status_of(reply) == 429 and "with this token" in body_of(reply)["error"]


def test_every_response_carries_the_security_headers(served):
    for method, path, token in [("GET", "/health", None), ("POST", "/query", TOKEN), ("GET", "/status", None),
                                ("GET", "/nowhere", TOKEN), ("GET", "/", None)]:
        status, _, headers = request(served.url, method, path, QUERY if method == "POST" else None, token=token)
        assert status in (200, 401, 404), (path, status)
        assert headers["x-frame-options"] == "DENY" and headers["referrer-policy"] == "no-referrer", path
        assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store", path
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
    status, _, headers = request(served.url, "GET", "/static/app.js", token=None)
    assert status == 200 and headers["x-frame-options"] == "DENY" and "max-age" in headers["cache-control"]


def test_host_names_framing_and_content_type_are_checked(store, embedder, running):
    server = running(service_over(store, embedder), allowed_hosts=["search.example"])
    auth = {"authorization": f"Bearer {TOKEN}"}
    for host in ("attacker.example", "127.0.0.1.attacker.example", "search.example.evil"):
        for path in ("/status", "/"):
            reply = raw_exchange(server.address, raw("GET", path, host=host, headers=auth))
            assert status_of(reply) == 421 and "Host" in body_of(reply)["error"], (host, path)
        # /health tells nothing and answers to any Host: probes name the process by its address.
        assert status_of(raw_exchange(server.address, raw("GET", "/health", host=host))) == 200, host
    for host in ("127.0.0.1", f"127.0.0.1:{server.address[1]}", "localhost", "[::1]:8410", "search.example:443"):
        reply = raw_exchange(server.address, raw("GET", "/status", host=host, headers=auth))
        assert status_of(reply) == 200, host

    body = json.dumps(QUERY).encode()
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {**auth, "content-length": str(len(body)), **({"content-type": kind} if kind else {})}
        reply = raw_exchange(server.address, raw("POST", "/query", headers=headers, body=body))
        assert status_of(reply) == 415 and "application/json" in body_of(reply)["error"], kind
    headers = {**auth, "content-type": "application/json; charset=utf-8", "content-length": str(len(body))}
    assert status_of(raw_exchange(server.address, raw("POST", "/query", headers=headers, body=body))) == 200

    smuggled = raw("POST", "/query", headers={**auth, "content-type": "application/json", "content-length": "5",
                                              "transfer-encoding": "chunked"}, body=b"0\r\n\r\n")
    reply = raw_exchange(server.address, smuggled)
    assert status_of(reply) == 400 and "not both" in body_of(reply)["error"]
    assert b"connection: close" in reply.lower()


def test_without_a_token_only_the_service_own_page_on_a_loopback_name_is_answered(store, embedder, running):
    server = running(service_over(store, embedder), tokens=Tokens(), allowed_hosts=["search.example"])
    port = server.address[1]
    body = json.dumps(QUERY).encode()

    def post(host: str, origin: str | None) -> bytes:
        headers = {"content-type": "application/json", "content-length": str(len(body))}
        if origin:
            headers["origin"] = origin
        return raw_exchange(server.address, raw("POST", "/query", host=host, headers=headers, body=body))

    assert status_of(post(f"127.0.0.1:{port}", None)) == 200
    assert status_of(post(f"localhost:{port}", f"http://localhost:{port}")) == 200
    for host, origin in [(f"127.0.0.1:{port}", "http://attacker.example"), (f"127.0.0.1:{port}", "null"),
                         (f"127.0.0.1:{port}", f"http://localhost:{port}"), (f"search.example:{port}", None)]:
        reply = post(host, origin)
        assert status_of(reply) == 403 and "without a token" in body_of(reply)["error"], (host, origin)
    assert status_of(post("attacker.example", None)) == 421  # a rebound name, whatever the Origin

    # --insecure-no-auth: the operator answers for who reaches the port (a proxy that authenticates).
    open_server = running(service_over(store, embedder), tokens=Tokens(), insecure_no_auth=True)
    reply = raw_exchange(open_server.address, raw("POST", "/query", headers={
        "content-type": "application/json", "content-length": str(len(body)), "origin": "http://proxy.example"},
        body=body))
    assert status_of(reply) == 200

    assert local_origin_only("localhost:1", "http://localhost:1") is None
    assert local_origin_only("localhost:1", "https://localhost:1") is not None
    assert local_origin_only("evil.example", None) is not None and local_origin_only(None, None) is not None


def test_the_access_log_names_the_token_never_the_token_or_the_question(store, embedder, running, tmp_path):
    path = tmp_path / "access.log"
    access_logger(path, max_bytes=2000, backups=2)
    try:
        server = running(service_over(store, embedder), client_rate=0)
        secret_question = "Which secret codename did Orbital Corp use?"
        assert request(server.url, "POST", "/query", {"question": secret_question, "answer": False})[0] == 200
        assert request(server.url, "GET", "/status", token=None)[0] == 401
        assert request(server.url, "GET", "/explain/doc?doc_id=q-none", token=TOKEN)[0] == 404
        for handler in logging.getLogger(gate.ACCESS_LOGGER).handlers:
            handler.flush()
        lines = path.read_text().splitlines()
        assert len(lines) == 3
        token_id = Tokens(TOKEN).identify(TOKEN)
        assert token_id.startswith("t:") and len(token_id) == 14
        when, client, who, method, route, status, ms = lines[0].split(" ")
        assert when.endswith("Z") and client == "127.0.0.1" and who == token_id
        assert (method, route, status) == ("POST", "/query", "200") and ms.endswith("ms") and float(ms[:-2]) > 0
        assert lines[1].split(" ")[2:6] == ["-", "GET", "/status", "401"]
        assert lines[2].split(" ")[4:6] == ["/explain/doc", "404"]  # without its query string
        text = path.read_text()
        assert "secret" not in text and TOKEN not in text and "q-none" not in text

        for _ in range(120):  # past 2,000 bytes twice over: rotated, two old files kept
            request(server.url, "GET", "/health", token=None)
        for handler in logging.getLogger(gate.ACCESS_LOGGER).handlers:
            handler.flush()
        rotated = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("access.log"))
        assert rotated == ["access.log", "access.log.1", "access.log.2"]
        assert all((tmp_path / name).stat().st_size <= 2000 for name in rotated)
    finally:
        access_logger(None)


def test_errors_name_no_endpoint_model_or_path(store, embedder, chat_server, running, caplog):
    settings = LLMSettings(base_url=chat_server.base_url, model="private-answer-model", max_retries=0,
                           price_in_per_mtok=1.0, price_out_per_mtok=1.0)
    chat_server.queue(chat_server.Reply(status=500))
    service = service_over(store, embedder, answerer=Answerer(LLMClient(settings)), budget=AnswerBudget(1.0))
    server = running(service)
    status, body, _ = request(server.url, "POST", "/query", {"question": QUESTION})
    assert status == 200 and body["answer_status"] == "failed"
    text = json.dumps(body)
    assert chat_server.base_url not in text and "127.0.0.1" not in text and "private-answer-model" not in text
    assert "error " in body["answer"]["error"] and "service's log" in body["answer"]["error"]
    error_id = body["answer"]["error"].split("error ", 1)[1].split(";")[0]
    assert any(error_id in r.getMessage() for r in caplog.records)  # the details are kept server-side

    status, body, _ = request(server.url, "GET", "/explain/doc?doc_id=q-none")
    assert status == 404 and "not in the store" in body["error"] and str(store.uri) not in body["error"]
    status, body, _ = request(server.url, "GET", "/snapshot")
    assert status == 200 and str(store.uri) not in json.dumps(body)
    status, body, _ = request(server.url, "GET", "/nowhere")
    assert status == 404 and str(store.uri) not in json.dumps(body)


def test_rate_limiter_buckets_refill_and_forget_the_idlest():
    limiter = RateLimiter(rate=2.0, burst=3, max_keys=2)
    assert [limiter.take("a", now=0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a", now=0.0) == pytest.approx(0.5)
    assert limiter.take("a", now=0.5) == 0.0  # one refilled
    limiter.take("b", now=1.0)
    limiter.take("c", now=1.0)  # "a" was seen least recently: forgotten (a full bucket when it returns)
    assert [limiter.take("a", now=1.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert RateLimiter(0, 0).take("x") == 0.0
    with pytest.raises(ValueError, match="burst >= 1"):
        RateLimiter(1.0, 0.5)


def test_host_policy_names():
    policy = HostPolicy("10.0.0.5", ["Search.Example"])
    assert policy.allows("10.0.0.5:8410") and policy.allows("search.example") and policy.allows("localhost:1")
    assert not policy.allows("10.0.0.6") and not policy.allows(None) and not policy.allows("")
    assert not HostPolicy("0.0.0.0").allows("0.0.0.0") and HostPolicy("::1").allows("[::1]:8410")
    assert HostPolicy("0.0.0.0", ["*"]).allows("anything.example")


@pytest.mark.parametrize("options, message", [
    (["--port", "99999"], "--port must be from 0 to 65535"),
    (["--client-burst", "0.5"], "burst >= 1"),
    (["--max-connections-per-client", "0"], "max_connections_per_client must be at least 1"),
    (["--access-log-backups", "-1"], "backups >= 0"),
    (["--principal-budget-usd", "-1"], "non-negative number of USD"),
])
def test_bad_serve_options_are_one_line_errors(tmp_path, capsys, options, message):
    from lightfoot_pipeline.cli import main

    assert main(["serve", "--store", str(tmp_path / "store"), "--access-log", str(tmp_path / "a.log"),
                 *options]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: serve: ") and message in err and "\n" not in err and "Traceback" not in err


def test_the_servers_own_errors_carry_the_security_headers(served):
    """A request without ``Host`` gets h11's 400, a request line that is not one too: each with the
    security headers, as every response the application sends."""
    for request_bytes in (b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n", b"NOT A REQUEST LINE\r\n\r\n"):
        reply = raw_exchange(served.address, request_bytes)
        head = reply.split(b"\r\n\r\n", 1)[0].decode().lower()
        assert status_of(reply) == 400, reply[:200]
        for name, value in [*gate.SECURITY_HEADERS, gate.NO_STORE]:
            assert f"{name.decode()}: {value.decode().lower()}" in head, (name, head)


def test_headers_past_their_bound_get_400_whether_sent_in_pieces_or_whole(served):
    """16 KiB of headers at most: h11 refuses what it holds incomplete beyond that, and headers that
    arrive whole in one read are counted as they arrive; a request just within the bound is served."""
    from lightfoot_pipeline.service.server import MAX_HEADER_BYTES

    def request_with(padding: int) -> bytes:
        return (f"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: {'a' * padding}\r\n"
                "Connection: close\r\n\r\n").encode()

    assert status_of(raw_exchange(served.address, request_with(MAX_HEADER_BYTES - 200))) == 200
    whole = raw_exchange(served.address, request_with(MAX_HEADER_BYTES + 10))
    assert status_of(whole) == 400 and b"larger than" in whole, whole[:300]
    with socket.create_connection(served.address, timeout=10) as sock:  # the same, in pieces
        data = request_with(4 * MAX_HEADER_BYTES)
        for start in range(0, len(data), 4096):
            try:
                sock.sendall(data[start:start + 4096])
            except (BrokenPipeError, ConnectionResetError):
                break
        assert status_of(sock.recv(65536)) == 400
