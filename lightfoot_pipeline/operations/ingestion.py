"""Ingest: add or replace documents, extracting only what is new, in one store commit.

The composition of the per-document stage (``index/documents.py``) and the graph stage
(``index/reconcile.py``) inside one transaction, so the store moves from one consistent state to
the next. The CLI, the tests, the benchmarks and the sync call it; Dagster runs the same stages as
separate assets. With ``link=False`` only the per-document stage is committed: the names and
facts it touched stay in the graph queue for the graph stage to apply (Dagster's graph asset).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.index.documents import (
    derive_forms,
    document_changes,
    document_passages,
    record_extractions,
    upsert_documents,
)
from lightfoot_pipeline.index.reconcile import GraphChange, reconcile_graph
from lightfoot_pipeline.ingest.dataset import Document, unmatched_records
from lightfoot_pipeline.ingest.extraction.outcome import OK, Extractor, ProgressCallback
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.operations.config import check_config
from lightfoot_pipeline.settings import IndexSettings, SettingsError
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import EXTRACTIONS
from lightfoot_pipeline.store.transaction import Transaction
from lightfoot_pipeline.store.vectors import EmbedProgress, name_vector_cache


@dataclass
class IngestReport:
    """What an ingest did. Every passage is counted once: ``extracted`` (by a call or a replayed
    record in this run), ``already_extracted`` (stored, or answered by the extraction cache:
    paid for by an earlier run, ``from_cache`` of them) or ``failed``. ``model_calls`` counts the
    answers asked for and ``retries`` the requests sent again for them, which are not calls."""

    documents: int = 0  # given: ingested (new) + replaced + readers_changed + unchanged
    ingested: int = 0  # new doc ids
    replaced: int = 0  # doc ids the store held with other text or metadata: the new version replaces it
    # doc ids the store held as given but for their readers: only their readers row is rewritten
    readers_changed: int = 0
    unchanged: int = 0  # the store held them as given
    replaced_doc_ids: list[str] = field(default_factory=list)
    readers_changed_doc_ids: list[str] = field(default_factory=list)
    passages: int = 0
    extracted: int = 0
    already_extracted: int = 0
    from_cache: int = 0
    failed: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)
    model_calls: int = 0
    retries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    validation: Counter = field(default_factory=Counter)
    # Recorded extractions that match no passage of the documents, by reason (never applied).
    ignored_records: Counter = field(default_factory=Counter)
    graph: GraphChange = field(default_factory=GraphChange)
    seq: int = 0
    seconds: float = 0.0
    # Wall-clock seconds of each stage: extract (model or replay), documents (passages, forms, fact
    # assertions), graph (names, links, entities, facts; links_s of it is linking), commit.
    stage_seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        nested = {"graph", "validation", "failures", "ignored_records"}
        out = {k: v for k, v in self.__dict__.items() if k not in nested}
        out["graph"] = self.graph.as_dict()
        out["validation"] = dict(sorted(self.validation.items()))
        out["ignored_records"] = dict(sorted(self.ignored_records.items()))
        out["failures"] = [{"chunk_id": c, "reason": r} for c, r in self.failures]
        return out


def ingest(
    store: Store,
    documents: Sequence[Document],
    extractor: Extractor,
    embedder: Embedder | None,
    settings: IndexSettings | None = None,
    progress: ProgressCallback | None = None,
    operation: str = "ingest",
    recorded: Mapping[str, dict | list] | None = None,
    stage: Callable[[Transaction], None] | None = None,
    embed_progress: EmbedProgress | None = None,
    *,
    link: bool = True,
) -> IngestReport:
    """Add (or replace) documents: extract what is new, then update the graph, in one commit.

    A document whose id the store holds replaces it; the report counts it as replaced, not
    ingested. The replaced text leaves the current tables at once and the store's history at the
    next vacuum (:func:`lightfoot_pipeline.operations.erase.vacuum`). ``recorded``: the recorded extractions the
    extractor replays, if any; those that match no passage are counted in ``ignored_records``.
    ``stage``: further changes to make in the same commit, before the graph update (the records
    and deletions of a sync). ``embed_progress``: hears how embedding the new names proceeds.
    ``link=False``: commit the documents, extractions and forms but leave the graph to the graph
    stage (the queue keeps what it must recompute); no embedder is needed then (``None``).

    A document stored as given but for its readers is a change of metadata: its readers row is
    rewritten, and its passages, all extracted already, ask no model and change nothing in the
    graph (``readers_changed``). A document that names no readers keeps its stored ones; a new
    one gets the default (:func:`~lightfoot_pipeline.index.documents.document_changes`).
    """
    if link and embedder is None:
        raise SettingsError("ingest: linking the graph needs an embedder (or link=False, to leave it to the graph stage)")
    settings = settings or IndexSettings()
    started = time.perf_counter()
    report = IngestReport(documents=len(documents))
    passages = document_passages(documents, settings)
    report.passages = len(passages)
    report.ignored_records = unmatched_records(recorded or {}, passages)
    stored = store.rows(EXTRACTIONS.name, "doc_id", [d.doc_id for d in documents])
    extracted = set(stored.filter(pl.col("status") == OK).get_column("chunk_id").to_list())
    needed = [p for p in passages if p.chunk_id not in extracted]
    report.already_extracted = len(passages) - len(needed)
    outcomes = extractor.extract(needed, progress) if needed else []
    clock = _StageClock(report.stage_seconds, started)
    clock.lap("extract")
    for o in outcomes:
        report.model_calls += o.model_calls
        report.retries += o.retries
        report.tokens_in += o.tokens_in
        report.tokens_out += o.tokens_out
        report.cost_usd += o.cost_usd
        if o.status == OK:
            if o.cached:
                report.already_extracted += 1
                report.from_cache += 1
            else:
                report.extracted += 1
            if o.record is not None:
                report.validation.update(o.record.counts())
        else:
            report.failed += 1
            report.failures.append((o.chunk_id, o.reason))
    with store.transaction() as tx:
        check_config(tx, settings, embedder)
        changes = document_changes(tx, documents)
        upsert_documents(tx, documents, settings)
        record_extractions(tx, outcomes)
        derive_forms(tx, [d.doc_id for d in documents])
        if stage is not None:
            stage(tx)
        clock.lap("documents")
        if link:
            assert embedder is not None
            report.graph = reconcile_graph(tx, settings, name_vector_cache(store, embedder, embed_progress),
                                           timings=report.stage_seconds)
            clock.lap("graph")
        manifest = tx.commit(operation, {"documents": len(documents), "replaced": len(changes.replaced),
                                         "readers_changed": len(changes.readers_changed),
                                         "model_calls": report.model_calls, "retries": report.retries,
                                         "extracted": report.extracted, "from_cache": report.from_cache,
                                         "failed": report.failed})
        clock.lap("commit")
    report.ingested, report.replaced, report.unchanged = len(changes.new), len(changes.replaced), len(changes.unchanged)
    report.readers_changed = len(changes.readers_changed)
    report.replaced_doc_ids, report.readers_changed_doc_ids = changes.replaced, changes.readers_changed
    report.seq = manifest.seq
    report.seconds = time.perf_counter() - started
    return report


class _StageClock:
    """Records the seconds since the previous lap under each stage's name."""

    def __init__(self, into: dict[str, float], started: float) -> None:
        self.into, self.last = into, started

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.into[stage] = round(now - self.last, 3)
        self.last = now
