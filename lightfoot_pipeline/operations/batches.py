"""The stages of an ingestion batch, one store commit each, as an orchestrated run takes them.

A batch (a drop, a sync run, an hourly pick-up) is stored in steps: its documents and passages
(:func:`store_batch_documents`), their extractions (:func:`record_batch_extractions`, after the
model's answers are in the extraction cache), their forms and fact assertions
(:func:`derive_batch_forms`); the graph follows (graph.py). Each step is the same index function
that :func:`~lightfoot_pipeline.operations.ingestion.ingest` composes in one transaction
(``upsert_documents``, ``record_extractions``, ``derive_forms``), here committed on its own and
only when it changed something, so that a step run again on unchanged input commits nothing.

Each returns a small report (counts, the commit it left the store at, whether it changed it, the
versions and sizes of the tables it writes: :class:`StoreState`) that a caller turns into its own
output; the Dagster assets turn it into metadata. The batch's documents are read from the store's
batch log (``batch_documents``), never kept elsewhere.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.index.documents import derive_forms as derive_document_forms
from lightfoot_pipeline.index.documents import document_changes, record_extractions, upsert_documents
from lightfoot_pipeline.ingest.extraction.answers import AnswerReport, answer_passages
from lightfoot_pipeline.ingest.extraction.cache import EXTRACTION_CACHE
from lightfoot_pipeline.ingest.extraction.claims import EXTRACTION_CLAIMS, ExtractionClaims
from lightfoot_pipeline.ingest.extraction.outcome import OK, ExtractionOutcome, Extractor, ProgressCallback
from lightfoot_pipeline.ingest.landing import Landing
from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.ingest.receipts import INGESTION, Receipt, ReceiptRuns, Receipts
from lightfoot_pipeline.ingest.sources import SOURCE_FILES
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.batches import (
    ADDED,
    DELETED,
    READERS,
    Batch,
    batch_log,
    documents_of_batch,
    holding_batches,
    log_documents,
    writing_batch,
)
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.fingerprint import fingerprint as store_fingerprint
from lightfoot_pipeline.store.ledger import new_run_id
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    DOCUMENT_KEYS,
    DOCUMENTS,
    EXTRACTIONS,
    FACT_SOURCES,
    FORMS,
    PASSAGE_SOURCES,
    PASSAGES,
    TOMBSTONES,
    TableSpec,
    spec_for,
)
from lightfoot_pipeline.store.transaction import Transaction

# The tables each stage writes, its own first (the Dagster layer declares them as each asset's).
STAGE_TABLES: dict[str, tuple[TableSpec, ...]] = {
    "passages": (PASSAGES, DOCUMENTS),
    "extraction_cache": (EXTRACTION_CACHE, EXTRACTION_CLAIMS),
    "extractions": (EXTRACTIONS,),
    "forms": (FORMS, FACT_SOURCES),
    "tombstones": (TOMBSTONES,),
    "source_files": (SOURCE_FILES, PASSAGE_SOURCES, DOCUMENTS, PASSAGES),
}


class BatchError(LightfootError, ValueError):
    """A batch cannot be stored as asked (a document with neither a landed copy nor a stored one)."""


@dataclass(frozen=True)
class StoreState:
    """Where a step left the store: its commit, whether the step changed it, and the versions and
    row counts of the step's tables (its own first), with the store's fingerprint where asked."""

    seq: int
    changed: bool
    tables: tuple[str, ...]
    versions: dict[str, int | None]
    rows: dict[str, int]
    uris: dict[str, str]
    fingerprint: str | None = None

    def versions_digest(self) -> str:
        """A digest of the tables' versions: equal while none of them changed (a data version)."""
        return hashlib.sha256(json.dumps(self.versions, sort_keys=True).encode()).hexdigest()[:16]


def store_state(store: Store, manifest: Manifest, tables: Sequence[str], *, changed: bool,
                fingerprint: bool = False) -> StoreState:
    """The state a step left the store in (see :class:`StoreState`)."""
    return StoreState(
        seq=manifest.seq, changed=changed, tables=tuple(tables),
        versions={name: manifest.versions.get(name) for name in tables},
        rows={name: store.read(name, manifest, columns=[spec_for(name).key[0]]).height for name in tables},
        uris={name: store.table_uri(name) for name in tables},
        fingerprint=store_fingerprint(store, manifest).digest if fingerprint and manifest.seq else None,
    )


def commit_if_changed(tx: Transaction, operation: str, details: dict) -> tuple[Manifest, bool]:
    """Commit when something is staged; otherwise leave the store as it is."""
    if not tx.pending():
        return tx.manifest, False
    return tx.commit(operation, details), True


# -- a batch's documents ---------------------------------------------------------------------


def batch_doc_ids(store: Store, batch_id: str, manifest: Manifest | None = None) -> list[str]:
    """The live documents a batch added, replaced or kept, sorted."""
    rows = documents_of_batch(store, batch_id, manifest).filter(pl.col("action") != DELETED)
    ids = set(rows.get_column("doc_id").to_list())
    return sorted(live_doc_ids(store, manifest, among=ids)) if ids else []


def batch_counts(store: Store, batch_id: str, manifest: Manifest | None = None) -> dict[str, int]:
    """A batch's documents by what it did to them (added, replaced, unchanged, readers changed,
    deleted by the batch itself). How many are live now is a deletion's to say (:func:`batch_deletions`)."""
    rows = documents_of_batch(store, batch_id, manifest)
    latest = rows.sort("seq").unique("doc_id", keep="last")
    by_action = dict(latest.group_by("action").len().iter_rows())
    return {
        "documents": rows.filter(pl.col("action") != DELETED).get_column("doc_id").n_unique(),
        "added": int(by_action.get("added", 0)),
        "replaced": int(by_action.get("replaced", 0)),
        "unchanged": int(by_action.get("unchanged", 0)),
        "readers_changed": int(by_action.get(READERS, 0)),
        "deleted_by_batch": int(by_action.get(DELETED, 0)),
    }


@dataclass(frozen=True)
class BatchDeletion:
    """What deleting documents did to one batch that held some of them."""

    batch_id: str
    held: int  # documents the batch added, replaced or kept
    live: int  # of those, live now
    deleted_now: int  # of the deleted documents, those whose current text this batch produced

    @property
    def deleted(self) -> int:
        return self.held - self.live


def batch_deletions(store: Store, deleted: Sequence[str]) -> list[BatchDeletion]:
    """Each batch that held one of the ``deleted`` documents, with its documents' counts now."""
    holders = holding_batches(store, deleted)
    if not holders:
        return []
    log = batch_log(store)
    live_now = live_doc_ids(store)
    out = []
    for batch_id in sorted(set(holders.values())):
        held = set(log.filter((pl.col("batch") == batch_id) & (pl.col("action") != DELETED))
                   .get_column("doc_id").to_list())
        out.append(BatchDeletion(batch_id, len(held), len(held & live_now),
                                 sum(1 for b in holders.values() if b == batch_id)))
    return out


def unbatched(store: Store) -> list[str]:
    """The live documents no batch holds, sorted (those of a store older than batches)."""
    return sorted(live_doc_ids(store) - set(batch_log(store).get_column("doc_id").to_list()))


def adopt_unbatched(store: Store, kind: str, by: str) -> tuple[str | None, int]:
    """Log the live documents no batch holds as added by one batch of their own, ``<kind>-<digest
    of their ids>``, in one commit made ``by`` the caller; returns the batch and their count."""
    orphans = unbatched(store)
    if not orphans:
        return None, 0
    batch_id = f"{kind}-{hashlib.sha256(chr(10).join(orphans).encode()).hexdigest()[:32]}"
    with writing_batch(Batch(batch_id, new_run_id("migrate"), by)), store.transaction() as tx:
        log_documents(tx, {ADDED: orphans})
        tx.commit("migrate-batches", {"documents": len(orphans)})
    return batch_id, len(orphans)


# -- documents and passages ------------------------------------------------------------------


@dataclass
class BatchDocuments:
    """What storing a batch's documents did."""

    staged: int = 0  # documents written (new, replaced or with new readers)
    awaiting_deletion: int = 0  # documents of the batch a pending deletion request names: left to it
    passages: int = 0  # the batch's live documents' passages
    counts: dict[str, int] = field(default_factory=dict)  # batch_counts
    state: StoreState | None = None


def store_batch_documents(store: Store, batch_id: str, receipt: Receipt | None, settings: IndexSettings, *,
                          fingerprint: bool = False) -> BatchDocuments:
    """Store a drop's documents from their landed copies (new ones added, changed ones replaced,
    the same ones kept) in one commit, and count the batch's documents and passages.

    A document whose deletion is pending is left to the deletion run; one with neither a landed
    copy nor a stored document fails the batch (:class:`BatchError`), saying which. A batch with no
    receipt (a sync, whose documents its sync stored) only counts. A step run again stages none of
    the documents the batch already stored unchanged: logging them again as ``unchanged`` would
    commit for nothing and make its added documents count as kept.
    """
    report = BatchDocuments()
    manifest, changed = store.manifest(), False
    if receipt is not None:
        landing = Landing(store)
        wanted = list(receipt.doc_ids)
        landed = landing.documents(wanted)
        awaiting = {r.doc_id for r in landing.deletion_requests()} & set(wanted)
        documents = [landed[d].document for d in wanted if d in landed and d not in awaiting]
        missing = [d for d in wanted if d not in landed and d not in awaiting]
        unknown = sorted(set(missing) - live_doc_ids(store, among=missing) - _deleted(store, missing))
        if unknown:
            raise BatchError(f"{len(unknown)} documents of batch {batch_id} have no landed copy and are not stored "
                             f"(e.g. {', '.join(unknown[:5])})", hint="drop them into the inbox again")
        with store.transaction() as tx:
            held = set(batch_doc_ids(store, batch_id, tx.manifest))
            same = set(document_changes(tx, [d for d in documents if d.doc_id in held]).unchanged)
            documents = [d for d in documents if d.doc_id not in same]
            upsert_documents(tx, documents, settings)
            manifest, changed = commit_if_changed(tx, "passages", {"documents": len(documents)})
        report.staged, report.awaiting_deletion = len(documents), len(awaiting)
    ids = batch_doc_ids(store, batch_id, manifest)
    report.passages = store.rows(PASSAGES.name, "doc_id", ids, manifest).height if ids else 0
    report.counts = batch_counts(store, batch_id, manifest)
    report.state = store_state(store, manifest, [t.name for t in STAGE_TABLES["passages"]], changed=changed,
                               fingerprint=fingerprint)
    return report


def _deleted(store: Store, doc_ids: list[str]) -> set[str]:
    frame = store.rows(TOMBSTONES.name, "doc_id", doc_ids)
    return set(frame.filter(pl.col("doc_id").is_in(doc_ids)).get_column("doc_id").to_list())


# -- extraction ------------------------------------------------------------------------------


@dataclass
class DropTriage:
    """The pending drops sorted by what each needs: settled now, waiting for its run (in flight,
    or backing off after repeated failures), or needing a run (with what its runs say); and the
    documents of the drops still pending."""

    settled: list[Receipt] = field(default_factory=list)
    waiting: list[Receipt] = field(default_factory=list)
    needed: list[tuple[Receipt, ReceiptRuns]] = field(default_factory=list)
    pending_ids: set[str] = field(default_factory=set)

    def news(self) -> list[str]:
        """What the triage found, as a sensor says it (counts only)."""
        said = [f"{len(self.settled)} drops ingested"] if self.settled else []
        if self.waiting:
            said.append(f"{len(self.waiting)} drops waiting for their runs or, after repeated failures, for their "
                        "next attempt")
        return said


def triage_drops(store: Store, runs_of: Callable[[Receipt], ReceiptRuns]) -> DropTriage:
    """Settle each pending drop that needs nothing more, and sort the rest (``runs_of``: what the
    orchestrator holds of a receipt's runs). A drop is done when a run of its latest attempt has
    succeeded (the run stores, extracts and links its documents and exports the snapshot), or when
    none of its documents has a landed copy any more (all deleted since)."""
    receipts, out = Receipts(store), DropTriage()
    for receipt in receipts.pending(INGESTION):
        runs = runs_of(receipt)
        if runs.succeeded:
            out.settled.append(receipts.settle(receipt, f"run {runs.succeeded} succeeded"))
            continue
        out.pending_ids.update(receipt.doc_ids)
        if runs.in_flight or runs.backing_off():
            out.waiting.append(receipt)
        elif not receipts.landing.landed(receipt.doc_ids):
            out.settled.append(receipts.settle(receipt, "none of its documents has a landed copy (deleted since)"))
        else:
            out.needed.append((receipt, runs))
    return out


def receipt_for_landed(store: Store, stamp: str) -> Receipt | None:
    """A receipt, recorded, for every landed document the store lacks that no pending drop holds
    and no deletion request waits for (what the hourly pick-up ingests as a batch of its own);
    None when there is none."""
    landing, receipts = Landing(store), Receipts(store)
    pending = {d for r in receipts.pending(INGESTION) for d in r.doc_ids}
    awaiting_deletion = {r.doc_id for r in landing.deletion_requests()}
    wanted = sorted(set(landing.landed_ids()) - live_doc_ids(store) - awaiting_deletion - pending)
    if not wanted:
        return None
    receipt = Receipt.for_documents({"schedule": "ingestion_schedule", "at": stamp}, wanted, f"hourly schedule {stamp}")
    receipts.record(receipt)
    return receipt


@dataclass(frozen=True)
class BatchPassages:
    """A batch's live documents, their passages with no successful extraction (in document
    order), and the recorded extractions those documents arrived with."""

    doc_ids: list[str]
    unextracted: list[Passage]
    recorded: dict[str, dict | list]


def batch_passages(store: Store, batch_id: str, *, with_recorded: bool = True) -> BatchPassages:
    """What a batch still needs extracted (see :class:`BatchPassages`)."""
    doc_ids = batch_doc_ids(store, batch_id)
    needed: list[Passage] = []
    if doc_ids:
        stored = store.rows(PASSAGES.name, "doc_id", doc_ids)
        done = set(store.rows(EXTRACTIONS.name, "doc_id", doc_ids).filter(pl.col("status") == OK)
                   .get_column("chunk_id").to_list())
        needed = [Passage(r["chunk_id"], r["doc_id"], r["ordinal"], r["title"], r["text"])
                  for r in stored.sort("doc_id", "ordinal").iter_rows(named=True) if r["chunk_id"] not in done]
    recorded = {}
    if with_recorded and needed:
        recorded = {doc_id: landed.extraction
                    for doc_id, landed in Landing(store).documents({p.doc_id for p in needed}).items()
                    if landed.extraction is not None}
    return BatchPassages(doc_ids, needed, recorded)


@dataclass
class BatchAnswers:
    """What asking the model for a batch's passages did: how many documents and unextracted
    passages the batch has, which documents were asked, where the answers came from
    (``answers``), and why the model could not be used (``unusable``; None when it could)."""

    documents: int = 0
    passages: int = 0
    answers: AnswerReport = field(default_factory=AnswerReport)
    unusable: str | None = None

    @property
    def documents_asked(self) -> int:
        return len({o.doc_id for o in self.answers.outcomes if o.model_calls})

    def cost(self) -> dict[str, int | float]:
        """The model calls, retries (requests sent again, not further calls), tokens and cost of the
        batch's answers."""
        calls = self.answers.outcomes
        totals: dict[str, int | float] = {name: sum(getattr(o, name) for o in calls)
                                          for name in ("model_calls", "retries", "tokens_in", "tokens_out")}
        totals["cost_usd"] = round(float(sum(o.cost_usd for o in calls)), 9)
        return totals


def answer_batch_passages(store: Store, batch_id: str, model: Callable[[], Extractor],
                          asks_model: Callable[[str, Collection[str]], bool], claims: ExtractionClaims, *,
                          with_recorded: bool = True, finished: Callable[[str], bool] = lambda claimant: False,
                          progress: ProgressCallback | None = None,
                          echo: Callable[[str], None] = lambda line: None) -> BatchAnswers:
    """Ask the model (``model()`` builds it) for every passage of a batch's documents that has no
    extraction yet and that ``asks_model`` sends to it (not one left to a recorded extraction),
    putting the answers in the extraction cache and committing nothing (ingest/extraction/answers.py:
    ``answer_passages``, with ``claims`` so that a text another run is asking is waited for, not
    asked twice). A model that cannot be built leaves every passage to fail with the reason."""
    todo = batch_passages(store, batch_id, with_recorded=with_recorded)
    asked = [p for p in todo.unextracted if asks_model(p.doc_id, todo.recorded)]
    out = BatchAnswers(len(todo.doc_ids), len(todo.unextracted))
    if asked:
        try:
            extractor = model()
        except Exception as err:  # the extractions step fails each passage with this reason
            out.unusable = f"the language model is not usable: {err}"
            echo(out.unusable)
            return out
        echo(f"answering {len(asked)} passages with {extractor.name}")
        out.answers = answer_passages(extractor, claims, asked, progress=progress, finished=finished)
    return out


@dataclass
class BatchExtractions:
    """What recording a batch's extractions did, and its documents by extraction status."""

    passages: BatchPassages
    outcomes: list[ExtractionOutcome] = field(default_factory=list)  # those stored (their documents still live)
    already_extracted: int = 0
    rows: int = 0  # the batch's stored extraction rows
    documents: dict[str, int] = field(default_factory=dict)  # extracted, partly_failed, failed, without_passages
    validation: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    state: StoreState | None = None

    @property
    def failures(self) -> list[ExtractionOutcome]:
        return [o for o in self.outcomes if o.status != OK]

    @property
    def replayed(self) -> int:
        return sum(1 for o in self.outcomes if o.status == OK and o.doc_id in self.passages.recorded and not o.cached)

    @property
    def from_cache(self) -> int:
        return sum(1 for o in self.outcomes if o.status == OK and o.cached)


def record_batch_extractions(store: Store, batch_id: str, extractor: Callable[[dict[str, dict | list]], Extractor],
                             *, fingerprint: bool = False) -> BatchExtractions:
    """Extract the batch's passages that have no extraction (``extractor(recorded)`` gives the
    extractor: replays and answers from the extraction cache, in the Dagster layer) and store the
    outcomes in one commit; a passage whose extraction failed is stored with its reason, and one
    whose document was deleted meanwhile is left out (it stays deleted)."""
    passages = batch_passages(store, batch_id)
    outcomes = extractor(passages.recorded).extract(passages.unextracted) if passages.unextracted else []
    keys = passages.doc_ids
    with store.transaction() as tx:
        live = set(tx.rows(PASSAGES.name, "doc_id", keys).get_column("chunk_id").to_list()) if keys else set()
        kept = [o for o in outcomes if o.chunk_id in live]
        record_extractions(tx, kept)
        manifest, changed = commit_if_changed(tx, "extractions", {"passages": len(kept)})
    report = BatchExtractions(passages, kept, already_extracted=len(live) - len(passages.unextracted))
    validation: Counter = Counter()
    for o in kept:
        if o.record is not None:
            validation.update(o.record.counts())
    report.validation = dict(sorted(validation.items()))
    rows = store.rows(EXTRACTIONS.name, "doc_id", keys, manifest) if keys else EXTRACTIONS.empty()
    report.rows = rows.height
    per_doc = rows.group_by("doc_id").agg(pl.len().alias("n"), (pl.col("status") != OK).sum().alias("failed"))
    by_doc = {r["doc_id"]: r for r in per_doc.iter_rows(named=True)}
    statuses = {"extracted": 0, "partly_failed": 0, "failed": 0, "without_passages": 0}
    for key in keys:
        r = by_doc.get(key)
        statuses["without_passages" if r is None else "failed" if r["failed"] == r["n"]
                 else "partly_failed" if r["failed"] else "extracted"] += 1
    report.documents = statuses
    report.counts = batch_counts(store, batch_id, manifest)
    report.state = store_state(store, manifest, [t.name for t in STAGE_TABLES["extractions"]], changed=changed,
                               fingerprint=fingerprint)
    return report


# -- forms -----------------------------------------------------------------------------------


@dataclass
class BatchForms:
    forms: int = 0  # forms derived
    fact_assertions: int = 0
    names: int = 0  # distinct (type, name) of the batch's documents
    facts: int = 0  # distinct facts of the batch's documents
    counts: dict[str, int] = field(default_factory=dict)
    state: StoreState | None = None


def derive_batch_forms(store: Store, batch_id: str, *, fingerprint: bool = False) -> BatchForms:
    """Derive the forms and fact assertions of a batch's documents from their stored extractions
    (one commit, none when nothing changed): the batch's input to the graph."""
    keys = batch_doc_ids(store, batch_id)
    with store.transaction() as tx:
        n_forms, n_assertions = derive_document_forms(tx, keys)
        manifest, changed = commit_if_changed(tx, "forms", {"documents": len(keys)})
    mine = store.rows(DOCUMENT_KEYS.name, "doc_id", keys, manifest) if keys else DOCUMENT_KEYS.empty()
    return BatchForms(
        n_forms, n_assertions,
        names=mine.filter(pl.col("kind") == "name").select("type", "key").n_unique() if mine.height else 0,
        facts=mine.filter(pl.col("kind") == "fact").select("key").n_unique() if mine.height else 0,
        counts=batch_counts(store, batch_id, manifest),
        state=store_state(store, manifest, [t.name for t in STAGE_TABLES["forms"]], changed=changed,
                          fingerprint=fingerprint),
    )
