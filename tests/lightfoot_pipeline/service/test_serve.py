"""The query service over HTTP (uvicorn on 127.0.0.1): queries, authentication, bounds, malformed
requests, answers under a budget charged to the ledger, snapshot swaps under load."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.retrieval.answer import AnswerBudget, Answerer
from lightfoot_pipeline.service import auth, queries
from lightfoot_pipeline.service.app import BadRequest, HttpLimits, parse_query_request
from lightfoot_pipeline.service.auth import AuthConfigError, Tokens, check_exposure, hash_token, read_tokens_file
from lightfoot_pipeline.service.queries import QueryService
from lightfoot_pipeline.service.server import QueryServer
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import latest_snapshot
from lightfoot_pipeline.store import ledger

DATA = Path(__file__).parents[1] / "data" / "query-corpus"
QUESTION = "Who founded the company that makes the Zephyr phone?"
LATE = {"q-cirrus", "q-riga"}  # documents added while the service runs
TOKEN = "test-token-" + "x" * 24


def ingest(store, embedder, late: bool) -> None:
    documents = [d for d in load_corpus(DATA) if late or d.doc_id not in LATE]
    operations.ingest(store, documents, ReplayExtractor(load_recorded_extractions(DATA)), embedder)


def request(base: str, method: str, path: str, body: dict | bytes | None = None, token: str | None = TOKEN,
            headers: dict | None = None) -> tuple[int, dict, dict]:
    """(status, JSON body ({} when empty, {"text": …} when not JSON), headers) of one request."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    sent = {"content-type": "application/json", **(headers or {})}
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    req = urllib.request.Request(base + path, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            raw, status, got = response.read(), response.status, dict(response.headers)
    except urllib.error.HTTPError as err:
        raw, status, got = err.read(), err.code, dict(err.headers)
    try:
        payload = json.loads(raw) if raw else {}
    except ValueError:
        payload = {"text": raw.decode("utf-8", "replace")}
    return status, payload, {k.lower(): v for k, v in got.items()}


def raw_exchange(address: tuple[str, int], data: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes and read until the server closes the connection (or the timeout)."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return received


async def send_until_answered(address: tuple[str, int], head: bytes) -> int:
    """Send ``head`` and then body bytes as fast as they are taken until a response arrives; its status."""
    reader, writer = await asyncio.open_connection(*address)
    response = asyncio.ensure_future(reader.readuntil(b"\r\n"))
    try:
        writer.write(head)
        for _ in range(800):  # up to 50 MB
            if response.done():
                break
            writer.write(b"x" * 65536)
            await writer.drain()
            await asyncio.sleep(0)  # the reading side runs between writes
        return int((await asyncio.wait_for(response, 10)).split()[1])
    finally:
        response.cancel()
        writer.close()


def auth_header() -> bytes:
    return f"Authorization: Bearer {TOKEN}\r\n".encode()


def slow_down(monkeypatch, owner, name: str, seconds: float) -> threading.Event:
    """Make every call of ``owner.name`` wait ``seconds`` first; the event is set once one has begun."""
    real = getattr(owner, name)
    begun = threading.Event()

    def slowed(*args, **kwargs):
        begun.set()
        time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, slowed)
    return begun


@pytest.fixture
def embedder():
    return HashingEmbedder(dim=32)


@pytest.fixture
def running():
    """``start(service, tokens=Tokens(TOKEN), allowed_hosts=(), insecure_no_auth=False, **limits) -> QueryServer``
    on 127.0.0.1, a free port."""
    started = []

    def start(service: QueryService, tokens: Tokens | None = None, allowed_hosts: tuple[str, ...] = (),
              insecure_no_auth: bool = False, **limits) -> QueryServer:
        server = QueryServer(service, "127.0.0.1", 0, tokens=tokens if tokens is not None else Tokens(TOKEN),
                             limits=HttpLimits(**limits), allowed_hosts=allowed_hosts,
                             insecure_no_auth=insecure_no_auth).start()
        started.append((server, service))
        return server

    yield start
    for server, service in started:
        server.stop()
        service.close()


@pytest.fixture
def served(store, embedder, running):
    """A server over the whole query corpus, with the default limits and TOKEN."""
    ingest(store, embedder, late=True)
    export_snapshot(store, embedder)
    service = QueryService(store, embedder)
    assert service.refresh()
    return running(service)


def test_query_status_and_snapshot_over_http(store, embedder, running):
    ingest(store, embedder, late=True)
    info = export_snapshot(store, embedder)
    service = QueryService(store, embedder)
    assert service.refresh()
    base = running(service).url

    status, body, _ = request(base, "POST", "/query", {"question": QUESTION, "top_k": 3, "answer": False})
    assert status == 200
    # the token's principal is not the operator: it is shown its view's id (the export's time and a
    # digest of what it reads), never the store's fingerprint or commit, though it reads every document
    shown = body["snapshot"]["snapshot_id"]
    assert shown.split("-")[0] == info.snapshot_id.split("-")[0] and shown != info.snapshot_id
    assert body["snapshot"]["store_seq"] is None and info.fingerprint[:12] not in json.dumps(body)
    assert [p["rank"] for p in body["passages"]] == [1, 2, 3]
    assert {"q-zephyr", "q-orbital"} <= {p["doc_id"] for p in body["passages"]}
    assert body["answer"] is None and body["answer_status"] == "not requested"
    assert set(body["latency_ms"]) == {"embed", "seed", "pagerank", "rerank", "retrieval", "total"}
    assert body["latency_ms"]["total"] >= body["latency_ms"]["retrieval"] > 0
    assert len(body["seed_facts"]) == 2

    status, body, _ = request(base, "POST", "/query", {"question": QUESTION})
    assert status == 200 and body["answer"] is None and body["answer_status"] == "no answer model configured"
    assert len(body["passages"]) == 10

    status, health, _ = request(base, "GET", "/health", token=None)
    assert (status, health) == (200, {"status": "ok"})
    status, state, _ = request(base, "GET", "/status")
    assert status == 200 and state["snapshot_id"] == shown and state["answers"]["state"] == "off"
    status, snap, _ = request(base, "GET", "/snapshot")
    assert status == 200 and snap["serving"]["snapshot_id"] == snap["published_id"] == shown
    assert snap["serving_published"] is True
    assert snap["serving"]["counts"]["passages"] == 12

    for bad, message in [(b"not json", "not JSON"), ({"question": ""}, "non-empty"), ({"q": QUESTION}, "unknown"),
                         ({"question": QUESTION, "top_k": 0}, "top_k"), ({"question": QUESTION, "top_k": 31}, "top_k"),
                         ({"question": QUESTION, "answer": "yes"}, "answer must be")]:
        status, body, _ = request(base, "POST", "/query", bad)
        assert status == 400 and message in body["error"], (bad, body)
    assert request(base, "GET", "/nowhere")[0] == 404
    assert request(base, "POST", "/nowhere", {})[0] == 404
    status, body, headers = request(base, "GET", "/query")
    assert status == 405 and headers["allow"] == "POST" and "not allowed" in body["error"]


def test_every_endpoint_but_health_needs_a_token(served):
    base = served.url
    for method, path, body in [("POST", "/query", {"question": QUESTION}), ("GET", "/status", None),
                               ("GET", "/snapshot", None), ("GET", "/nowhere", None), ("HEAD", "/status", None)]:
        status, _payload, headers = request(base, method, path, body, token=None)
        assert status == 401 and headers["www-authenticate"] == 'Bearer realm="lightfoot"', (method, path)
        status, _, headers = request(base, method, path, body, token="not-the-token-" + "y" * 20)
        assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"], (method, path)
        status, _, _ = request(base, method, path, body, token=None, headers={"authorization": f"Basic {TOKEN}"})
        assert status == 401
    assert request(base, "POST", "/query", {"question": QUESTION, "answer": False})[0] == 200
    assert request(base, "GET", "/health", token=None)[0] == 200


def test_tokens_from_a_file_of_digests_are_read_again_when_it_changes(store, embedder, running, tmp_path,
                                                                      monkeypatch):
    ingest(store, embedder, late=False)
    export_snapshot(store, embedder)
    service = QueryService(store, embedder)
    assert service.refresh()
    first, second = "first-token-" + "a" * 20, "second-token-" + "b" * 20
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"# query clients\n{hash_token(first)}\n\n{hash_token(second).upper()}  # ops\n")
    monkeypatch.setattr(auth, "RECHECK_S", 0.0)
    base = running(service, tokens=Tokens(tokens_file=tokens_file)).url
    assert request(base, "GET", "/status", token=first)[0] == 200
    assert request(base, "GET", "/status", token=second)[0] == 200
    assert request(base, "GET", "/status", token=TOKEN)[0] == 401

    tokens_file.write_text(f"{hash_token(second)}\n")  # first is revoked
    assert request(base, "GET", "/status", token=first)[0] == 401
    assert request(base, "GET", "/status", token=second)[0] == 200
    # The file fails closed: an unreadable line, or no file, revokes every token it gave, at once.
    tokens_file.write_text(f"{hash_token(second)}\nnot a digest\n")
    assert request(base, "GET", "/status", token=second)[0] == 401
    tokens_file.write_text(f"{hash_token(second)}\n")
    assert request(base, "GET", "/status", token=second)[0] == 200
    tokens_file.unlink()
    assert request(base, "GET", "/status", token=second)[0] == 401
    assert request(base, "GET", "/health", token=None)[0] == 200
    tokens_file.write_bytes(hash_token(second).encode() + b"\n\xff\xfe\n")  # not UTF-8
    assert request(base, "GET", "/status", token=second)[0] == 401
    tokens_file.write_text(f"{hash_token(first)}\n")
    assert request(base, "GET", "/status", token=first)[0] == 200


def test_token_settings_are_checked(tmp_path):
    bad = tmp_path / "bad"
    bad.write_text(f"{hash_token(TOKEN)}\n{TOKEN}\n")
    with pytest.raises(AuthConfigError, match=r"bad, line 2: expected a SHA-256 digest"):
        read_tokens_file(bad)
    with pytest.raises(AuthConfigError, match="LIGHTFOOT_SERVE_TOKEN: a token must have at least 16"):
        Tokens("short")
    with pytest.raises(AuthConfigError, match="cannot read the tokens file"):
        Tokens(tokens_file=tmp_path / "missing")
    assert hash_token(f"  {TOKEN}\n") == hashlib.sha256(TOKEN.encode()).hexdigest()
    tokens = Tokens.from_env({"LIGHTFOOT_SERVE_TOKEN": TOKEN})
    assert tokens.configured and tokens.check(TOKEN) and not tokens.check(TOKEN + "x")
    assert tokens.check_header(f"bearer {TOKEN}") is True and tokens.check_header("Bearer") is None
    assert not Tokens.from_env({}).configured


def test_serving_beyond_loopback_needs_a_token_or_an_explicit_choice():
    nothing = Tokens()
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        check_exposure(host, nothing)
    for host in ("0.0.0.0", "::", "192.0.2.10"):
        with pytest.raises(AuthConfigError, match=f"refusing to serve on {host} without authentication"):
            check_exposure(host, nothing)
        check_exposure(host, Tokens(TOKEN))
        check_exposure(host, nothing, insecure_no_auth=True)


def test_health_tells_nothing_of_the_model_endpoint(store, embedder, chat_server, running):
    ingest(store, embedder, late=False)
    export_snapshot(store, embedder)
    client = LLMClient(LLMSettings(base_url=chat_server.base_url, model="private-answer-model", max_retries=0,
                                   price_in_per_mtok=1.0, price_out_per_mtok=2.0))
    service = QueryService(store, embedder, answerer=Answerer(client), budget=AnswerBudget(1.0))
    assert service.refresh()
    base = running(service).url
    status, health, _ = request(base, "GET", "/health", token=None)
    assert (status, health) == (200, {"status": "ok"})
    status, state, _ = request(base, "GET", "/status")
    assert status == 200 and state["answers"]["state"] == "on" and state["answers"]["budget_usd"] == 1.0
    for payload in (health, state):
        text = json.dumps(payload)
        assert "private-answer-model" not in text and str(chat_server.httpd.server_address[1]) not in text


def test_head_and_query_strings(served):
    base = served.url
    for path, token in [("/health", None), ("/health?x=1", None), ("/status?verbose=1&x", TOKEN),
                        ("/snapshot?", TOKEN)]:
        status, body, _ = request(base, "GET", path, token=token)
        assert status == 200 and body, path
        req = urllib.request.Request(base + path, method="HEAD",
                                     headers={"authorization": f"Bearer {token}"} if token else {})
        with urllib.request.urlopen(req, timeout=30) as response:
            assert response.status == 200 and response.read() == b""
            assert int(response.headers["content-length"]) > 0
    status, body, _ = request(base, "POST", "/query?debug=1", {"question": QUESTION, "answer": False})
    assert status == 200 and body["passages"]
    assert request(base, "POST", "/health", {}, token=None)[0] == 405


def test_malformed_bodies_get_400_never_500(served):
    base = served.url
    cases = [
        (b'{"question": "\\ud800 who?"}', "lone surrogate"),
        (b'{"question": "who?", "\\udfff": 1}', "unknown fields"),
        (b"[" * 30000 + b"]" * 30000, "nested too deeply"),
        (b'{"question": ' * 4000 + b'"q"' + b"}" * 4000, "nested too deeply"),
        (b'{"question": "caf\xe9"}', "not JSON"),
        (b'{"question": "q", "top_k": ' + b"9" * 5000 + b"}", "not JSON"),
        (b'{"question": "q", "top_k": 1e999}', "top_k"),
        (b'{"question": "q", "top_k": NaN}', "top_k"),
        (b'"just a string"', "JSON object"),
        (b"", "not JSON"),
        (b'{"question": "' + b"a" * 4001 + b'"}', "longer than 4000"),
    ]
    for body, message in cases:
        status, payload, _ = request(base, "POST", "/query", body)
        assert status == 400 and message in payload["error"], (body[:40], payload)
    assert request(base, "GET", "/status")[0] == 200  # the service is unharmed


@pytest.mark.slow
def test_bodies_are_refused_before_they_are_read(store, embedder, running):
    ingest(store, embedder, late=False)
    export_snapshot(store, embedder)
    service = QueryService(store, embedder)
    assert service.refresh()
    server = running(service, max_body_bytes=1000, body_timeout_s=0.5)
    head = b"POST /query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + auth_header()

    # A declared length over the limit is refused with no byte of the body sent.
    clock = time.monotonic()
    reply = raw_exchange(server.address, head + b"Content-Length: 1000000000\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413 ") and b"larger than 1,000 bytes" in reply
    assert b"connection: close" in reply.lower() and time.monotonic() - clock < 5
    # A chunked body is counted as it arrives and cut at the limit.
    chunks = b"".join(b"100\r\n" + b"x" * 256 + b"\r\n" for _ in range(8)) + b"0\r\n\r\n"
    reply = raw_exchange(server.address, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks)
    assert reply.startswith(b"HTTP/1.1 413 ")
    # A client that sends on after the refusal, reading as it writes, still reads the refusal (the
    # close lingers; closed at once, the unread bytes would reset the connection under it).
    for _ in range(3):
        assert asyncio.run(send_until_answered(server.address, head + b"Content-Length: 50000000\r\n\r\n")) == 413
    # A body that does not arrive in time.
    reply = raw_exchange(server.address, head + b"Content-Length: 200\r\n\r\n{\"question\":")
    assert reply.startswith(b"HTTP/1.1 408 ")
    # Lengths that are not lengths.
    for length in (b"-1", b"abc", b"1 2", b"9" * 5000):
        reply = raw_exchange(server.address, head + b"Content-Length: " + length + b"\r\n\r\n{}")
        assert reply.startswith(b"HTTP/1.1 400 "), (length[:10], reply[:80])
    # Headers past 16 KiB.
    reply = raw_exchange(server.address, head + b"X-Padding: " + b"p" * 20000 + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert request(server.url, "POST", "/query", {"question": QUESTION, "answer": False})[0] == 200


@pytest.mark.slow
def test_stalled_connections_are_closed_and_do_not_hold_up_health(store, embedder, running):
    ingest(store, embedder, late=False)
    export_snapshot(store, embedder)
    service = QueryService(store, embedder)
    assert service.refresh()
    server = running(service, header_timeout_s=1.0, max_connections_per_client=100)
    stalled = []
    for i in range(60):
        sock = socket.create_connection(server.address, timeout=10)
        if i % 2:
            sock.sendall(b"POST /query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        stalled.append(sock)
    try:
        clock = time.monotonic()
        assert request(server.url, "GET", "/health", token=None)[0] == 200
        assert time.monotonic() - clock < 1.0
        assert request(server.url, "POST", "/query", {"question": QUESTION, "answer": False})[0] == 200
        closed_by = []
        for sock in stalled:
            assert sock.recv(1) == b""  # the header timeout closed it
            closed_by.append(time.monotonic() - clock)
        assert max(closed_by) < 8
    finally:
        for sock in stalled:
            sock.close()
    # A kept-alive connection whose next request stalls halfway through its headers is closed too.
    with socket.create_connection(server.address, timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /health HTTP/1.1\r\nHo")
        assert sock.recv(65536) == b""


@pytest.mark.slow
def test_busy_workers_and_too_many_connections_get_503(store, embedder, running, monkeypatch):
    ingest(store, embedder, late=False)
    export_snapshot(store, embedder)
    service = QueryService(store, embedder)
    assert service.refresh()
    entered = slow_down(monkeypatch, service, "retrieve", 1.0)
    server = running(service, workers=1, queue=0, max_connections=8, max_connections_per_client=4)
    results = []
    first = threading.Thread(target=lambda: results.append(
        request(server.url, "POST", "/query", {"question": QUESTION, "answer": False})))
    first.start()
    assert entered.wait(10)
    status, body, headers = request(server.url, "POST", "/query", {"question": QUESTION, "answer": False})
    assert status == 503 and headers["retry-after"] == "1" and "busy" in body["error"]
    first.join(30)
    assert results[0][0] == 200

    idle = [socket.create_connection(server.address, timeout=10, source_address=(f"127.0.0.{2 + i % 2}", 0))
            for i in range(8)]  # two other clients, at their bound of 4 each: the server's 8 are taken
    try:
        time.sleep(0.2)
        status, body, headers = request(server.url, "GET", "/health", token=None)
        assert status == 503 and "too many connections" in body["error"] and headers["connection"] == "close"
        assert headers["content-type"] == "application/json" and headers["retry-after"] == "1"
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.2)
    assert request(server.url, "GET", "/health", token=None)[0] == 200


def test_without_a_snapshot_the_service_says_so(store, embedder, running):
    ingest(store, embedder, late=False)
    service = QueryService(store, embedder)
    assert not service.refresh()
    base = running(service).url
    assert request(base, "GET", "/health", token=None)[:2] == (503, {"status": "no_snapshot"})
    status, body, headers = request(base, "POST", "/query", {"question": QUESTION})
    assert status == 503 and "no snapshot" in body["error"] and headers["retry-after"] == "5"


@pytest.mark.slow
def test_a_new_snapshot_is_picked_up_while_queries_keep_being_answered(store, embedder, running, monkeypatch):
    ingest(store, embedder, late=False)
    old = export_snapshot(store, embedder)
    service = QueryService(store, embedder)
    assert service.refresh()

    loading = slow_down(monkeypatch, queries, "load_snapshot", 0.6)  # queries meanwhile: from the old snapshot
    service.watch(interval_s=0.05)
    # four clients as fast as they are answered, as the operator (shown the store's snapshot ids)
    base = running(service, tokens=Tokens(TOKEN, groups="*"), client_rate=0, token_rate=0).url
    results: list[list[tuple[float, int, str | None, list[str]]]] = [[] for _ in range(4)]
    stop = threading.Event()

    def client(log):
        while not stop.is_set():
            status, body, _ = request(base, "POST", "/query", {"question": "Where is Cirrus Devices based?",
                                                              "answer": False, "top_k": 12})
            snapshot_id = body.get("snapshot", {}).get("snapshot_id")
            log.append((time.monotonic(), status, snapshot_id, [p["doc_id"] for p in body.get("passages", [])]))

    threads = [threading.Thread(target=client, args=(log,)) for log in results]
    for t in threads:
        t.start()
    time.sleep(0.3)
    ingest(store, embedder, late=True)
    new = export_snapshot(store, embedder)
    assert loading.wait(10)
    deadline = time.monotonic() + 20
    while service.status()["snapshot_id"] != new.snapshot_id and time.monotonic() < deadline:
        time.sleep(0.02)
    swapped_at = time.monotonic()
    time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join(30)

    every = [entry for log in results for entry in log]
    assert every and all(status == 200 for _, status, _, _ in every), [e for e in every if e[1] != 200][:3]
    assert {snapshot_id for _, _, snapshot_id, _ in every} == {old.snapshot_id, new.snapshot_id}
    for log in results:  # each client moves from old to new once and never back
        ids = [snapshot_id for _, _, snapshot_id, _ in log]
        assert ids == sorted(ids, key=lambda i: i != old.snapshot_id)
    answered_while_loading = [e for e in every if e[2] == old.snapshot_id and e[0] > swapped_at - 0.55]
    assert answered_while_loading, "queries during the load must have been answered from the old snapshot"
    for _, _, snapshot_id, docs in every:
        assert ("q-cirrus" in docs) == (snapshot_id == new.snapshot_id)
    assert service.reloads == 2 and service.last_reload_error is None


@pytest.mark.slow
def test_a_snapshot_that_fails_to_load_leaves_the_old_one_serving(store, embedder):
    ingest(store, embedder, late=False)
    old = export_snapshot(store, embedder)
    service = QueryService(store, embedder)
    assert service.refresh()
    ingest(store, embedder, late=True)
    new = export_snapshot(store, embedder)
    (Path(new.uri) / "graph_indices.npy").write_bytes(b"garbage")
    assert not service.refresh()
    assert service.status()["snapshot_id"] == old.snapshot_id
    assert service.last_reload_error.startswith("SnapshotError") and new.snapshot_id in service.last_reload_error
    assert service.query(QUESTION, answer=False)["snapshot"]["snapshot_id"] == old.snapshot_id
    assert latest_snapshot(store).snapshot_id == new.snapshot_id


def test_answers_come_from_the_language_model_with_the_retrieved_context(store, embedder, chat_server, running):
    ingest(store, embedder, late=True)
    export_snapshot(store, embedder)
    chat_server.queue(chat_server.Reply(content='{"answer": "Mira Kalden"}', usage=(500, 6)))
    client = LLMClient(LLMSettings(base_url=chat_server.base_url, model="answer-model", max_retries=0,
                                   price_in_per_mtok=1.0, price_out_per_mtok=2.0))
    service = QueryService(store, embedder, answerer=Answerer(client))
    assert service.refresh()
    base = running(service).url
    status, body, _ = request(base, "POST", "/query", {"question": QUESTION, "top_k": 2})
    assert status == 200
    assert body["answer"]["answer"] == "Mira Kalden" and body["answer"]["tokens_in"] == 500
    assert body["answer_status"] == "answered" and body["answer"]["attempts"] == 1
    assert len(body["answer_facts"]) == 10 and body["latency_ms"]["answer"] > 0
    assert len(body["passages"]) == 2
    prompt = chat_server.requests[0].user_text
    assert "Orbital Corp was founded by Mira Kalden" in prompt and prompt.count("\n[") == 10


def test_the_budget_stops_answer_calls_and_the_ledger_holds_each_one(store, embedder, chat_server, running):
    ingest(store, embedder, late=True)
    export_snapshot(store, embedder)
    settings = LLMSettings(base_url=chat_server.base_url, model="answer-model", max_retries=0,
                           price_in_per_mtok=100.0, price_out_per_mtok=400.0)
    answerer = Answerer(LLMClient(settings))
    probe = QueryService(store, embedder, answerer=answerer)
    assert probe.refresh()
    _, pending = probe.retrieve(QUESTION)
    worst = answerer.worst_case_usd(answerer.messages(pending.question, pending.facts, pending.passages))
    cost = (500 * 100.0 + 6 * 400.0) / 1e6
    assert cost < worst
    # Room for one call's worst case, and not for a second beside what the first cost.
    service = QueryService(store, embedder, answerer=answerer, budget=AnswerBudget(worst + cost / 2))
    assert service.refresh()
    chat_server.queue(chat_server.Reply(content='{"answer": "Mira Kalden"}', usage=(500, 6)))
    base = running(service).url

    status, body, _ = request(base, "POST", "/query", {"question": QUESTION})
    assert status == 200 and body["answer"]["answer"] == "Mira Kalden"
    for _ in range(2):
        status, body, _ = request(base, "POST", "/query", {"question": QUESTION, "top_k": 3})
        assert status == 200 and body["answer"] is None and "budget" in body["answer_status"]
        assert [p["rank"] for p in body["passages"]] == [1, 2, 3]  # retrieval still comes back
    assert chat_server.count == 1

    rows = ledger.read(store)
    assert rows.height == 1
    row = rows.row(0, named=True)
    assert (row["purpose"], row["run_id"], row["status"], row["model"]) == (
        "answer", service.ledger_run_id, "ok", "answer-model")
    assert (row["tokens_in"], row["tokens_out"], row["attempts"]) == (500, 6, 1)
    assert row["cost_usd"] == pytest.approx(cost) and row["doc_id"] is None
    status, state, _ = request(base, "GET", "/status")
    answers = state["answers"]
    assert answers["state"] == "budget spent" and answers["calls"] == 1 and answers["refused"] == 2
    assert answers["spent_usd"] == pytest.approx(cost) and answers["ledger_run_id"] == service.ledger_run_id


def test_a_failed_answer_call_is_in_the_ledger_and_releases_its_reservation(store, embedder, chat_server):
    ingest(store, embedder, late=False)
    export_snapshot(store, embedder)
    chat_server.queue(chat_server.Reply(status=500), then=chat_server.Reply(content='{"answer": "x"}'))
    settings = LLMSettings(base_url=chat_server.base_url, model="answer-model", max_retries=0,
                           price_in_per_mtok=1.0, price_out_per_mtok=2.0)
    service = QueryService(store, embedder, answerer=Answerer(LLMClient(settings)), budget=AnswerBudget(0.5))
    assert service.refresh()
    failed = service.query(QUESTION)
    assert failed["answer_status"] == "failed" and failed["answer"]["error_kind"] == "server_error"
    assert service.query(QUESTION)["answer"]["answer"] == "x"
    rows = ledger.read(store).sort("created_at")
    assert rows.get_column("status").to_list() == ["error", "ok"]
    assert rows.get_column("error_kind").to_list() == ["server_error", None]
    assert service.budget.held_usd == 0.0 and service.budget.calls == 2


def test_parse_query_request_defaults():
    assert parse_query_request(b'{"question": "q"}') == {"question": "q", "top_k": 10, "answer": True,
                                                         "rerank": True}
    with pytest.raises(BadRequest, match="object"):
        parse_query_request(b"[1]")
    with pytest.raises(BadRequest, match="top_k"):
        parse_query_request(b'{"question": "q", "top_k": true}')
