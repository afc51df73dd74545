"""The landing area: documents and deletion requests kept under the store root until acted on.

Documents that arrive through an inbox (see inbox.py) are copied here, one file per document,
so that every later step — the first ingestion, a re-run, a backfill of one document — reads the
same text by document id. Deletion requests wait here until a deletion has applied them. Every
drop taken also leaves a receipt here (receipts.py).

Layout under the store root (a local path or an object-store prefix)::

    landing/documents/<key>.json   {document, extraction?, landed_at, origin}
    landing/requests/<key>.json    {doc_id, reason, erase, requested_at, origin}
    landing/receipts/…             see receipts.py

``<key>`` is the document id, percent-encoded (with a ``d-`` prefix, so no id can name ``.`` or
``..``), or a hash of it when the encoded id would be too long for a file name.

A landed copy holds the document's text, so it goes when the document does: deleting a
document removes its copy (``forget``), and hard erasure removes it too.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow.fs as pafs

from lightfoot_pipeline.ingest.dataset import DatasetError, Document, parse_document
from lightfoot_pipeline.store.filesystem import (
    delete_quietly,
    json_files,
    open_filesystem,
    read_json,
    read_json_files,
    write_json,
    write_json_files,
)

LANDING_DIR = "landing"
DOCUMENTS_DIR = "documents"
REQUESTS_DIR = "requests"
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
                "readers": list(doc.readers) if doc.readers is not None else None,
            },
            "extraction": self.extraction,
            "landed_at": (self.landed_at or utc_now()).isoformat(),
            "origin": self.origin,
        }

    @classmethod
    def from_json(cls, data: dict, where: str) -> LandedDocument:
        if not isinstance(data, dict) or "document" not in data:
            raise DatasetError(f"{where}: not a landed document")
        return cls(
            document=parse_document(data["document"], where),
            extraction=data.get("extraction"),
            landed_at=parse_time(data.get("landed_at")),
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
    def from_json(cls, data: dict, where: str) -> DeletionRequest:
        if not isinstance(data, dict) or not isinstance(data.get("doc_id"), str) or not data["doc_id"]:
            raise DatasetError(f"{where}: a deletion request needs a doc_id")
        return cls(
            doc_id=data["doc_id"],
            reason=str(data.get("reason") or ""),
            erase=bool(data.get("erase", True)),
            requested_at=parse_time(data.get("requested_at")),
            origin=str(data.get("origin") or ""),
        )


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def parse_time(value) -> dt.datetime | None:
    if not value:
        return None
    parsed = dt.datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def file_key(doc_id: str) -> str:
    """The file name (without extension) that holds a document id's entry."""
    quoted = urllib.parse.quote(doc_id, safe="")
    if len(quoted) <= _MAX_KEY_CHARS:
        return f"d-{quoted}"
    return "h-" + hashlib.sha256(doc_id.encode("utf-8")).hexdigest()


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
        write_json_files(self.fs, {self._path(DOCUMENTS_DIR, item.doc_id): item.as_json() for item in items})

    def documents(self, doc_ids: Iterable[str]) -> dict[str, LandedDocument]:
        """The landed copies of these documents (ids with no copy are left out)."""
        found: dict[str, LandedDocument] = {}
        paths = {doc_id: self._path(DOCUMENTS_DIR, doc_id) for doc_id in sorted(set(doc_ids))}
        copies = read_json_files(self.fs, paths.values())
        for doc_id, path in paths.items():
            if path not in copies:
                continue
            landed = LandedDocument.from_json(copies[path], path)
            if landed.doc_id != doc_id:
                raise DatasetError(f"{path}: holds document {landed.doc_id!r}, expected {doc_id!r}")
            found[doc_id] = landed
        return found

    def landed(self, doc_ids: Iterable[str]) -> set[str]:
        """Which of these documents have a landed copy (without reading the copies)."""
        ids = sorted(set(doc_ids))
        infos = self.fs.get_file_info([self._path(DOCUMENTS_DIR, d) for d in ids])
        return {d for d, info in zip(ids, infos, strict=True) if info.type == pafs.FileType.File}

    def landed_ids(self) -> list[str]:
        """Every document id with a landed copy."""
        ids = []
        for info in json_files(self.fs, f"{self.root}/{DOCUMENTS_DIR}"):
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
            for info in json_files(self.fs, f"{self.root}/{REQUESTS_DIR}")
        ]
        epoch = dt.datetime.min.replace(tzinfo=dt.UTC)
        return sorted(requests, key=lambda r: (r.requested_at or epoch, r.doc_id))

    def resolve_requests(self, doc_ids: Iterable[str]) -> int:
        """Remove the requests of these documents once a deletion has applied them."""
        return sum(delete_quietly(self.fs, self._path(REQUESTS_DIR, d)) for d in sorted(set(doc_ids)))
