"""The query service over HTTP: queries, health, snapshot swaps under load, answers."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lightfoot_pipeline import pipeline
from lightfoot_pipeline.serving import serve
from lightfoot_pipeline.serving.answer import Answerer
from lightfoot_pipeline.ingest.dataset import load_corpus, load_recorded_extractions
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.serving.serve import BadRequest, QueryService, make_server, parse_query_request
from lightfoot_pipeline.serving.snapshot import export_snapshot, latest_snapshot

DATA = Path(__file__).parents[1] / "data" / "query-corpus"
QUESTION = "Who founded the company that makes the Zephyr phone?"
LATE = {"q-cirrus", "q-riga"}  # documents added while the service runs


def ingest(store, embedder, late: bool) -> None:
    documents = [d for d in load_corpus(DATA) if late or d.doc_id not in LATE]
    pipeline.ingest(store, documents, ReplayExtractor(load_recorded_extractions(DATA)), embedder)


def request(base: str, method: str, path: str, body: dict | bytes | None = None) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def embedder():
    return HashingEmbedder(dim=32)


@pytest.fixture
def running(store, embedder):
    """A started HTTP server over a service on the store; yields (service, base URL)."""
    started = []

    def start(service: QueryService):
        server = make_server(service, "127.0.0.1", 0)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        started.append((server, service))
        host, port = server.server_address[:2]
        return f"http://{host}:{port}"

    yield start
    for server, service in started:
        server.shutdown()
        server.server_close()
        service.close()


def test_query_health_and_snapshot_over_http(store, embedder, running):
    ingest(store, embedder, late=True)
    info = export_snapshot(store, embedder)
    service = QueryService(store, embedder)
    assert service.refresh()
    base = running(service)

    status, body = request(base, "POST", "/query", {"question": QUESTION, "top_k": 3, "answer": False})
    assert status == 200
    assert body["snapshot"]["snapshot_id"] == info.snapshot_id and body["snapshot"]["store_seq"] == info.store_seq
    assert [p["rank"] for p in body["passages"]] == [1, 2, 3]
    assert {"q-zephyr", "q-orbital"} <= {p["doc_id"] for p in body["passages"]}
    assert body["answer"] is None and body["answer_status"] == "not requested"
    assert set(body["latency_ms"]) == {"embed", "seed", "pagerank", "rerank", "retrieval", "total"}
    assert body["latency_ms"]["total"] >= body["latency_ms"]["retrieval"] > 0
    assert len(body["seed_facts"]) == 2

    status, body = request(base, "POST", "/query", {"question": QUESTION})
    assert status == 200 and body["answer"] is None and body["answer_status"] == "no answer model configured"
    assert len(body["passages"]) == 10

    status, health = request(base, "GET", "/health")
    assert status == 200 and health["status"] == "ok" and health["snapshot_id"] == info.snapshot_id
    status, snap = request(base, "GET", "/snapshot")
    assert status == 200 and snap["serving"]["snapshot_id"] == snap["published_id"] == info.snapshot_id
    assert snap["serving"]["counts"]["passages"] == 12

    for bad, message in [(b"not json", "not JSON"), ({"question": ""}, "non-empty"), ({"q": QUESTION}, "unknown"),
                         ({"question": QUESTION, "top_k": 0}, "top_k"), ({"question": QUESTION, "top_k": 31}, "top_k"),
                         ({"question": QUESTION, "answer": "yes"}, "answer must be")]:
        status, body = request(base, "POST", "/query", bad)
        assert status == 400 and message in body["error"], (bad, body)
    assert request(base, "GET", "/nowhere")[0] == 404
    assert request(base, "POST", "/nowhere", {})[0] == 404


def test_without_a_snapshot_the_service_says_so(store, embedder, running):
    ingest(store, embedder, late=False)
    service = QueryService(store, embedder)
    assert not service.refresh()
    base = running(service)
    assert request(base, "GET", "/health") == (503, service.health())
    status, body = request(base, "POST", "/query", {"question": QUESTION})
    assert status == 503 and "no snapshot" in body["error"]


def test_a_new_snapshot_is_picked_up_while_queries_keep_being_answered(store, embedder, running, monkeypatch):
    ingest(store, embedder, late=False)
    old = export_snapshot(store, embedder)
    service = QueryService(store, embedder)
    assert service.refresh()

    real_load = serve.load_snapshot
    loading = threading.Event()

    def slow_load(*args, **kwargs):
        loading.set()
        time.sleep(0.6)  # queries arriving now must still be answered, from the old snapshot
        return real_load(*args, **kwargs)

    monkeypatch.setattr(serve, "load_snapshot", slow_load)
    service.watch(interval_s=0.05)
    base = running(service)
    results: list[list[tuple[float, int, str | None, list[str]]]] = [[] for _ in range(4)]
    stop = threading.Event()

    def client(log):
        while not stop.is_set():
            status, body = request(base, "POST", "/query", {"question": "Where is Cirrus Devices based?",
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
    while service.health()["snapshot_id"] != new.snapshot_id and time.monotonic() < deadline:
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


def test_a_snapshot_that_fails_to_load_leaves_the_old_one_serving(store, embedder):
    ingest(store, embedder, late=False)
    old = export_snapshot(store, embedder)
    service = QueryService(store, embedder)
    assert service.refresh()
    ingest(store, embedder, late=True)
    new = export_snapshot(store, embedder)
    (Path(new.uri) / "graph.npz").write_bytes(b"garbage")
    assert not service.refresh()
    assert service.health()["snapshot_id"] == old.snapshot_id
    assert service.last_reload_error.startswith("SnapshotError") and new.snapshot_id in service.last_reload_error
    assert service.query(QUESTION, answer=False)["snapshot"]["snapshot_id"] == old.snapshot_id
    assert latest_snapshot(store).snapshot_id == new.snapshot_id


def test_answers_come_from_the_language_model_with_the_retrieved_context(store, embedder, chat_server, running):
    ingest(store, embedder, late=True)
    export_snapshot(store, embedder)
    chat_server.queue(chat_server.Reply(content='{"answer": "Mira Kalden"}', usage=(500, 6)))
    client = LLMClient(LLMSettings(base_url=chat_server.base_url, model="answer-model", max_retries=0))
    service = QueryService(store, embedder, answerer=Answerer(client))
    assert service.refresh()
    base = running(service)
    status, body = request(base, "POST", "/query", {"question": QUESTION, "top_k": 2})
    assert status == 200
    assert body["answer"]["answer"] == "Mira Kalden" and body["answer"]["tokens_in"] == 500
    assert len(body["answer_facts"]) == 10 and body["latency_ms"]["answer"] > 0
    assert len(body["passages"]) == 2
    prompt = chat_server.requests[0].user_text
    assert "Orbital Corp was founded by Mira Kalden" in prompt and prompt.count("\n[") == 10


def test_parse_query_request_defaults():
    assert parse_query_request(b'{"question": "q"}') == {"question": "q", "top_k": 10, "answer": True,
                                                         "rerank": True}
    with pytest.raises(BadRequest, match="object"):
        parse_query_request(b"[1]")
    with pytest.raises(BadRequest, match="top_k"):
        parse_query_request(b'{"question": "q", "top_k": true}')
