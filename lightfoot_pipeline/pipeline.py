"""The engine's operations on a store: ingest, delete, rebuild, fingerprint.

Each is a short composition of the stages (documents.py, then reconcile.py) inside one store
transaction, so the store moves from one consistent state to the next. The CLI, the tests, the
benchmarks and the Dagster assets all call these (Dagster calls the stages separately, one asset
per stage).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import polars as pl

from lightfoot_pipeline.erase import erase_history
from lightfoot_pipeline.ingest.dataset import Document, unmatched_records
from lightfoot_pipeline.index.documents import (
    TombstoneReport, derive_forms, document_changes, document_passages, record_extractions, tombstone_documents,
    upsert_documents,
)
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.ingest.extraction.outcome import OK, Extractor, ProgressCallback
from lightfoot_pipeline.store.fingerprint import fingerprint as fingerprint  # re-exported: an operation on a store
from lightfoot_pipeline.index.reconcile import GraphChange, Linker, reconcile_graph
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.filesystem import delete_folder_quietly, open_filesystem
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.transaction import Transaction
from lightfoot_pipeline.store.tables import (
    RETIRED_TABLES,
    DOCUMENTS, EXTRACTIONS, INDEX_TABLES, PASSAGE_SOURCES, PASSAGES, TOMBSTONES, all_specs, with_buckets,
)
from lightfoot_pipeline.store.vectors import EmbedProgress, VectorCache
from lightfoot_pipeline.errors import LightfootError


class IndexConfigError(LightfootError, RuntimeError):
    """The store was built with another embedder or other settings than the ones given."""


@dataclass
class IngestReport:
    """What an ingest did. Every passage is counted once: ``extracted`` (by a call or a replayed
    record in this run), ``already_extracted`` (stored, or answered by the extraction cache:
    paid for by an earlier run, ``from_cache`` of them) or ``failed``. ``model_calls`` counts the
    answers asked for and ``retries`` the requests sent again for them, which are not calls."""

    documents: int = 0  # given: ingested (new) + replaced + unchanged
    ingested: int = 0  # new doc ids
    replaced: int = 0  # doc ids the store held with other text or metadata: the new version replaces it
    unchanged: int = 0  # the store held them as given
    replaced_doc_ids: list[str] = field(default_factory=list)
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


@dataclass
class DeleteReport:
    deleted: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)  # not live: nothing to delete
    already_deleted: list[str] = field(default_factory=list)  # those of not_found that were deleted before
    passages_removed: int = 0
    graph: GraphChange = field(default_factory=GraphChange)
    model_calls: int = 0  # always 0: deletion never calls a model; reported so that it shows
    seq: int = 0
    seconds: float = 0.0
    erase: dict | None = None
    tombstone: TombstoneReport | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k not in {"graph", "tombstone"}}
        out["graph"] = self.graph.as_dict()
        return out


def index_config(embedder_id: str, dim: int, settings: IndexSettings) -> dict:
    return {"embedder": embedder_id, "dim": dim, "settings": settings.shape_of_index()}


def check_config(tx: Transaction, settings: IndexSettings, embedder: Embedder | None = None) -> None:
    """Adopt the index's config (its settings and embedder) on a new store; refuse one that differs
    on an existing store. Without an embedder (a graph update that embeds no name), only the
    settings are checked and nothing is adopted."""
    current = tx.config
    if not current:
        if embedder is not None:
            tx.config = index_config(embedder.model_id, embedder.dim, settings)
        return
    if current.get("settings") != settings.shape_of_index():
        raise IndexConfigError(
            f"the store was built with settings {current.get('settings')}, not {settings.shape_of_index()}; "
            "rebuild into a new store to change them"
        )
    if embedder is not None and current.get("embedder") != embedder.model_id:
        raise IndexConfigError(
            f"the store's name vectors come from {current.get('embedder')!r}, not {embedder.model_id!r}; "
            "use the same embedder, or rebuild into a new store"
        )


def name_vector_cache(store: Store, embedder: Embedder, progress: EmbedProgress | None = None) -> VectorCache:
    """The cache of name vectors; ``progress`` hears how embedding the names it lacks proceeds."""
    return VectorCache(store, "name", embedder, progress)


def ingest(
    store: Store,
    documents: Sequence[Document],
    extractor: Extractor,
    embedder: Embedder,
    settings: IndexSettings | None = None,
    progress: ProgressCallback | None = None,
    operation: str = "ingest",
    recorded: Mapping[str, dict | list] | None = None,
    stage: Callable[[Transaction], None] | None = None,
    embed_progress: EmbedProgress | None = None,
) -> IngestReport:
    """Add (or replace) documents: extract what is new, then update the graph, in one commit.

    A document whose id the store holds replaces it; the report counts it as replaced, not
    ingested. The replaced text leaves the current tables at once and the store's history at the
    next vacuum (:func:`lightfoot_pipeline.erase.vacuum`). ``recorded``: the recorded extractions the
    extractor replays, if any; those that match no passage are counted in ``ignored_records``.
    ``stage``: further changes to make in the same commit, before the graph update (the records
    and deletions of a sync). ``embed_progress``: hears how embedding the new names proceeds.
    """
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
        report.graph = reconcile_graph(tx, settings, name_vector_cache(store, embedder, embed_progress),
                                       timings=report.stage_seconds)
        clock.lap("graph")
        manifest = tx.commit(operation, {"documents": len(documents), "replaced": len(changes.replaced),
                                         "model_calls": report.model_calls, "retries": report.retries,
                                         "extracted": report.extracted, "from_cache": report.from_cache,
                                         "failed": report.failed})
        clock.lap("commit")
    report.ingested, report.replaced, report.unchanged = len(changes.new), len(changes.replaced), len(changes.unchanged)
    report.replaced_doc_ids = changes.replaced
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


def delete(
    store: Store,
    doc_ids: Sequence[str],
    settings: IndexSettings | None = None,
    *,
    erase: bool = False,
    reason: str = "",
    stage: Callable[[Transaction], None] | None = None,
) -> DeleteReport:
    """Delete documents: drop their rows, recompute what their names touched. No model call.

    Ids the store does not hold are reported in ``not_found`` (a deletion of what is not there is
    done already). With ``erase``, the history of the deleted documents is erased, and so is that
    of ids deleted earlier without an erase (``already_deleted``). ``stage``: further changes to
    make in the same commit, before the graph update.
    """
    settings = settings or IndexSettings()
    started = time.perf_counter()
    with store.transaction() as tx:
        tombstone = tombstone_documents(tx, doc_ids, reason=reason, erase=erase)
        if stage is not None:
            stage(tx)
        graph = reconcile_graph(tx, settings, None)
        earlier = tx.table(TOMBSTONES.name).filter(pl.col("doc_id").is_in(tombstone.not_found))
        manifest = tx.commit("delete", {"deleted": len(tombstone.deleted), "erase": erase, "model_calls": 0})
    report = DeleteReport(
        deleted=tombstone.deleted, not_found=tombstone.not_found, passages_removed=len(tombstone.chunk_ids),
        already_deleted=sorted(set(earlier.get_column("doc_id").to_list())),
        graph=graph, seq=manifest.seq, tombstone=tombstone,
    )
    report.seconds = time.perf_counter() - started
    if erase:
        report.erase = erase_history(store, [*tombstone.deleted, *report.already_deleted]).as_dict()
    return report


def rebuild(source: Store, target: Store, embedder: Embedder, settings: IndexSettings | None = None,
            manifest: Manifest | None = None) -> GraphChange:
    """A fresh index in ``target`` from the live documents, passages and extractions of ``source``
    (as of ``manifest``, else its latest commit).

    No model call: the stored extractions are reused. Everything else is derived again from them,
    so the result is what a fresh build of the surviving documents gives.
    """
    settings = settings or IndexSettings()
    manifest = manifest or source.manifest()
    with target.transaction() as tx:
        if tx.manifest.seq:
            raise IndexConfigError(f"rebuild needs an empty target store; {target.uri} has commits")
        check_config(tx, settings, embedder)
        for spec in (DOCUMENTS, PASSAGES, PASSAGE_SOURCES, EXTRACTIONS):
            rows = source.read(spec.name, manifest)
            tx.put(spec.name, with_buckets(rows, spec, target.n_buckets).cast(tx.table(spec.name).schema))
        derive_forms(tx, tx.table(DOCUMENTS.name).get_column("doc_id").to_list())
        change = reconcile_graph(tx, settings, name_vector_cache(target, embedder))
        tx.commit("rebuild", {"source": source.uri, "source_seq": manifest.seq})
    return change


# What a migration keeps of a store: its documents and their extractions, and the deletion log.
KEPT_BY_MIGRATION = (DOCUMENTS, PASSAGES, EXTRACTIONS, TOMBSTONES)


def migrate(store: Store, embedder: Embedder, settings: IndexSettings | None = None,
            n_buckets: int | None = None, linker: Linker | None = None) -> GraphChange:
    """Bring a store to this version's layout and index, in place and in one commit; no model call.

    The documents, passages, extractions and deletion log are kept, re-bucketed (into
    ``n_buckets``, else the store's own count); everything else is derived again from them with
    ``settings``, as :func:`rebuild` does, so the store then equals a fresh build of its live
    documents. Name vectors come from the store's cache, and the embedder computes only the ones
    it lacks. Works on any earlier layout (``lightfoot migrate``). ``linker``: the names' links
    computed elsewhere (link_pieces.PrecomputedLinks, see relink.py) instead of in this process.
    """
    settings = settings or IndexSettings()
    with store.transaction(relayout=n_buckets or 0) as tx:  # 0: the store's own bucket count
        if not tx.manifest.seq:
            raise IndexConfigError(f"no store at {store.uri} to migrate")
        tx.config = {}
        check_config(tx, settings, embedder)
        kept = {spec.name for spec in KEPT_BY_MIGRATION}
        for spec in all_specs():
            if spec.name not in tx.manifest.versions:
                continue
            rows = tx.table(spec.name) if spec.name in kept else spec.empty()
            tx.put(spec.name, with_buckets(rows, spec, tx.n_buckets).cast(spec.empty().schema))
        derive_forms(tx, tx.table(DOCUMENTS.name).get_column("doc_id").to_list())
        change = reconcile_graph(tx, settings, name_vector_cache(store, embedder), linker=linker)
        tx.commit("migrate", {"from_layout": tx.manifest.details.get("layout"), "n_buckets": tx.n_buckets})
    _drop_retired_tables(store)
    return change


def _drop_retired_tables(store: Store) -> list[str]:
    """Delete the tables that earlier layouts kept and this one does not (after a migration)."""
    dropped = []
    for name in RETIRED_TABLES:
        if delete_folder_quietly(*open_filesystem(store.table_uri(name), store._options())):
            dropped.append(name)
    return dropped


def counts(store: Store, manifest: Manifest | None = None) -> dict[str, int]:
    manifest = manifest or store.manifest()
    return {spec.name: store.read(spec.name, manifest, columns=[spec.key[0]]).height for spec in INDEX_TABLES}

