"""The query service: answers from the published snapshot, and moves to a new one without a restart.

:class:`QueryService` holds the loaded snapshot and its retriever as one reference. A watcher
thread polls the store's ``snapshots/latest`` pointer; when it names a new snapshot, the watcher
loads it in the background and then swaps the reference in one assignment. A query takes the
reference once when it starts, so it runs entirely on one snapshot, and queries keep being
answered from the old snapshot until the new one has loaded. A snapshot that fails to load is
reported (``status``) and the service stays on the one it has.

A query runs in two steps, so that a server can give each its own worker pool: :meth:`QueryService.retrieve`
ranks the passages (local work, milliseconds) and, when an answer is wanted, :meth:`QueryService.answer`
calls the language model (seconds). Every answer call first reserves its worst case against the
service's :class:`~lightfoot_pipeline.retrieval.answer.AnswerBudget`, is settled at what the endpoint
billed, and is written to the cost ledger (purpose ``answer``, one ledger run per service process;
:func:`open_service` creates the ledger before the first answer, and a write lost to another
writer is tried again until it lands). Once the budget is spent, queries still get their
passages and the answer says why it is missing. A model without a known price gives no answers
unless the operator allowed it (``--allow-unpriced``); ``status`` shows the price state
(``priced``, ``unpriced-allowed`` or ``refused``) beside the spend.

Every request runs as a principal (permissions/principals.py) on that principal's view of the
snapshot (permissions/views.py): the index of the documents it may read, exactly as a store of
those documents would serve it. Each loaded snapshot keeps its views (a ViewCache, by reader set)
and a retriever per view, built once; retrieval, the answer prompt, the deep mode's memory,
evidence and prompts, ``status`` and ``snapshot_info`` all come from the view, so that nothing of
a document the principal may not read reaches a response or a prompt. Nor does anything of the
operator's: a principal other than the operator is shown its view's names (``view``, a digest
of its documents' ids; an id and fingerprint that digest its tables), never the store's
fingerprint, commit or export counts, and so whether or not it reads every document
(:meth:`Served.describe`); a failed reload and the reranker without their details; and its own
answer calls, tokens and spend, each principal within a budget of its own inside the process's
(:meth:`QueryService.budget_of`). The operator sees the store's names and every total. The views of the principals the service expects
(:meth:`QueryService.expect`, the tokens file's) are built when a snapshot loads, before it
serves. The library's default principal is the operator (every document), for callers in the
operator's own process; the HTTP side (app.py) always passes the request's.

**Narrowing is immediate.** The watcher also follows the store log: when a commit after the
served snapshot's deletes one of its documents or narrows its readers (``lightfoot delete``,
``lightfoot readers``, an erasure, a sync, Dagster's runs: whoever commits), it reads the store's
current readers and live documents (two small columns), and serves from then on the snapshot
narrowed by them (permissions/views.py ``Narrowing``): every principal's view, the operator's
among them, is the index of the documents it still reads, derived from the snapshot's access
tables, so that every route (queries, answers, the deep mode, ``explain``, ``status``,
``snapshot``) answers as a store of those documents would. Views of principals that lost nothing
are kept as they were. A widening waits for the next export. A snapshot being loaded is narrowed
the same way before it serves, so loading an export older than a narrowing commit never serves
what the commit took away. A principal other than the operator is not told that a narrowing
happened, only what its own view holds.

The HTTP side is app.py (the Starlette application) under uvicorn (server.py), and its
authentication auth.py.
Every query result names the snapshot that served it and gives a latency breakdown in ms.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.ingest.readers import PUBLIC
from lightfoot_pipeline.models.embedder import Embedder, load_embedder
from lightfoot_pipeline.models.llm import ALLOW_UNPRICED_HINT, REFUSED
from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL, Principal
from lightfoot_pipeline.permissions.provenance import ProvenanceStores, ViewStore
from lightfoot_pipeline.permissions.views import (
    VIEW_COUNTS,
    VIEWS_KEPT,
    Narrowing,
    ReaderView,
    ViewCache,
    narrowing_of,
    whole_view_names,
)
from lightfoot_pipeline.retrieval.answer import (
    Answer,
    AnswerBudget,
    Answerer,
    SharedBudget,
    answer_charge,
    answer_settings,
    build_answerer,
)
from lightfoot_pipeline.retrieval.deep import DeepQuery, DeepQueryError, DeepSettings, charges
from lightfoot_pipeline.retrieval.rerank import Reranker, RerankerStatus, load_reranker
from lightfoot_pipeline.retrieval.retrieve import (
    FactHit,
    PassageHit,
    RetrievalError,
    RetrievalSettings,
    Retriever,
    query_thread_limits,
)
from lightfoot_pipeline.settings.environment import DEFAULT_POLL_S
from lightfoot_pipeline.snapshot.collect import access_since, live_readers
from lightfoot_pipeline.snapshot.export import publish_checked
from lightfoot_pipeline.snapshot.format import (
    Snapshot,
    SnapshotError,
    embedder_for_models,
    latest_snapshot,
    load_snapshot,
)
from lightfoot_pipeline.snapshot.verdict import StagedCheck
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store

log = logging.getLogger(__name__)

DEFAULT_TOP_K = 10
MAX_TOP_K = 30  # the passages PageRank keeps (RetrievalSettings.candidates)
MAX_QUESTION_CHARS = 4000
DEFAULT_ANSWER_BUDGET_USD = 1.0
DEFAULT_PRINCIPAL_BUDGET_USD = 0.25  # `lightfoot serve`'s cap of each principal, within the process's
# Store buckets the service keeps in memory for its provenance routes (explain doc and entity read
# a few buckets of each table; the same buckets serve the next documents at the same commit).
PROVENANCE_BUCKET_BYTES = 256 * 1024 * 1024


class NoSnapshotLoaded(LightfootError, RuntimeError):
    """The service has no snapshot to answer from yet."""


@dataclass(frozen=True)
class Served:
    """What one request runs on: a principal's view of the loaded snapshot, the view's retriever,
    when the snapshot was loaded, and the names the principal is shown for it (``names``: view key,
    id, fingerprint)."""

    view: ReaderView
    retriever: Retriever
    loaded_at: str
    names: tuple[str, str, str | None] = ("all", "", None)
    operator: bool = True
    narrowing: Narrowing | None = None  # the store commit's narrowing it honours (None: the snapshot as exported)

    @property
    def snapshot(self) -> Snapshot:
        return self.view.snapshot

    @property
    def view_key(self) -> str:
        return self.names[0]

    @property
    def snapshot_id(self) -> str:
        return self.names[1]

    def describe(self) -> dict:
        """The snapshot as a response names it. The operator sees the store's own id, fingerprint
        and commit; any other principal its view's id and fingerprint (a digest of what it reads)
        and no commit, whether or not it reads every document (the store's commits count those
        of documents it cannot read)."""
        info = self.snapshot.info
        key, snapshot_id, fingerprint = self.names
        described = {"snapshot_id": snapshot_id, "store_seq": info.store_seq if self.operator else None,
                     "fingerprint": fingerprint, "view": key, "loaded_at": self.loaded_at}
        if self.operator:  # what the store's later commits took from the snapshot (its commits are the operator's)
            described["narrowed"] = self.narrowing.as_dict() if self.narrowing else None
        return described

    @property
    def counts(self) -> dict:
        """The view's counts: for a principal other than the operator, those a view has (views.py
        VIEW_COUNTS, in order), never the export's own (what it embedded, how many reader sets)."""
        counts = dict(self.snapshot.info.counts)
        if self.operator:
            return counts
        return {name: dict(sorted(counts[name].items())) if isinstance(counts[name], dict) else counts[name]
                for name in sorted(VIEW_COUNTS) if name in counts}

    def manifest(self) -> dict:
        """The manifest of the view as :meth:`describe` names it, with its counts and models (no path)."""
        info = self.snapshot.info.as_dict()
        info.pop("uri", None)  # a path on the server
        return {**info, **{k: v for k, v in self.describe().items() if k != "loaded_at"}, "counts": self.counts}


class _Serving:
    """One loaded snapshot, as narrowed by the store's later commits (``narrowing``; None: as
    exported): its retriever, its views by reader set and a retriever for each view (the least
    recently used dropped beyond VIEWS_KEPT). ``inherit``, the serving of the same snapshot it
    replaces, lends its views and their retrievers; ``log_version`` is the store log's version
    it was narrowed at."""

    def __init__(self, snapshot: Snapshot, retriever: Retriever, loaded_at: str,
                 make_retriever: Callable[[Snapshot], Retriever], narrowing: Narrowing | None = None,
                 inherit: _Serving | None = None, log_version: int | None = None) -> None:
        self.snapshot = snapshot
        self.retriever = retriever
        self.loaded_at = loaded_at
        self.narrowing = narrowing if narrowing else None
        self.log_version = log_version
        inherit = inherit if inherit is not None and inherit.snapshot is snapshot else None
        self.views = ViewCache(snapshot, narrowing=self.narrowing, inherit=inherit.views if inherit else None)
        self._make_retriever = make_retriever
        kept = set(self.views.keys())
        self._retrievers: OrderedDict[str, tuple[ReaderView, Retriever]] = OrderedDict(
            (key, held) for key, held in (inherit.retrievers() if inherit else ()) if key in kept)
        self._lock = threading.Lock()
        self._building = threading.Lock()  # one view's retriever built at a time
        self._whole_names: tuple[str, str, str] | None = None

    def retrievers(self) -> list[tuple[str, tuple[ReaderView, Retriever]]]:
        """The views' retrievers held now, least recently used first."""
        with self._lock:
            return list(self._retrievers.items())

    def names(self, view: ReaderView, principal: Principal) -> tuple[str, str, str | None]:
        """What ``principal`` is shown of ``view``: the snapshot's own names for the operator
        (its view's when a narrowing took documents from it), else the view's (views.py
        whole_view_names when it reads every document)."""
        if principal.is_operator:
            if not view.whole:
                return view.key, view.snapshot.snapshot_id, view.snapshot.info.fingerprint
            return view.key, self.snapshot.snapshot_id, self.snapshot.info.fingerprint
        if not view.whole:
            return view.key, view.snapshot.snapshot_id, view.snapshot.info.fingerprint
        if self._whole_names is None:  # a digest of the snapshot's tables, once
            self._whole_names = whole_view_names(self.snapshot)
        return self._whole_names

    def served(self, principal: Principal) -> Served:
        view = self.views.view(principal)
        names, operator = self.names(view, principal), principal.is_operator
        if view.whole:
            return Served(view, self.retriever, self.loaded_at, names, operator, self.narrowing)
        held = self._held(view)
        if held is None:
            with self._building:
                held = self._held(view)
                if held is None:
                    held = self._make_retriever(view.snapshot)
                    with self._lock:
                        self._retrievers[view.key] = (view, held)
                        while len(self._retrievers) > VIEWS_KEPT:
                            self._retrievers.popitem(last=False)
        return Served(view, held, self.loaded_at, names, operator, self.narrowing)

    def _held(self, view: ReaderView) -> Retriever | None:
        with self._lock:
            held = self._retrievers.get(view.key)
            if held is None or held[0] is not view:  # a view built again after the cache let it go
                return None
            self._retrievers.move_to_end(view.key)
            return held[1]


@dataclass
class PendingAnswer:
    """What :meth:`QueryService.answer` needs after retrieval: the question and its context."""

    question: str
    facts: list[FactHit]
    passages: list[PassageHit]
    started: float  # perf_counter at the start of the query
    principal: Principal = OPERATOR_PRINCIPAL  # whose budget the call is held against
    history: tuple[dict, ...] = ()  # a conversation's earlier turns, put before the question (chat.py)


class QueryService:
    """Retrieval (and answers, when a model endpoint is configured) over the published snapshot.

    ``answer_status`` says why there are no answers when ``answerer`` is None, and ``price`` is
    the answer model's price status then (``LLMSettings.price_status``; with an answerer, its
    own). ``budget`` caps what answers spend in all (None: no cap, for one-off queries), and
    ``principal_budget_usd`` what each principal's spend (by name; None: no cap of its own):
    every answer call is held against its principal's budget and the service's
    (:meth:`budget_of`). A principal's ``status`` shows its own calls, tokens and spend only; the
    operator's shows the totals and every principal's too. ``charge_ledger`` writes every answer
    call to the store's cost ledger, under one run whose id starts with ``ledger_prefix``.
    """

    def __init__(self, store: Store, embedder: Embedder, reranker: Reranker | None = None,
                 reranker_status: RerankerStatus | None = None, answerer: Answerer | None = None,
                 answer_status: str = "", settings: RetrievalSettings | None = None,
                 budget: AnswerBudget | None = None, charge_ledger: bool = True,
                 ledger_prefix: str = "query", price: dict | None = None,
                 principal_budget_usd: float | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.reranker = reranker
        self.reranker_status = reranker_status
        self.answerer = answerer
        self.answer_status = "available" if answerer else (answer_status or "no answer model configured")
        self.price = answerer.client.settings.price_status() if answerer else price
        self.settings = settings or RetrievalSettings()
        self.budget = budget or AnswerBudget(None)  # the service's, shared by its principals
        AnswerBudget(principal_budget_usd)  # refuses a cap it cannot keep
        self.principal_budget_usd = principal_budget_usd
        self._budgets: dict[str, AnswerBudget] = {}  # by principal name
        self._budgets_lock = threading.Lock()
        self.charge_ledger = charge_ledger
        self.ledger_run_id = ledger.new_run_id(ledger_prefix)
        self.ledger_errors = 0
        self._serving: _Serving | None = None
        self._expected: Callable[[], Iterable[Principal]] = tuple
        self.provenance = ProvenanceStores(store)
        self._reload_lock = threading.Lock()  # one load at a time; queries never take it
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.last_reload_error: str | None = None
        self.reloads = 0
        self.narrowings = 0  # servings narrowed by a store commit (the operator's status shows it)
        self.last_narrowing_error: str | None = None
        self._holding = contextlib.ExitStack()  # what the service holds until close (query_thread_limits)

    # -- snapshots -------------------------------------------------------------------------------

    def budget_of(self, principal: Principal) -> SharedBudget:
        """``principal``'s answer budget (its own, by name, within the service's)."""
        with self._budgets_lock:
            own = self._budgets.get(principal.name)
            if own is None:
                own = self._budgets[principal.name] = AnswerBudget(self.principal_budget_usd)
        return SharedBudget(own, self.budget)

    @property
    def snapshot(self) -> Snapshot | None:
        serving = self._serving
        return serving.snapshot if serving else None

    def current(self, principal: Principal = OPERATOR_PRINCIPAL) -> Served:
        """``principal``'s view of the snapshot being served, its retriever and when the snapshot
        was loaded (one reference: a query that takes it runs on one snapshot)."""
        serving = self._serving
        if serving is None:
            raise NoSnapshotLoaded("no snapshot is loaded yet: export one with `lightfoot snapshot`")
        return serving.served(principal)

    def provenance_source(self, principal: Principal, manifest: Manifest) -> Store | ViewStore:
        """What ``principal``'s provenance reads at ``manifest`` (permissions/provenance.py): the
        store for the operator, else the store of the documents it reads then."""
        serving = self._serving
        view = serving.served(principal).view if serving is not None and not principal.is_operator else None
        return self.provenance.get(principal, manifest, view)

    def expect(self, principals: Callable[[], Iterable[Principal]]) -> None:
        """The principals whose views each snapshot builds as it loads (the tokens file's), and
        their views of the snapshot being served, built now."""
        self._expected = principals
        serving = self._serving
        if serving is not None:
            self._warm(serving)

    def _make_retriever(self, snapshot: Snapshot) -> Retriever:
        retriever = Retriever(snapshot, self.embedder, self.reranker, self.reranker_status, self.settings)
        retriever.warm_up()  # the first query should not pay for lazy set-up
        return retriever

    def _warm(self, serving: _Serving) -> None:
        """Build the views (and their retrievers) of the expected principals, at most VIEWS_KEPT
        reader sets: the cache would drop the first of any more."""
        groups: dict[tuple[str, ...], Principal] = {}
        for principal in self._expected():
            groups.setdefault(principal.groups, principal)
        started = time.perf_counter()
        for principal in list(groups.values())[:VIEWS_KEPT]:
            serving.served(principal)
        if groups:
            log.info("built the views of %d reader sets of snapshot %s in %.2fs", len(serving.views.keys()),
                     serving.snapshot.snapshot_id, time.perf_counter() - started)

    def use(self, snapshot: Snapshot) -> None:
        """Serve this snapshot from now on (queries already running finish on the old one), narrowed
        by the store's commits since its export; the expected principals' views are built first."""
        log_version = self.store.log_version()
        snapshot, narrowing = self._narrowing(snapshot, None)
        serving = _Serving(snapshot, self._make_retriever(snapshot), dt.datetime.now(dt.UTC).isoformat(),
                           self._make_retriever, narrowing, log_version=log_version)
        self._warm(serving)
        self._serving = serving
        self.reloads += 1
        # Once it serves: the base from which a later narrowing derives its views (views.py ViewCache).
        serving.views.prepare()
        if serving.snapshot.access is None:
            self._with_store_access(serving)

    def _with_store_access(self, serving: _Serving) -> None:
        """Serve a snapshot exported without access tables (every document public) with those the
        store holds for its documents (snapshot/collect.py ``access_since``), read once it serves,
        and its base derived from them: a later narrowing (a deletion) then derives the views from
        that base, as any other snapshot's, instead of reading the store and deriving every table
        when the deletion comes. Left as it is when the store has changed the snapshot's documents
        since the export (the narrowing reads them then) or cannot be read now."""
        try:
            access, withdrawn = access_since(self.store, self.store.manifest(), serving.snapshot.passages)
        except (OSError, LightfootError) as err:
            log.warning("could not read the access tables of snapshot %s from %s: %s", serving.snapshot.snapshot_id,
                        self.store.uri, err)
            return
        if withdrawn:
            return
        snapshot = dataclasses.replace(serving.snapshot, access=access)  # the same arrays, and the tables to narrow
        prepared = _Serving(snapshot, serving.retriever, serving.loaded_at, self._make_retriever, serving.narrowing,
                            log_version=serving.log_version)
        prepared.views.prepare()
        self._serving = prepared

    def _narrowing(self, snapshot: Snapshot, held: Narrowing | None) -> tuple[Snapshot, Narrowing | None]:
        """What the store's newest commit takes from ``snapshot``'s readers (permissions/views.py
        narrowing_of; ``held`` when the commit is not after the snapshot's or takes nothing new),
        and the snapshot to derive views from: ``snapshot``, or, when it was exported without access
        tables (every document public) and something narrowed, the same with the access tables the
        store holds for its documents (snapshot/collect.py access_since: read once per snapshot), the
        documents deleted or replaced since withdrawn."""
        manifest = self.store.manifest()
        if manifest.seq <= snapshot.info.store_seq:
            return snapshot, None
        current = live_readers(self.store, manifest)
        readers = snapshot.access.readers if snapshot.access is not None else pl.DataFrame(
            {"doc_id": snapshot.passages.get_column("doc_id").unique().sort()}).with_columns(
            pl.lit(PUBLIC).alias("readers"))
        narrowing = narrowing_of(readers, current, manifest.seq)
        if narrowing and snapshot.access is None:
            access, withdrawn = access_since(self.store, manifest, snapshot.passages)
            snapshot = dataclasses.replace(snapshot, access=access)
            narrowing = dataclasses.replace(narrowing, deleted=narrowing.deleted | withdrawn)
        return snapshot, (held if narrowing.same_as(held) else narrowing)

    def narrow(self) -> bool:
        """Serve the snapshot narrowed by the store's newest commit when that takes documents from
        some principal that the serving does not (a deletion, narrowed readers): every view that
        lost a document is derived again, the others are kept. True if the serving changed. The
        store log's version is read first, so a poll without a new commit reads nothing else."""
        with self._reload_lock:
            serving = self._serving
            if serving is None:
                return False
            try:
                log_version = self.store.log_version()
                if log_version == serving.log_version:
                    return False
                snapshot, narrowing = self._narrowing(serving.snapshot, serving.narrowing)
                if narrowing is serving.narrowing or (not narrowing and serving.narrowing is None):
                    serving.log_version = log_version
                    return False
                narrowed = _Serving(snapshot, serving.retriever, serving.loaded_at, self._make_retriever,
                                    narrowing, inherit=serving, log_version=log_version)
            except (OSError, LightfootError) as err:  # the store out of reach: try again at the next poll
                self.last_narrowing_error = f"{type(err).__name__}: {err}"
                log.warning("could not read the store log of %s: %s", self.store.uri, err)
                return False
            self._serving = narrowed
            self.narrowings += 1
            self.last_narrowing_error = None
        log.info("serving snapshot %s narrowed by store commit %s (%s)", narrowed.snapshot.snapshot_id,
                 narrowing.seq if narrowing else None, narrowing.as_dict() if narrowing else "nothing withdrawn")
        self._warm(narrowed)
        return True

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
            except (LightfootError, OSError) as err:  # SnapshotError, RetrievalError, the store's
                self.last_reload_error = f"{type(err).__name__}: {err}"
                log.warning("staying on snapshot %s: %s", self._serving and self._serving.snapshot.snapshot_id, err)
                return False
            self.last_reload_error = None
            log.info("now serving snapshot %s", published.snapshot_id)
            return True

    def watch(self, interval_s: float = DEFAULT_POLL_S) -> None:
        """Poll for new snapshots and for narrowing store commits (:meth:`narrow`) in a background
        thread until :meth:`close`."""
        if self._watcher is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval_s):
                for step in (self.refresh, self.narrow):
                    try:
                        step()
                    except Exception:  # a bug must not stop the watcher: narrowing is what revokes
                        log.exception("the snapshot watcher's %s failed; it tries again at the next poll",
                                      step.__name__)

        self._watcher = threading.Thread(target=loop, name="snapshot-watcher", daemon=True)
        self._watcher.start()

    def close(self) -> None:
        """Stop watching for snapshots and give back what the service held (its thread limits)."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
            self._watcher = None
        self._holding.close()

    def hold(self, context: contextlib.AbstractContextManager) -> None:
        """Enter ``context`` now and leave it at :meth:`close`."""
        self._holding.enter_context(context)

    def __enter__(self) -> QueryService:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- queries ---------------------------------------------------------------------------------

    def query(self, question: str, *, top_k: int = DEFAULT_TOP_K, answer: bool = True, rerank: bool = True,
              principal: Principal = OPERATOR_PRINCIPAL, history: tuple[dict, ...] = ()) -> dict:
        """Retrieval and, when asked and available, the answer: :meth:`retrieve` then :meth:`answer`."""
        payload, pending = self.retrieve(question, top_k=top_k, answer=answer, rerank=rerank, principal=principal,
                                         history=history)
        if pending is not None:
            self.answer(payload, pending)
        return payload

    def retrieve(self, question: str, *, top_k: int = DEFAULT_TOP_K, answer: bool = True,
                 rerank: bool = True, principal: Principal = OPERATOR_PRINCIPAL,
                 history: tuple[dict, ...] = ()) -> tuple[dict, PendingAnswer | None]:
        """The query's result on ``principal``'s view without its answer, and what :meth:`answer`
        needs (None: no answer will be made, and the result says why). The answer's facts and
        passages are the view's, so its prompt holds nothing else but ``history``: the earlier
        turns of the principal's own conversation (the chat endpoint's, bounded there)."""
        started = time.perf_counter()
        served = self.current(principal)  # one snapshot, one view, for the whole query
        retriever = served.retriever
        if not 1 <= top_k <= retriever.settings.candidates:
            raise RetrievalError(f"top_k must be from 1 to {retriever.settings.candidates}, got {top_k}")
        vector = retriever.question_vector(question)
        latency = {"embed": _ms_since(started)}
        retrieval = retriever.retrieve(question, rerank=rerank, vector=vector)
        latency.update({k: v for k, v in retrieval.timings_ms.items() if k not in ("embed", "total")})
        latency["retrieval"] = _ms_since(started)
        payload: dict = {
            "question": question,
            "snapshot": served.describe(),
            "order": retrieval.order,
            "reranker": retrieval.reranker.as_dict() if principal.is_operator else shown_reranker(
                retrieval.reranker.as_dict()),
            "pagerank": retrieval.pagerank,
            "seed_facts": [_fact(f) for f in retrieval.seed_facts],
            "passages": [_passage(p) for p in retrieval.passages[:top_k]],
            "answer": None,
            "latency_ms": latency,
        }
        pending = None
        if not answer:
            payload["answer_status"] = "not requested"
        elif self.answerer is None:
            payload["answer_status"] = self.answer_status
        elif (budget := self.budget_of(principal)).spent():
            payload["answer_status"] = self._budget_spent(budget)
        else:
            facts = retriever.similar_facts(vector, self.answerer.n_facts)
            pending = PendingAnswer(question, facts, retrieval.passages, started, principal, tuple(history))
        latency["total"] = _ms_since(started)
        return payload, pending

    def answer(self, payload: dict, pending: PendingAnswer) -> None:
        """Ask the model for the answer of a retrieved query, within the budget; fills ``payload``."""
        answerer = self.answerer
        clock = time.perf_counter()
        messages = answerer.messages(pending.question, pending.facts, pending.passages, pending.history)
        hold = answerer.worst_case_usd(messages)
        budget = self.budget_of(pending.principal)
        if not budget.reserve(hold):
            payload["answer_status"] = self._budget_spent(budget)
            return
        result: Answer | None = None
        try:
            result = answerer.ask(messages)
        finally:
            if result is None:
                budget.settle(hold, 0.0)
            else:
                budget.settle(hold, result.cost_usd, result.tokens_in, result.tokens_out)
        self._charge(result)
        payload["answer"] = result.as_dict()
        payload["answer_status"] = "failed" if result.error else "answered"
        payload["answer_facts"] = [_fact(f) for f in pending.facts]
        payload["latency_ms"]["answer"] = _ms_since(clock)
        payload["latency_ms"]["total"] = _ms_since(pending.started)

    def deep(self, question: str, *, rerank: bool = True, settings: DeepSettings | None = None,
             principal: Principal = OPERATOR_PRINCIPAL) -> dict:
        """The deep mode (retrieval/deep) on ``principal``'s view: a multi-step answer from a working
        memory, its points with their passages and facts, and its steps; every call within the
        service's budget and in the cost ledger. The memory, the evidence and every prompt come from
        the view's retriever alone. Raises DeepQueryError when the model endpoint cannot serve."""
        started = time.perf_counter()
        served = self.current(principal)
        payload: dict = {"question": question, "mode": "deep", "answer": None, "snapshot": served.describe()}
        budget = self.budget_of(principal)
        if self.answerer is None:
            payload["answer_status"] = self.answer_status
        elif budget.spent():
            payload["answer_status"] = self._budget_spent(budget)
        else:
            engine = DeepQuery(served.retriever, self.answerer.client, settings or DeepSettings.from_env(),
                               budget, rerank=rerank)
            try:
                result = engine.run(question)
            except DeepQueryError as err:
                if err.result is not None:
                    self._record(charges(err.result, self.ledger_run_id, self.answerer.client.settings.prices()))
                raise
            self._record(charges(result, self.ledger_run_id, self.answerer.client.settings.prices()))
            payload["deep"] = result.as_dict(text=True)
            payload["answer"] = result.answer
            payload["answer_status"] = "answered" if result.status == "answered" else f"stopped: {result.reason}"
        payload["latency_ms"] = {"total": _ms_since(started)}
        return payload

    def document_titles(self, principal: Principal, doc_ids: Iterable[str]) -> dict[str, str | None]:
        """The titles of those of ``doc_ids`` that ``principal``'s view of the served snapshot holds
        (a document it may not read is absent, as one the snapshot never held)."""
        wanted = list(dict.fromkeys(doc_ids))
        if not wanted:
            return {}
        passages = self.current(principal).snapshot.passages
        rows = passages.filter(pl.col("doc_id").is_in(wanted)).select("doc_id", "title").unique("doc_id")
        return dict(rows.iter_rows())

    def _budget_spent(self, budget: SharedBudget) -> str:
        if budget.shared_spent:
            return "the answer budget of this service process is spent; retrieval only (a restart starts a new budget)"
        return (f"your answer budget of ${budget.limit_usd:g} for this service process is spent; "
                "retrieval only (a restart starts a new budget)")

    def _charge(self, result: Answer) -> None:
        """The answer call's row in the cost ledger; a failure to write it is logged, not raised."""
        if not self.charge_ledger:
            return
        self._record([answer_charge(self.ledger_run_id, result, self.answerer.client.settings.prices())])

    def _record(self, charges: list[ledger.Charge]) -> None:
        """Charges into the ledger, tried again until written; one that still fails after the
        journal's long bound is counted in ``ledger_errors`` and logged, not raised."""
        if not self.charge_ledger:
            return
        try:
            ledger.record(self.store, charges)
        except Exception:  # the answer is already paid for; the operator must hear of the gap
            self.ledger_errors += 1
            log.exception("could not write an answer call to the cost ledger of %s", self.store.uri)

    def health(self) -> dict:
        """Liveness for anyone: whether a snapshot is being served, and nothing else."""
        return {"status": "ok" if self._serving else "no_snapshot"}

    def status(self, principal: Principal = OPERATOR_PRINCIPAL) -> dict:
        """Whom the service answers as (``principal``: its name and groups), the served snapshot
        and the counts of that principal's view of it, reloads, the reranker, the answer model's
        price state and the budget's spend (never the model endpoint)."""
        served = self.current(principal) if self._serving is not None else None
        budget = self.budget_of(principal)
        answers = {"state": self._answers_state(budget), "price": self.price, **budget.as_dict(),
                   "budget_usd": budget.limit_usd,  # what holds this principal: its cap or the service's
                   "own_budget_usd": budget.own.limit_usd, "ledger_run_id": self.ledger_run_id}
        narrowed = None
        if principal.is_operator:  # the totals, and each principal's spend
            with self._budgets_lock:
                principals = {name: own.as_dict() for name, own in sorted(self._budgets.items())}
            answers.update(ledger_errors=self.ledger_errors, total=self.budget.as_dict(), principals=principals)
            narrowing = served.narrowing if served else None
            narrowed = {"now": narrowing.as_dict() if narrowing else None, "narrowings": self.narrowings,
                        "last_error": self.last_narrowing_error}
            serving = self._serving
            # the reader sets whose views are held, and the scratch disk their files take (views.py)
            views = {"reader_sets": len(serving.views.keys()),
                     "file_mb": round(serving.views.file_bytes() / 2**20, 1)} if serving is not None else None
        reload_error = self.last_reload_error
        if reload_error is not None and not principal.is_operator:  # it may name files and the store's ids
            reload_error = "the newest snapshot could not be loaded; the service stays on the one it has"
        reranker = served.retriever.reranker_status.as_dict() if served else None
        if reranker is not None and not principal.is_operator:
            reranker = shown_reranker(reranker)
        return {
            "status": "ok" if served else "no_snapshot",
            "principal": principal.as_dict(),
            "snapshot_id": served.snapshot_id if served else None,
            "view": served.view_key if served else None,
            "counts": served.counts if served else None,
            "loaded_at": served.loaded_at if served else None,
            "reloads": self.reloads,
            "last_reload_error": reload_error,
            "reranker": reranker,
            "answers": answers,
            **({"narrowed": narrowed, "views": views} if principal.is_operator else {}),
        }

    def _answers_state(self, budget: SharedBudget) -> str:
        if self.answerer is None:
            return "refused" if self.price and self.price["state"] == REFUSED else "off"
        return "budget spent" if budget.exhausted else "on"

    def snapshot_info(self, principal: Principal = OPERATOR_PRINCIPAL) -> dict:
        """The manifest of ``principal``'s view of the served snapshot (its counts, named as
        :meth:`Served.describe` names it) and whether the published snapshot is the one served
        (the operator: the published snapshot's id)."""
        serving = self._serving
        served = serving.served(principal) if serving is not None else None
        try:
            published = latest_snapshot(self.store)
        except SnapshotError as err:
            published, error = None, str(err)
        else:
            error = None
        info = served.manifest() if served is not None else None
        published_id = published.snapshot_id if published else None
        current = serving is not None and published is not None and published.snapshot_id == serving.snapshot.snapshot_id
        if not principal.is_operator and published_id is not None:
            # the published snapshot's id carries the store's fingerprint: a principal is told only
            # whether it is the one it is served (then by its view's id)
            published_id = served.snapshot_id if current and served is not None else None
        return {
            "serving": info,
            "loaded_at": served.loaded_at if served else None,
            "published_id": published_id,
            "serving_published": current,
            "published_error": error,
        }


def shown_reranker(status: dict) -> dict:
    """The reranker's status as a principal other than the operator sees it: its state, and its
    model unless that is a path on the server; never the reason, which may name files."""
    model = status.get("model")
    return {"state": status.get("state"), "model": None if model is None or Path(model).is_absolute() else model,
            "reason": ""}


def resolve_embedder(store: Store, spec: str | None = None) -> Embedder:
    """The embedder to query with: the one named, else the published snapshot's, else the index's."""
    if spec:
        return load_embedder(spec)
    published = latest_snapshot(store)
    config = store.manifest().config
    if published is None and not config:
        raise SnapshotError(f"no index at {store.uri}: run `lightfoot ingest` first")
    models = published.models if published else {"embedder": config.get("embedder"), "dim": config.get("dim")}
    embedder = embedder_for_models(models)
    if embedder is None:
        raise SnapshotError(f"the embedder {models.get('embedder')!r} of {store.uri} cannot be loaded here; "
                            "name one with --embedder (a model name or path, or hashing[:DIM])")
    return embedder


def open_service(store: Store, *, embedder_spec: str | None = None, reranker_spec: str | None = None,
                 answers: bool = True, answer_budget_usd: float | None = None,
                 answers_off_reason: str = "answers were turned off", ledger_prefix: str = "query",
                 allow_unpriced: bool = False, principal_budget_usd: float | None = None,
                 snapshot_checks: Sequence[StagedCheck] = ()) -> QueryService:
    """A service on the store's published snapshot (exporting one first if there is none, or none
    of this embedder's, published only if it passes ``snapshot_checks``: snapshot/export.py,
    ``publish_checked``).

    ``answer_budget_usd`` caps what the service's answer calls spend (None: no cap), and
    ``principal_budget_usd`` what each principal's do within it (None: no cap of its own); each call is
    in the cost ledger under a run named from ``ledger_prefix``, which is created here when the
    service answers. ``allow_unpriced`` answers with a model that has no known price (its calls
    count as $0, so no budget holds them). The service keeps BLAS and torch on one thread each
    until it is closed (``query_thread_limits``): close it, or use it as a context manager.
    """
    if not store.exists():
        raise SnapshotError(f"no index at {store.uri}: run `lightfoot ingest` first")
    embedder = resolve_embedder(store, embedder_spec)
    published = latest_snapshot(store)
    if published is None or published.models.get("embedder") != embedder.model_id:
        report = publish_checked(store, embedder, snapshot_checks)
        if not report.published:
            raise SnapshotError(f"staged snapshot {report.info.snapshot_id} not published: {report.reason}",
                                hint="`lightfoot status` says why; fix it and run `lightfoot snapshot`")
    reranker, status = load_reranker(reranker_spec)
    answerer, answer_status = (build_answerer(allow_unpriced=allow_unpriced) if answers
                               else (None, answers_off_reason))
    price = None
    if answers and answerer is None:
        try:
            price = answer_settings(allow_unpriced=allow_unpriced).price_status()
        except ValueError:  # settings that cannot be used: answer_status says why
            price = None
        if price is not None and price["state"] == REFUSED:  # what clients read names no model
            answer_status = f"answers refused: the answer model has no known price; {ALLOW_UNPRICED_HINT}"
    if answerer is not None:
        ledger.ensure(store)  # before the first answers race to write to it
    store.keep_buckets(PROVENANCE_BUCKET_BYTES)  # explain routes read small pieces of the same versions
    service = QueryService(store, embedder, reranker, status, answerer, answer_status,
                           budget=AnswerBudget(answer_budget_usd), ledger_prefix=ledger_prefix, price=price,
                           principal_budget_usd=principal_budget_usd)
    service.hold(query_thread_limits())  # one thread each for BLAS and torch until the service closes
    if not service.refresh():
        service.close()
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
        "location": hit.location,
    }
