"""The landing area: documents and deletion requests kept under the store root until acted on.

Documents that arrive through an inbox (see inbox.py) are copied here, one file per document,
so that every later step — the first ingestion, a re-run, a backfill of one document — reads the
same text by document id. Deletion requests wait here until a deletion has applied them.

Every drop taken from an inbox (and every batch of documents the retention schedule deletes)
also leaves a **receipt**: pending until a run that includes it has succeeded, then done. The
receipt's id is a hash of the drop's identity (inbox, name, size, modification time) and of what
it asks (document ids; for a deletion, each one's erase flag and reason) — never a counter — so
the orchestrator derives run keys from it, finds a drop's runs again after any restart, and
knows a drop it has already taken.

Layout under the store root (a local path or an object-store prefix)::

    landing/documents/<key>.json   {document, extraction?, landed_at, origin}
    landing/requests/<key>.json    {doc_id, reason, erase, requested_at, origin}
    landing/receipts/<kind>/pending/<receipt id>.json
    landing/receipts/<kind>/done/<receipt id>.json
                                   {kind, receipt_id, origin, doc_ids, erase_ids, taken_at,
                                    done_at, outcome}

``<key>`` is the document id, percent-encoded (with a ``d-`` prefix, so no id can name ``.`` or
``..``), or a hash of it when the encoded id would be too long for a file name. ``<kind>`` is
``erasure`` or ``documents``. A receipt holds document ids and no text; the text of a drop's
documents is not hashed into its id either, so nothing derived from an erased text outlives it.

A landed copy holds the document's text, so it goes when the document does: deleting a
document removes its copy (``forget``), and hard erasure removes it too.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import urllib.parse
from dataclasses import dataclass
from typing import Iterable, Sequence

import polars as pl
import pyarrow.fs as pafs

from lightfoot_pipeline.ingest.dataset import Document, DatasetError, parse_document
from lightfoot_pipeline.store.filesystem import open_filesystem
from lightfoot_pipeline.store.tables import DOCUMENTS as DOCUMENTS_TABLE
from lightfoot_pipeline.store.tables import TOMBSTONES as TOMBSTONES_TABLE

LANDING_DIR = "landing"
DOCUMENTS_DIR = "documents"
REQUESTS_DIR = "requests"
RECEIPTS_DIR = "receipts"
ERASURE = "erasure"  # a receipt for deletion requests
INGESTION = "documents"  # a receipt for documents to ingest
RECEIPT_KINDS = (ERASURE, INGESTION)
PENDING, DONE = "pending", "done"
_MAX_KEY_CHARS = 180


@dataclass(frozen=True)
class LandedDocument:
    """A document as it arrived, with the recorded extraction that came with it, if any."""

    document: Document
    extraction: dict | list | None = None
    landed_at: dt.datetime | None = None
    origin: str = ""

    @property
    def doc_id(self) -> str:
        return self.document.doc_id

    def as_json(self) -> dict:
        doc = self.document
        return {
            "document": {
                "doc_id": doc.doc_id,
                "title": doc.title,
                "text": doc.text,
                "retention_until": doc.retention_until.isoformat() if doc.retention_until else None,
                "source": doc.source,
            },
            "extraction": self.extraction,
            "landed_at": (self.landed_at or utc_now()).isoformat(),
            "origin": self.origin,
        }

    @classmethod
    def from_json(cls, data: dict, where: str) -> "LandedDocument":
        if not isinstance(data, dict) or "document" not in data:
            raise DatasetError(f"{where}: not a landed document")
        return cls(
            document=parse_document(data["document"], where),
            extraction=data.get("extraction"),
            landed_at=_parse_time(data.get("landed_at")),
            origin=str(data.get("origin") or ""),
        )


@dataclass(frozen=True)
class DeletionRequest:
    """A request to delete a document: why, and whether to erase its history too."""

    doc_id: str
    reason: str
    erase: bool = True
    requested_at: dt.datetime | None = None
    origin: str = ""

    def as_json(self) -> dict:
        return {
            "doc_id": self.doc_id,
            "reason": self.reason,
            "erase": self.erase,
            "requested_at": (self.requested_at or utc_now()).isoformat(),
            "origin": self.origin,
        }

    @classmethod
    def from_json(cls, data: dict, where: str) -> "DeletionRequest":
        if not isinstance(data, dict) or not isinstance(data.get("doc_id"), str) or not data["doc_id"]:
            raise DatasetError(f"{where}: a deletion request needs a doc_id")
        return cls(
            doc_id=data["doc_id"],
            reason=str(data.get("reason") or ""),
            erase=bool(data.get("erase", True)),
            requested_at=_parse_time(data.get("requested_at")),
            origin=str(data.get("origin") or ""),
        )


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
    def for_deletions(cls, source: dict, requests: Sequence[DeletionRequest], origin: str) -> "Receipt":
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
    def for_documents(cls, source: dict, doc_ids: Iterable[str], origin: str) -> "Receipt":
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
    def from_json(cls, data: dict, where: str) -> "Receipt":
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
            taken_at=_parse_time(data.get("taken_at")),
            done_at=_parse_time(data.get("done_at")),
            outcome=str(data.get("outcome") or ""),
        )


def receipt_id(kind: str, source: dict, content) -> str:
    """A receipt's id: a hash of its kind, the drop's identity and what the drop asks."""
    payload = json.dumps({"kind": kind, "source": source, "content": content}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _parse_time(value) -> dt.datetime | None:
    if not value:
        return None
    parsed = dt.datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def file_key(doc_id: str) -> str:
    """The file name (without extension) that holds a document id's entry."""
    quoted = urllib.parse.quote(doc_id, safe="")
    if len(quoted) <= _MAX_KEY_CHARS:
        return f"d-{quoted}"
    return "h-" + hashlib.sha256(doc_id.encode("utf-8")).hexdigest()


def read_json(fs: pafs.FileSystem, path: str):
    with fs.open_input_stream(path) as stream:
        return json.loads(stream.read().decode("utf-8"))


def write_json(fs: pafs.FileSystem, path: str, payload) -> None:
    """Write a JSON file whole: to a temporary name first, then moved into place."""
    data = json.dumps(payload, ensure_ascii=False, sort_keys=True).encode("utf-8")
    parent = path.rsplit("/", 1)[0]
    fs.create_dir(parent, recursive=True)
    temporary = f"{parent}/.tmp-{hashlib.sha1(path.encode()).hexdigest()[:12]}-{utc_now().timestamp():.6f}"
    with fs.open_output_stream(temporary) as stream:
        stream.write(data)
    fs.move(temporary, path)


def delete_quietly(fs: pafs.FileSystem, path: str) -> bool:
    """Delete a file; False when it was not there."""
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        return False
    return True


def _json_files(fs: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
    infos = fs.get_file_info(pafs.FileSelector(folder, recursive=False, allow_not_found=True))
    return sorted(
        (i for i in infos if i.type == pafs.FileType.File and i.base_name.endswith(".json")
         and not i.base_name.startswith(".")),
        key=lambda i: i.path,
    )


class Landing:
    """The landing area of one store."""

    def __init__(self, store) -> None:
        self.store = store
        self.fs, root = open_filesystem(store.uri, store.storage_options)
        self.root = f"{root}/{LANDING_DIR}"

    def _path(self, folder: str, doc_id: str) -> str:
        return f"{self.root}/{folder}/{file_key(doc_id)}.json"

    # -- documents -------------------------------------------------------------------------

    def put_documents(self, items: Sequence[LandedDocument]) -> None:
        for item in items:
            write_json(self.fs, self._path(DOCUMENTS_DIR, item.doc_id), item.as_json())

    def documents(self, doc_ids: Iterable[str]) -> dict[str, LandedDocument]:
        """The landed copies of these documents (ids with no copy are left out)."""
        found: dict[str, LandedDocument] = {}
        for doc_id in sorted(set(doc_ids)):
            path = self._path(DOCUMENTS_DIR, doc_id)
            try:
                data = read_json(self.fs, path)
            except FileNotFoundError:
                continue
            landed = LandedDocument.from_json(data, path)
            if landed.doc_id != doc_id:
                raise DatasetError(f"{path}: holds document {landed.doc_id!r}, expected {doc_id!r}")
            found[doc_id] = landed
        return found

    def landed(self, doc_ids: Iterable[str]) -> set[str]:
        """Which of these documents have a landed copy (without reading the copies)."""
        ids = sorted(set(doc_ids))
        infos = self.fs.get_file_info([self._path(DOCUMENTS_DIR, d) for d in ids])
        return {d for d, info in zip(ids, infos) if info.type == pafs.FileType.File}

    def landed_ids(self) -> list[str]:
        """Every document id with a landed copy."""
        ids = []
        for info in _json_files(self.fs, f"{self.root}/{DOCUMENTS_DIR}"):
            stem = info.base_name.removesuffix(".json")
            if stem.startswith("d-"):
                ids.append(urllib.parse.unquote(stem[2:]))
            else:  # a hashed key: the id is only inside the file
                ids.append(LandedDocument.from_json(read_json(self.fs, info.path), info.path).doc_id)
        return sorted(ids)

    def forget(self, doc_ids: Iterable[str]) -> int:
        """Delete the landed copies (the text) of these documents; returns how many there were."""
        return sum(delete_quietly(self.fs, self._path(DOCUMENTS_DIR, d)) for d in sorted(set(doc_ids)))

    # -- deletion requests -----------------------------------------------------------------

    def request_deletions(self, requests: Sequence[DeletionRequest]) -> None:
        """Record requests; a later request for the same document replaces an earlier one,
        except that a request to erase is never downgraded to one that keeps history."""
        pending = {r.doc_id: r for r in self.deletion_requests()}
        for request in requests:
            earlier = pending.get(request.doc_id)
            if earlier is not None and earlier.erase and not request.erase:
                request = DeletionRequest(request.doc_id, request.reason, True, request.requested_at, request.origin)
            write_json(self.fs, self._path(REQUESTS_DIR, request.doc_id), request.as_json())
            pending[request.doc_id] = request

    def deletion_requests(self) -> list[DeletionRequest]:
        """Pending requests, oldest first."""
        requests = [
            DeletionRequest.from_json(read_json(self.fs, info.path), info.path)
            for info in _json_files(self.fs, f"{self.root}/{REQUESTS_DIR}")
        ]
        epoch = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
        return sorted(requests, key=lambda r: (r.requested_at or epoch, r.doc_id))

    def resolve_requests(self, doc_ids: Iterable[str]) -> int:
        """Remove the requests of these documents once a deletion has applied them."""
        return sum(delete_quietly(self.fs, self._path(REQUESTS_DIR, d)) for d in sorted(set(doc_ids)))

    # -- receipts --------------------------------------------------------------------------

    def _receipt_path(self, kind: str, state: str, receipt_id: str) -> str:
        if kind not in RECEIPT_KINDS:
            raise ValueError(f"unknown receipt kind {kind!r}; expected one of {', '.join(RECEIPT_KINDS)}")
        return f"{self.root}/{RECEIPTS_DIR}/{kind}/{state}/{receipt_id}.json"

    def record(self, receipt: Receipt) -> bool:
        """Keep a receipt as pending; False (and nothing written) when its id is already known,
        pending or done: the drop was taken before."""
        if self.receipt(receipt.kind, receipt.receipt_id) is not None:
            return False
        write_json(self.fs, self._receipt_path(receipt.kind, PENDING, receipt.receipt_id), receipt.as_json())
        return True

    def receipt(self, kind: str, receipt_id: str) -> Receipt | None:
        """The receipt with this id (done if it has been settled), or None."""
        for state in (DONE, PENDING):
            path = self._receipt_path(kind, state, receipt_id)
            try:
                return Receipt.from_json(read_json(self.fs, path), path)
            except FileNotFoundError:
                continue
        return None

    def pending_receipts(self, kind: str) -> list[Receipt]:
        """Receipts not yet settled, oldest first."""
        receipts = []
        for info in _json_files(self.fs, f"{self.root}/{RECEIPTS_DIR}/{kind}/{PENDING}"):
            receipt = Receipt.from_json(read_json(self.fs, info.path), info.path)
            if self.fs.get_file_info(self._receipt_path(kind, DONE, receipt.receipt_id)).type == pafs.FileType.File:
                delete_quietly(self.fs, info.path)  # settled, by a process that stopped before this step
                continue
            receipts.append(receipt)
        epoch = dt.datetime.min.replace(tzinfo=dt.timezone.utc)
        return sorted(receipts, key=lambda r: (r.taken_at or epoch, r.receipt_id))

    def settle(self, receipt: Receipt, outcome: str) -> Receipt:
        """Mark a receipt done, saying what settled it; a done receipt is never pending again."""
        done = Receipt(receipt.kind, receipt.receipt_id, receipt.origin, receipt.doc_ids, receipt.erase_ids,
                       receipt.taken_at, utc_now(), outcome)
        write_json(self.fs, self._receipt_path(receipt.kind, DONE, receipt.receipt_id), done.as_json())
        delete_quietly(self.fs, self._receipt_path(receipt.kind, PENDING, receipt.receipt_id))
        return done

    def outstanding_deletions(self, receipt: Receipt) -> dict[str, str]:
        """The documents of a deletion receipt whose deletion is not complete, each with why: still
        stored, a request still waiting here, or (where erasure was asked) history not yet erased.
        Empty when every document it names is gone, and erased where asked."""
        ids = sorted(receipt.doc_ids)
        live = set(self.store.read(DOCUMENTS_TABLE.name, columns=["doc_id"])
                   .filter(pl.col("doc_id").is_in(ids)).get_column("doc_id").to_list())
        waiting = {r.doc_id for r in self.deletion_requests()}
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
