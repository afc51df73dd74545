"""Receipts: what each drop taken from an inbox asked, pending until a run that includes it has
succeeded, then done.

Every drop taken from an inbox (and every batch of documents the retention schedule deletes)
leaves a receipt in the landing area. The receipt's id is a hash of the drop's identity (inbox,
name, size, modification time) and of what it asks (document ids; for a deletion, each one's erase
flag and reason) — never a counter — so the orchestrator derives run keys from it, finds a drop's
runs again after any restart, and knows a drop it has already taken.

Layout under the store root (a local path or an object-store prefix)::

    landing/receipts/<kind>/pending/<receipt id>.json
    landing/receipts/<kind>/done/<receipt id>.json
                                   {kind, receipt_id, origin, doc_ids, erase_ids, taken_at,
                                    done_at, outcome}

``<kind>`` is ``erasure`` or ``documents``. A receipt holds document ids and no text; the text of
a drop's documents is not hashed into its id either, so nothing derived from an erased text
outlives it.

What the orchestrator holds of a receipt's runs is a :class:`ReceiptRuns`. A receipt whose runs
keep failing backs off: the first failure is retried at the next tick, and each further one
doubles the wait after the last failed run ended (one minute after the second, two after the
third, …, at most an hour; :func:`retry_delay_s`), so a request that cannot succeed (a broken
store, a bad deployment) leaves a failed run an hour in the orchestrator rather than one every tick.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import polars as pl
import pyarrow.fs as pafs

from lightfoot_pipeline.ingest.dataset import DatasetError
from lightfoot_pipeline.ingest.landing import DeletionRequest, Landing, parse_time, utc_now
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.filesystem import delete_quietly, json_files, read_json, write_json
from lightfoot_pipeline.store.tables import TOMBSTONES as TOMBSTONES_TABLE

RECEIPTS_DIR = "receipts"
ERASURE = "erasure"  # a receipt for deletion requests
INGESTION = "documents"  # a receipt for documents to ingest
RECEIPT_KINDS = (ERASURE, INGESTION)
RETRY_BACKOFF_S = 60.0  # the wait after the second failure; doubled after each further one
RETRY_BACKOFF_MAX_S = 3600.0
PENDING, DONE = "pending", "done"


@dataclass(frozen=True)
class Receipt:
    """A drop taken from an inbox: which documents it names, pending until a run that includes it
    has succeeded, then done with the outcome that settled it."""

    kind: str
    receipt_id: str
    origin: str
    doc_ids: tuple[str, ...]
    erase_ids: tuple[str, ...] = ()  # for a deletion: the documents whose history goes too
    taken_at: dt.datetime | None = None
    done_at: dt.datetime | None = None
    outcome: str = ""

    @classmethod
    def for_deletions(cls, source: dict, requests: Sequence[DeletionRequest], origin: str) -> Receipt:
        """The receipt of deletion requests taken from ``source`` (what identifies the drop)."""
        if not requests:
            raise ValueError("a receipt needs at least one deletion request")
        content = sorted([r.doc_id, r.erase, r.reason] for r in requests)
        return cls(
            kind=ERASURE,
            receipt_id=receipt_id(ERASURE, source, content),
            origin=origin,
            doc_ids=tuple(sorted({r.doc_id for r in requests})),
            erase_ids=tuple(sorted({r.doc_id for r in requests if r.erase})),
            taken_at=utc_now(),
        )

    @classmethod
    def for_documents(cls, source: dict, doc_ids: Iterable[str], origin: str) -> Receipt:
        """The receipt of documents landed from ``source``, to be ingested."""
        ids = sorted(set(doc_ids))
        if not ids:
            raise ValueError("a receipt needs at least one document")
        return cls(INGESTION, receipt_id(INGESTION, source, ids), origin, tuple(ids), taken_at=utc_now())

    @property
    def is_done(self) -> bool:
        return self.done_at is not None

    def as_json(self) -> dict:
        return {
            "kind": self.kind,
            "receipt_id": self.receipt_id,
            "origin": self.origin,
            "doc_ids": list(self.doc_ids),
            "erase_ids": list(self.erase_ids),
            "taken_at": (self.taken_at or utc_now()).isoformat(),
            "done_at": self.done_at.isoformat() if self.done_at else None,
            "outcome": self.outcome,
        }

    @classmethod
    def from_json(cls, data: dict, where: str) -> Receipt:
        if not isinstance(data, dict) or data.get("kind") not in RECEIPT_KINDS or not data.get("receipt_id"):
            raise DatasetError(f"{where}: not a receipt")
        ids = data.get("doc_ids")
        if not isinstance(ids, list) or not all(isinstance(d, str) for d in ids):
            raise DatasetError(f"{where}: a receipt's doc_ids must be a list of strings")
        return cls(
            kind=data["kind"],
            receipt_id=str(data["receipt_id"]),
            origin=str(data.get("origin") or ""),
            doc_ids=tuple(ids),
            erase_ids=tuple(str(d) for d in data.get("erase_ids") or ()),
            taken_at=parse_time(data.get("taken_at")),
            done_at=parse_time(data.get("done_at")),
            outcome=str(data.get("outcome") or ""),
        )


def receipt_id(kind: str, source: dict, content) -> str:
    """A receipt's id: a hash of its kind, the drop's identity and what the drop asks."""
    payload = json.dumps({"kind": kind, "source": source, "content": content}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


class Receipts:
    """The receipts in the landing area of one store."""

    def __init__(self, store) -> None:
        self.store = store
        self.landing = Landing(store)
        self.fs = self.landing.fs
        self.root = f"{self.landing.root}/{RECEIPTS_DIR}"

    def _path(self, kind: str, state: str, receipt_id: str) -> str:
        if kind not in RECEIPT_KINDS:
            raise ValueError(f"unknown receipt kind {kind!r}; expected one of {', '.join(RECEIPT_KINDS)}")
        return f"{self.root}/{kind}/{state}/{receipt_id}.json"

    def record(self, receipt: Receipt) -> bool:
        """Keep a receipt as pending; False (and nothing written) when its id is already known,
        pending or done: the drop was taken before."""
        if self.receipt(receipt.kind, receipt.receipt_id) is not None:
            return False
        write_json(self.fs, self._path(receipt.kind, PENDING, receipt.receipt_id), receipt.as_json())
        return True

    def receipt(self, kind: str, receipt_id: str) -> Receipt | None:
        """The receipt with this id (done if it has been settled), or None."""
        for state in (DONE, PENDING):
            path = self._path(kind, state, receipt_id)
            try:
                return Receipt.from_json(read_json(self.fs, path), path)
            except FileNotFoundError:
                continue
        return None

    def pending(self, kind: str) -> list[Receipt]:
        """Receipts not yet settled, oldest first."""
        receipts = []
        for info in json_files(self.fs, f"{self.root}/{kind}/{PENDING}"):
            receipt = Receipt.from_json(read_json(self.fs, info.path), info.path)
            if self.fs.get_file_info(self._path(kind, DONE, receipt.receipt_id)).type == pafs.FileType.File:
                delete_quietly(self.fs, info.path)  # settled, by a process that stopped before this step
                continue
            receipts.append(receipt)
        epoch = dt.datetime.min.replace(tzinfo=dt.UTC)
        return sorted(receipts, key=lambda r: (r.taken_at or epoch, r.receipt_id))

    def settle(self, receipt: Receipt, outcome: str) -> Receipt:
        """Mark a receipt done, saying what settled it; a done receipt is never pending again."""
        done = Receipt(receipt.kind, receipt.receipt_id, receipt.origin, receipt.doc_ids, receipt.erase_ids,
                       receipt.taken_at, utc_now(), outcome)
        write_json(self.fs, self._path(receipt.kind, DONE, receipt.receipt_id), done.as_json())
        delete_quietly(self.fs, self._path(receipt.kind, PENDING, receipt.receipt_id))
        return done

    def outstanding_deletions(self, receipt: Receipt) -> dict[str, str]:
        """The documents of a deletion receipt whose deletion is not complete, each with why: still
        stored, a request still waiting here, or (where erasure was asked) history not yet erased.
        Empty when every document it names is gone, and erased where asked."""
        ids = sorted(receipt.doc_ids)
        live = live_doc_ids(self.store, among=ids)
        waiting = {r.doc_id for r in self.landing.deletion_requests()}
        unerased = set(
            self.store.read(TOMBSTONES_TABLE.name, columns=["doc_id", "erase", "erased_at"])
            .filter(pl.col("doc_id").is_in(list(receipt.erase_ids)) & pl.col("erase") & pl.col("erased_at").is_null())
            .get_column("doc_id").to_list()
        )
        outstanding = {}
        for doc_id in ids:
            if doc_id in live:
                outstanding[doc_id] = "still stored"
            elif doc_id in waiting:
                outstanding[doc_id] = "its deletion request waits in the landing area"
            elif doc_id in unerased:
                outstanding[doc_id] = "deleted, its history not yet erased"
        return outstanding


@dataclass(frozen=True)
class ReceiptRuns:
    """What the orchestrator holds of the runs asked for one receipt."""

    succeeded: str | None = None  # a successful run of the latest attempt
    in_flight: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # failed or canceled, in any attempt
    attempt: int = 0  # the attempt a request made now belongs to
    retry_at: float | None = None  # after repeated failures: no retry before this time (epoch seconds)
    started: bool = False  # whether any run was ever asked for it

    def backing_off(self, now: float | None = None) -> bool:
        """Whether a retry must wait (see the module docstring)."""
        return self.retry_at is not None and (time.time() if now is None else now) < self.retry_at


def retry_delay_s(failures: int) -> float:
    """How long after the last failed run a receipt with this many failed attempts waits."""
    if failures <= 1:
        return 0.0
    return min(RETRY_BACKOFF_S * 2 ** (failures - 2), RETRY_BACKOFF_MAX_S)
