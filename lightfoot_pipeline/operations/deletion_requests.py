"""Deletion requests carried out in steps, as an orchestrated deletion run does: the documents
the retention policy makes due on a day, the pending requests applied as tombstones in one
transaction, and which deleted documents are done with (their partition keys can go) or what
each still waits for. The erasures still owed, once the graph has let go of the deleted names,
are erase.py's ``pending_erasures``.

Each is a function over the store and its landing area, with no model call; the graph is updated
between the steps by the graph's own reconciliation.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.index.documents import tombstone_documents
from lightfoot_pipeline.ingest.landing import DeletionRequest, Landing, utc_now
from lightfoot_pipeline.ingest.receipts import ERASURE, Receipt, ReceiptRuns, Receipts
from lightfoot_pipeline.ingest.retention import DueDocument, RetentionPolicy, due_documents
from lightfoot_pipeline.operations.batches import StoreState, commit_if_changed, store_state
from lightfoot_pipeline.store.batches import DELETED, batch_log
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENTS as DOCUMENTS_TABLE
from lightfoot_pipeline.store.tables import GRAPH_QUEUE
from lightfoot_pipeline.store.tables import TOMBSTONES as TOMBSTONES_TABLE
from lightfoot_pipeline.store.transaction import Transaction


def documents_past_retention(store: Store, landing: Landing, policy: RetentionPolicy,
                             today: dt.date) -> list[DueDocument]:
    """The stored documents past their retention date on ``today``: their ``retention_until``, or
    the policy's rules (a ``keep_days`` rule counts from the day the landed copy arrived)."""
    documents = store.read_columns(DOCUMENTS_TABLE.name, store.manifest(), ["doc_id", "source", "retention_until"])
    landed_on = {}
    if any(rule.keep_days is not None for rule in policy.rules):
        ids = [r["doc_id"] for r in documents.iter_rows(named=True)
               if any(rule.keep_days is not None and rule.matches(r["doc_id"], r["source"] or "") for rule in policy.rules)]
        landed_on = {d: copy.landed_at.date() for d, copy in landing.documents(ids).items() if copy.landed_at}
    return due_documents(documents, today, policy, landed_on)


def request_retention_deletions(store: Store, policy: RetentionPolicy, today: dt.date) -> Receipt | None:
    """The deletion (with erasure) of every document past its retention date on ``today``, as
    requests in the landing area under one recorded receipt, as an erasure request's: the receipt
    names the day, and a run that fails is asked for again by whoever settles erasure receipts.
    None when no document is due."""
    landing = Landing(store)
    due = documents_past_retention(store, landing, policy, today)
    if not due:
        return None
    now = utc_now()
    requests = [DeletionRequest(d.doc_id, d.reason, True, now, "retention schedule") for d in due]
    receipt = Receipt.for_deletions({"schedule": "retention_schedule", "date": today.isoformat()}, requests,
                                    f"retention schedule {today.isoformat()}")
    landing.request_deletions(requests)
    Receipts(store).record(receipt)
    return receipt


@dataclass
class RequestsApplied:
    """What applying deletion requests did: each deleted document with its (reason, erase), the
    ids not in the store, and how many passages went."""

    deleted: dict[str, tuple[str, bool]] = field(default_factory=dict)
    not_found: list[str] = field(default_factory=list)
    passages_removed: int = 0


def tombstone_requests(tx: Transaction, requests: Sequence[DeletionRequest]) -> RequestsApplied:
    """Tombstone the documents the requests name, in ``tx``: their rows leave every per-document
    table, one tombstone each, requests of the same reason and erase flag together."""
    groups: dict[tuple[str, bool], list[str]] = defaultdict(list)
    for request in requests:
        groups[(request.reason, request.erase)].append(request.doc_id)
    applied = RequestsApplied()
    for (reason, erase), doc_ids in sorted(groups.items()):
        report = tombstone_documents(tx, doc_ids, reason=reason, erase=erase)
        applied.deleted.update({d: (reason, erase) for d in report.deleted})
        applied.not_found.extend(report.not_found)
        applied.passages_removed += len(report.chunk_ids)
    return applied


def latest_tombstones(store: Store, doc_ids: Sequence[str]) -> dict[str, dict]:
    """The latest tombstone (a row of the deletion log) of each of these documents that has one."""
    log = store.rows(TOMBSTONES_TABLE.name, "doc_id", doc_ids) if doc_ids else TOMBSTONES_TABLE.empty()
    return {r["doc_id"]: r for r in log.sort("requested_at").iter_rows(named=True)}


def partition_status(store: Store, landing: Landing, keys: list[str]) -> tuple[list[str], dict[str, str], list[str]]:
    """Which partition keys of deleted documents can go, which must wait (and why), and which
    of the removable ones still have a stale landed copy (a copy older than the deletion)."""
    live = live_doc_ids(store)
    candidates = [k for k in keys if k not in live]
    if not candidates:
        return [], {}, []
    latest = latest_tombstones(store, candidates)
    graph_queued = store.row_count(GRAPH_QUEUE.name, store.manifest())
    pending = {r.doc_id for r in landing.deletion_requests()}
    landed = landing.documents(candidates)
    removable, waiting, stale = [], {}, []
    for key in candidates:
        tombstone = latest.get(key)
        copy = landed.get(key)
        if tombstone is None:
            waiting[key] = "never stored: its ingestion has not run or has failed"
        elif key in pending:
            waiting[key] = "a deletion request is pending"
        elif copy is not None and copy.landed_at and copy.landed_at > tombstone["requested_at"]:
            waiting[key] = "landed again after its deletion: waiting to be ingested"
        elif graph_queued:
            waiting[key] = f"the graph has {graph_queued} queued changes to apply"
        elif tombstone["erase"] and tombstone["erased_at"] is None:
            waiting[key] = "its history is not erased yet"
        else:
            removable.append(key)
            if copy is not None:
                stale.append(key)
    return removable, waiting, stale


@dataclass
class Tombstoned:
    """What applying the pending deletion requests did (:func:`apply_deletion_requests`)."""

    requests: int
    applied: RequestsApplied
    state: StoreState


def apply_deletion_requests(store: Store, *, fingerprint: bool = False) -> Tombstoned:
    """Tombstone the documents every pending deletion request names, in one commit (none when
    nothing changed); their landed copies go (a copy holds the text, and no later run may ingest
    it again) and the requests are resolved. No model call; the graph is the graph stage's."""
    landing = Landing(store)
    requests = landing.deletion_requests()
    with store.transaction() as tx:
        applied = tombstone_requests(tx, requests)
        manifest, changed = commit_if_changed(tx, "delete", {"deleted": len(applied.deleted), "model_calls": 0})
    requested = [r.doc_id for r in requests]
    landing.forget(requested)
    landing.resolve_requests(requested)
    return Tombstoned(len(requests), applied, store_state(store, manifest, [TOMBSTONES_TABLE.name], changed=changed,
                                                          fingerprint=fingerprint))


def already_honoured(store: Store, doc_ids: Sequence[str], erase_ids: Sequence[str]) -> bool:
    """Whether every one of these documents was deleted before, and erased where asked: a request
    dropped again after it was done, which needs no run."""
    ids = sorted(doc_ids)
    if not ids or live_doc_ids(store, among=ids):
        return False
    log = store.rows(TOMBSTONES_TABLE.name, "doc_id", ids)
    if set(ids) - set(log.get_column("doc_id").to_list()):
        return False  # never stored here: the run says it was not found
    erased = set(log.filter(pl.col("erased_at").is_not_null()).get_column("doc_id").to_list())
    return set(erase_ids) <= erased


@dataclass
class ErasureTriage:
    """The pending erasure requests sorted by what each needs: settled now, waiting for its run,
    backing off after repeated failures, or needing a run (with its runs and its documents whose
    deletion is outstanding, each with why)."""

    settled: list[Receipt] = field(default_factory=list)
    waiting: list[Receipt] = field(default_factory=list)
    backing_off: list[Receipt] = field(default_factory=list)
    needed: list[tuple[Receipt, ReceiptRuns, dict[str, str]]] = field(default_factory=list)

    def news(self) -> list[str]:
        """What the triage found, as a sensor says it (counts only); the requests waiting for their
        runs are named only when none needs a run."""
        said = [f"{len(self.settled)} requests done"] if self.settled else []
        if self.backing_off:
            said.append(f"{len(self.backing_off)} requests whose runs failed repeatedly wait before their next attempt")
        if self.waiting and not self.needed:
            said.append(f"{len(self.waiting)} requests waiting for their runs")
        return said


def triage_erasure_requests(store: Store, runs_of: Callable[[Receipt], ReceiptRuns]) -> ErasureTriage:
    """Settle each pending erasure request that needs nothing more, and sort the rest (``runs_of``:
    what the orchestrator holds of a receipt's runs).

    A request is done when its run succeeded (a successful deletion run has applied every request
    landed before it started), or, with no run yet, when its documents were deleted before, and
    erased where asked (a request dropped again); or when its documents are gone by another path
    (a run asked for another request, the retention schedule, the command line). It waits while
    its run is in flight or backing off; otherwise it needs a run."""
    landing, receipts, out = Landing(store), Receipts(store), ErasureTriage()
    for receipt in receipts.pending(ERASURE):
        runs = runs_of(receipt)
        erased = " and erased" if receipt.erase_ids else ""
        if not runs.started and already_honoured(store, receipt.doc_ids, receipt.erase_ids):
            landing.resolve_requests(receipt.doc_ids)  # nothing is left to do for them
            out.settled.append(receipts.settle(receipt, f"already honoured: its documents were deleted{erased}"))
        elif runs.succeeded:
            out.settled.append(receipts.settle(receipt, f"run {runs.succeeded} succeeded"))
        elif runs.in_flight:
            out.waiting.append(receipt)
        elif runs.backing_off():
            out.backing_off.append(receipt)
        elif not (outstanding := receipts.outstanding_deletions(receipt)):
            out.settled.append(receipts.settle(receipt, f"its documents were already deleted{erased}"))
        else:
            out.needed.append((receipt, runs, outstanding))
    return out


def deletions_since(store: Store, seq: int) -> pl.DataFrame:
    """The batch log's deletions committed after ``seq`` (batch, doc_id, action, seq, run_id, at)."""
    return batch_log(store).filter((pl.col("action") == DELETED) & (pl.col("seq") > seq))


def deletions_outside(store: Store, since: int, known_run: Callable[[str], bool]) -> list[str]:
    """The documents deleted after commit ``since`` by no run the orchestrator knows
    (``known_run``): by the command line, a library call or a run of another instance. Their
    landed copies older than the deletion go (:func:`forget_stale_copies`)."""
    rows = deletions_since(store, since)
    runs = sorted({r for r in rows.get_column("run_id").unique().to_list() if r and known_run(r)})
    outside = rows.filter(~pl.col("run_id").is_in(runs))
    deleted = sorted(set(outside.get_column("doc_id").to_list()))
    if deleted:
        forget_stale_copies(store, outside)
    return deleted


def forget_stale_copies(store: Store, deletions: pl.DataFrame) -> int:
    """A landed copy older than its document's deletion holds the deleted text, and the hourly
    pick-up would ingest it again: it goes. A copy landed since waits to be ingested."""
    at = dict(deletions.group_by("doc_id").agg(pl.col("at").max()).iter_rows())
    landing = Landing(store)
    live = live_doc_ids(store, among=sorted(at))
    return landing.forget([d for d, copy in landing.documents(sorted(at)).items()
                           if d not in live and (copy.landed_at is None or copy.landed_at <= at[d])])
