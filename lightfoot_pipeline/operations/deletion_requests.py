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
from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.index.documents import tombstone_documents
from lightfoot_pipeline.ingest.landing import DeletionRequest, Landing
from lightfoot_pipeline.ingest.retention import DueDocument, RetentionPolicy, due_documents
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
    documents = store.read(DOCUMENTS_TABLE.name, columns=["doc_id", "source", "retention_until"])
    landed_on = {}
    if any(rule.keep_days is not None for rule in policy.rules):
        ids = [r["doc_id"] for r in documents.iter_rows(named=True)
               if any(rule.keep_days is not None and rule.matches(r["doc_id"], r["source"] or "") for rule in policy.rules)]
        landed_on = {d: copy.landed_at.date() for d, copy in landing.documents(ids).items() if copy.landed_at}
    return due_documents(documents, today, policy, landed_on)


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
    log = store.read(TOMBSTONES_TABLE.name).filter(pl.col("doc_id").is_in(doc_ids))
    return {r["doc_id"]: r for r in log.sort("requested_at").iter_rows(named=True)}


def partition_status(store: Store, landing: Landing, keys: list[str]) -> tuple[list[str], dict[str, str], list[str]]:
    """Which partition keys of deleted documents can go, which must wait (and why), and which
    of the removable ones still have a stale landed copy (a copy older than the deletion)."""
    live = live_doc_ids(store)
    candidates = [k for k in keys if k not in live]
    if not candidates:
        return [], {}, []
    latest = latest_tombstones(store, candidates)
    graph_queued = store.read(GRAPH_QUEUE.name, columns=["key"]).height
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
