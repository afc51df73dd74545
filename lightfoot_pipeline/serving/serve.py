"""The query service: answers from the published snapshot, and moves to a new one without a restart.

:class:`QueryService` holds the loaded snapshot and its retriever as one reference. A watcher
thread polls the store's ``snapshots/latest`` pointer; when it names a new snapshot, the watcher
loads it in the background and then swaps the reference in one assignment. A query takes the
reference once when it starts, so it runs entirely on one snapshot, and queries keep being
answered from the old snapshot until the new one has loaded. A snapshot that fails to load is
reported (``GET /health``) and the service stays on the one it has.

HTTP (JSON in and out)::

    POST /query     {"question": "...", "top_k": 10, "answer": true, "rerank": true}
    GET  /health    status, the snapshot being served, the last reload error if any
    GET  /snapshot  the served snapshot's manifest and the published one's id

Every query result names the snapshot that served it and gives a latency breakdown in ms.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lightfoot_pipeline.serving.answer import Answerer, build_answerer
from lightfoot_pipeline.models.embedder import Embedder, load_embedder
from lightfoot_pipeline.serving.rerank import Reranker, RerankerStatus, load_reranker
from lightfoot_pipeline.serving.retrieve import RetrievalError, RetrievalSettings, Retriever, one_thread_per_query
from lightfoot_pipeline.serving.snapshot import (
    Snapshot, SnapshotError, embedder_for_models, export_snapshot, latest_snapshot, load_snapshot,
)
from lightfoot_pipeline.store.store import Store

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8410
DEFAULT_TOP_K = 10
MAX_TOP_K = 30  # the passages PageRank keeps (RetrievalSettings.candidates)
MAX_QUESTION_CHARS = 4000


class NoSnapshotLoaded(RuntimeError):
    """The service has no snapshot to answer from yet."""


@dataclass(frozen=True)
class _Serving:
    snapshot: Snapshot
    retriever: Retriever
    loaded_at: str


class QueryService:
    """Retrieval (and answers, when a model endpoint is configured) over the published snapshot."""

    def __init__(self, store: Store, embedder: Embedder, reranker: Reranker | None = None,
                 reranker_status: RerankerStatus | None = None, answerer: Answerer | None = None,
                 answer_status: str = "", settings: RetrievalSettings | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.reranker = reranker
        self.reranker_status = reranker_status
        self.answerer = answerer
        self.answer_status = answer_status or ("available" if answerer else "no answer model configured")
        self.settings = settings or RetrievalSettings()
        self._serving: _Serving | None = None
        self._reload_lock = threading.Lock()  # one load at a time; queries never take it
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.last_reload_error: str | None = None
        self.reloads = 0

    # -- snapshots -------------------------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot | None:
        serving = self._serving
        return serving.snapshot if serving else None

    def use(self, snapshot: Snapshot) -> None:
        """Serve this snapshot from now on (queries already running finish on the old one)."""
        retriever = Retriever(snapshot, self.embedder, self.reranker, self.reranker_status, self.settings)
        retriever.warm_up()  # the first query should not pay for lazy set-up
        self._serving = _Serving(snapshot, retriever, dt.datetime.now(dt.timezone.utc).isoformat())
        self.reloads += 1

    def refresh(self) -> bool:
        """Load the published snapshot if it is not the one being served; True if it switched."""
        with self._reload_lock:
            try:
                published = latest_snapshot(self.store)
                current = self._serving
                if published is None or (current and current.snapshot.snapshot_id == published.snapshot_id):
                    return False
                snapshot = load_snapshot(self.store, published.snapshot_id)
                self.use(snapshot)
            except (SnapshotError, RetrievalError, OSError) as err:
                self.last_reload_error = f"{type(err).__name__}: {err}"
                log.warning("staying on snapshot %s: %s", self._serving and self._serving.snapshot.snapshot_id, err)
                return False
            self.last_reload_error = None
            log.info("now serving snapshot %s", published.snapshot_id)
            return True

    def watch(self, interval_s: float = 2.0) -> None:
        """Poll for new snapshots in a background thread until :meth:`close`."""
        if self._watcher is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval_s):
                self.refresh()

        self._watcher = threading.Thread(target=loop, name="snapshot-watcher", daemon=True)
        self._watcher.start()

    def close(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
            self._watcher = None

    # -- queries ---------------------------------------------------------------------------------

    def query(self, question: str, *, top_k: int = DEFAULT_TOP_K, answer: bool = True, rerank: bool = True) -> dict:
        started = time.perf_counter()
        serving = self._serving  # one snapshot for the whole query
        if serving is None:
            raise NoSnapshotLoaded("no snapshot is loaded yet: export one with `lightfoot snapshot`")
        retriever = serving.retriever
        if not 1 <= top_k <= retriever.settings.candidates:
            raise RetrievalError(f"top_k must be from 1 to {retriever.settings.candidates}, got {top_k}")
        vector = retriever.question_vector(question)
        latency = {"embed": _ms_since(started)}
        retrieval = retriever.retrieve(question, rerank=rerank, vector=vector)
        latency.update({k: v for k, v in retrieval.timings_ms.items() if k not in ("embed", "total")})
        latency["retrieval"] = _ms_since(started)
        payload: dict = {
            "question": question,
            "snapshot": {"snapshot_id": serving.snapshot.snapshot_id, "store_seq": serving.snapshot.info.store_seq,
                         "fingerprint": serving.snapshot.info.fingerprint, "loaded_at": serving.loaded_at},
            "order": retrieval.order,
            "reranker": retrieval.reranker.as_dict(),
            "pagerank": retrieval.pagerank,
            "seed_facts": [_fact(f) for f in retrieval.seed_facts],
            "passages": [_passage(p) for p in retrieval.passages[:top_k]],
        }
        if answer and self.answerer is not None:
            clock = time.perf_counter()
            facts = retriever.similar_facts(vector, self.answerer.n_facts)
            result = self.answerer.answer(question, facts, retrieval.passages)
            latency["answer"] = _ms_since(clock)
            payload["answer"] = result.as_dict()
            payload["answer_facts"] = [_fact(f) for f in facts]
        else:
            payload["answer"] = None
            payload["answer_status"] = "not requested" if not answer else self.answer_status
        latency["total"] = _ms_since(started)
        payload["latency_ms"] = latency
        return payload

    def health(self) -> dict:
        serving = self._serving
        return {
            "status": "ok" if serving else "no_snapshot",
            "snapshot_id": serving.snapshot.snapshot_id if serving else None,
            "loaded_at": serving.loaded_at if serving else None,
            "reloads": self.reloads,
            "last_reload_error": self.last_reload_error,
            "reranker": (serving.retriever.reranker_status.as_dict() if serving else None),
            "answers": self.answer_status,
        }

    def snapshot_info(self) -> dict:
        serving = self._serving
        try:
            published = latest_snapshot(self.store)
        except SnapshotError as err:
            published, error = None, str(err)
        else:
            error = None
        return {
            "serving": serving.snapshot.info.as_dict() if serving else None,
            "loaded_at": serving.loaded_at if serving else None,
            "published_id": published.snapshot_id if published else None,
            "published_error": error,
        }


def resolve_embedder(store: Store, spec: str | None = None) -> Embedder:
    """The embedder to query with: the one named, else the published snapshot's, else the index's."""
    if spec:
        return load_embedder(spec)
    published = latest_snapshot(store)
    config = store.manifest().config
    models = published.models if published else {"embedder": config.get("embedder"), "dim": config.get("dim")}
    embedder = embedder_for_models(models)
    if embedder is None:
        raise SnapshotError(f"the embedder {models.get('embedder')!r} of {store.uri} cannot be loaded here; "
                            "name one with --embedder (a model name or path, or hashing[:DIM])")
    return embedder


def open_service(store: Store, *, embedder_spec: str | None = None, reranker_spec: str | None = None,
                 answers: bool = True) -> QueryService:
    """A service on the store's published snapshot (exporting one first if there is none)."""
    if not store.exists():
        raise SnapshotError(f"no index at {store.uri}: run `lightfoot ingest` first")
    embedder = resolve_embedder(store, embedder_spec)
    published = latest_snapshot(store)
    if published is None or published.models.get("embedder") != embedder.model_id:
        export_snapshot(store, embedder)
    reranker, status = load_reranker(reranker_spec)
    answerer, answer_status = build_answerer() if answers else (None, "answers were turned off")
    one_thread_per_query()
    service = QueryService(store, embedder, reranker, status, answerer, answer_status)
    if not service.refresh():
        raise SnapshotError(service.last_reload_error or f"no snapshot to serve under {store.uri}")
    return service


def snapshot_is_stale(store: Store, service: QueryService) -> bool:
    """Whether the store has commits after the snapshot being served was exported."""
    snapshot = service.snapshot
    return snapshot is not None and store.manifest().seq > snapshot.info.store_seq


def _ms_since(clock: float) -> float:
    return round((time.perf_counter() - clock) * 1000.0, 3)


def _fact(fact) -> dict:
    return {"fact_id": fact.fact_id, "subject": fact.subject, "predicate": fact.predicate, "object": fact.object,
            "similarity": round(fact.similarity, 6), "evidence": fact.evidence}


def _passage(hit) -> dict:
    return {
        "rank": hit.rank, "chunk_id": hit.chunk_id, "doc_id": hit.doc_id, "title": hit.title, "text": hit.text,
        "pagerank_rank": hit.pagerank_rank, "pagerank_score": hit.pagerank_score, "dense_score": hit.dense_score,
        "rerank_score": hit.rerank_score, "rerank_rank": hit.rerank_rank, "fused_score": hit.fused_score,
    }


# -- HTTP --------------------------------------------------------------------------------------


class BadRequest(ValueError):
    pass


def parse_query_request(body: bytes) -> dict:
    """The arguments of a POST /query body, or BadRequest saying what is wrong."""
    try:
        payload = json.loads(body or b"")
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BadRequest(f"the body is not JSON: {err}") from None
    if not isinstance(payload, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = set(payload) - {"question", "top_k", "answer", "rerank"}
    if unknown:
        raise BadRequest(f"unknown fields: {', '.join(sorted(unknown))}")
    question = payload.get("question")
    if not isinstance(question, str) or not question.strip():
        raise BadRequest("question must be a non-empty string")
    if len(question) > MAX_QUESTION_CHARS:
        raise BadRequest(f"question is longer than {MAX_QUESTION_CHARS} characters")
    top_k = payload.get("top_k", DEFAULT_TOP_K)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
        raise BadRequest(f"top_k must be an integer from 1 to {MAX_TOP_K}")
    flags = {}
    for name in ("answer", "rerank"):
        value = payload.get(name, True)
        if not isinstance(value, bool):
            raise BadRequest(f"{name} must be true or false")
        flags[name] = value
    return {"question": question, "top_k": top_k, **flags}


def make_server(service: QueryService, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
    """An HTTP server over the service (not started: call ``serve_forever``)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "lightfoot"

        def log_message(self, fmt, *args) -> None:
            log.debug("%s %s", self.address_string(), fmt % args)

        def _send(self, status: int, payload: dict) -> None:
            body = json.dumps(payload, default=str).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                health = service.health()
                self._send(200 if health["status"] == "ok" else 503, health)
            elif self.path == "/snapshot":
                self._send(200, service.snapshot_info())
            else:
                self._send(404, {"error": f"no such resource {self.path}; try POST /query, GET /health, GET /snapshot"})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            if self.path != "/query":
                self._send(404, {"error": f"no such resource {self.path}; POST /query"})
                return
            try:
                arguments = parse_query_request(body)
                self._send(200, service.query(**arguments))
            except BadRequest as err:
                self._send(400, {"error": str(err)})
            except NoSnapshotLoaded as err:
                self._send(503, {"error": str(err)})
            except RetrievalError as err:
                self._send(422, {"error": str(err)})
            except Exception as err:  # a bug must not take the server down; the client sees why
                log.exception("query failed")
                self._send(500, {"error": f"{type(err).__name__}: {err}"})

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
