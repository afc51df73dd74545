"""Inboxes: a folder (or object-store prefix) where people drop documents or erasure requests.

A **document inbox** takes

- ``NAME.jsonl``: one document per line, ``{doc_id, title, text, retention_until?, source?, readers?}``,
  optionally with the recorded extraction of the document under ``extraction``
  (``{entities, facts}``, as in a dataset's extractions.jsonl);
- ``NAME.json``: one such document, or a list of them;
- ``NAME/``: a dataset directory (``corpus.jsonl`` and optionally ``extractions.jsonl``, the
  layout ``lightfoot ingest --dataset`` reads). A directory is ready once it has corpus.jsonl.

An **erasure inbox** takes

- ``NAME.txt``: one document id per line (blank lines and ``#`` comments skipped);
- ``NAME.json`` / ``NAME.jsonl``: ``{doc_id | doc_ids, reason?, erase?}`` objects.

An erasure request erases history too unless it says ``"erase": false``.

Names starting with ``.`` or ``_`` and names ending in ``.tmp`` or ``.part`` are not read: write
a drop under such a name and rename it when it is complete. A drop that cannot be read moves to
``rejected/`` beside a ``NAME.reason.txt`` that says why; nothing of it is ingested.

A drop that is taken leaves a receipt in the landing area (receipts.py), identified by the drop
(``source``) and what it holds, so that a drop is never taken twice and its run can be found and
asked again until one has succeeded. :func:`take_documents` and :func:`take_requests` drain an
inbox in that order: what a drop holds is landed, then its pending receipt recorded, then the drop
removed. A crash between two steps leaves the drop in the inbox, and the next look lands it again
(landing is idempotent) or, once its receipt exists, only removes it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.fs as pafs

from lightfoot_pipeline.ingest.dataset import (
    CORPUS_FILE,
    EXTRACTIONS_FILE,
    DatasetError,
    parse_document,
    parse_json_lines,
    parse_json_value,
    parse_recorded_extractions,
    text_lines,
)
from lightfoot_pipeline.ingest.doc_ids import doc_id_problem
from lightfoot_pipeline.ingest.landing import DeletionRequest, LandedDocument, Landing, utc_now
from lightfoot_pipeline.ingest.receipts import ERASURE, INGESTION, Receipt, Receipts
from lightfoot_pipeline.settings import document_inbox_uri, erasure_inbox_uri
from lightfoot_pipeline.store.filesystem import open_filesystem
from lightfoot_pipeline.store.store import Store

REJECTED_DIR = "rejected"
_NOT_READY_SUFFIXES = (".tmp", ".part")


DEFAULT_DOCUMENT_INBOX = ".lightfoot/inbox/documents"
DEFAULT_ERASURE_INBOX = ".lightfoot/inbox/erasure"


def document_inbox(store: Store, uri: str | None = None) -> Inbox:
    """The document inbox: ``uri``, else $LIGHTFOOT_INBOX, else beside the store (:func:`inbox_for`)."""
    return inbox_for(store, uri or document_inbox_uri(), DEFAULT_DOCUMENT_INBOX, "documents")


def erasure_inbox(store: Store, uri: str | None = None) -> Inbox:
    """The erasure-request inbox: ``uri``, else $LIGHTFOOT_ERASURE_INBOX, else beside the store."""
    return inbox_for(store, uri or erasure_inbox_uri(), DEFAULT_ERASURE_INBOX, "erasure")


def inbox_for(store: Store, uri: str | None, local_default: str, remote_leaf: str) -> Inbox:
    """The inbox at ``uri``, or where a store's inbox goes by default: ``local_default`` (relative
    to the working folder) for a local store, ``<store>/inbox/<remote_leaf>`` for a remote one. A
    local path is made absolute; an s3:// one is read with the store's storage options."""
    if not uri:
        uri = store.path("inbox", remote_leaf) if store.is_remote else local_default
    if "://" not in uri:
        uri = str(Path(uri).expanduser().resolve())
    return Inbox(uri, store.storage_options if uri.startswith("s3://") else None)


@dataclass(frozen=True)
class InboxItem:
    """One drop in an inbox."""

    path: str
    name: str
    is_dir: bool
    size: int
    mtime_ns: int

    @property
    def signature(self) -> str:
        """Changes when the drop is replaced or rewritten."""
        return f"{self.name}:{self.size}:{self.mtime_ns}"


class Inbox:
    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = uri.rstrip("/")
        self.fs, self.root = open_filesystem(self.uri, storage_options)

    def __repr__(self) -> str:
        return f"Inbox({self.uri!r})"

    # -- listing ---------------------------------------------------------------------------

    def items(self) -> list[InboxItem]:
        """Drops ready to be read, in name order."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, recursive=False, allow_not_found=True))
        items = []
        for info in sorted(infos, key=lambda i: i.base_name):
            name = info.base_name
            if name.startswith((".", "_")) or name.endswith(_NOT_READY_SUFFIXES) or name == REJECTED_DIR:
                continue
            if info.type == pafs.FileType.Directory:
                corpus = self.fs.get_file_info(f"{info.path}/{CORPUS_FILE}")
                if corpus.type != pafs.FileType.File:
                    continue  # still being written
                items.append(InboxItem(info.path, name, True, corpus.size or 0, corpus.mtime_ns or 0))
            elif info.type == pafs.FileType.File:
                items.append(InboxItem(info.path, name, False, info.size or 0, info.mtime_ns or 0))
        return items

    # -- reading ---------------------------------------------------------------------------

    def _lines(self, path: str) -> Iterator[tuple[int, object]]:
        with self.fs.open_input_stream(path) as stream:
            data = stream.read()
        yield from parse_json_lines(data.split(b"\n"), path)

    def _whole(self, path: str) -> object:
        with self.fs.open_input_stream(path) as stream:
            return parse_json_value(stream.read(), path)

    def read_documents(self, item: InboxItem) -> list[LandedDocument]:
        """The documents of a drop, or a DatasetError that says what is wrong with it."""
        origin = f"{self.uri}/{item.name}"
        landed_at = utc_now()
        if item.is_dir:
            rows = list(self._lines(f"{item.path}/{CORPUS_FILE}"))
            where = f"{item.path}/{CORPUS_FILE}"
            recorded = self._recorded_extractions(f"{item.path}/{EXTRACTIONS_FILE}")
        elif item.name.endswith(".jsonl"):
            rows = list(self._lines(item.path))
            where = item.path
            recorded = {}
        elif item.name.endswith(".json"):
            whole = self._whole(item.path)
            rows = list(enumerate(whole if isinstance(whole, list) else [whole], start=1))
            where = item.path
            recorded = {}
        else:
            raise DatasetError(f"{item.path}: not a .jsonl or .json document file, nor a dataset directory")
        documents: list[LandedDocument] = []
        seen: dict[str, int] = {}
        for number, row in rows:
            document = parse_document(row, where=f"{where}:{number}")
            if document.doc_id in seen:
                raise DatasetError(f"{where}:{number}: doc_id {document.doc_id!r} already on line {seen[document.doc_id]}")
            seen[document.doc_id] = number
            extraction = row.get("extraction") if isinstance(row, dict) else None
            if extraction is not None and not isinstance(extraction, (dict, list)):
                raise DatasetError(f"{where}:{number}: extraction must be an object or a list of objects")
            extraction = extraction if extraction is not None else recorded.get(document.doc_id)
            documents.append(LandedDocument(document, extraction, landed_at, origin))
        if not documents:
            raise DatasetError(f"{where}: no documents")
        return documents

    def _recorded_extractions(self, path: str) -> dict[str, dict]:
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return {}
        return parse_recorded_extractions(self._lines(path), path)

    def read_requests(self, item: InboxItem) -> list[DeletionRequest]:
        """The deletion requests of a drop in an erasure inbox."""
        origin = f"{self.uri}/{item.name}"
        now = utc_now()
        if item.is_dir:
            raise DatasetError(f"{item.path}: a folder; erasure requests are .txt, .json or .jsonl files")
        if item.name.endswith(".txt"):
            with self.fs.open_input_stream(item.path) as stream:
                data = stream.read()
            requests = []
            for number, line in text_lines(data, item.path):
                doc_id = line.strip(" \t")
                if not doc_id or doc_id.startswith("#"):
                    continue
                if problem := doc_id_problem(doc_id):
                    raise DatasetError(f"{item.path}:{number}: {problem}")
                requests.append(DeletionRequest(doc_id, f"erasure request {item.name}", True, now, origin))
        elif item.name.endswith((".json", ".jsonl")):
            if item.name.endswith(".jsonl"):
                objects = list(self._lines(item.path))
            else:
                whole = self._whole(item.path)
                objects = list(enumerate(whole if isinstance(whole, list) else [whole], start=1))
            requests = []
            for number, row in objects:
                requests.extend(_requests_from_object(row, f"{item.path}:{number}", item.name, now, origin))
        else:
            raise DatasetError(f"{item.path}: not a .txt, .json or .jsonl erasure request")
        if not requests:
            raise DatasetError(f"{item.path}: names no document")
        return requests

    # -- receipts --------------------------------------------------------------------------

    def source(self, item: InboxItem) -> dict:
        """What identifies a drop: this inbox, the drop's name, size and modification time. A drop
        rewritten or dropped again under the same name is a new drop; the same file seen again
        (one that could not be removed) is not."""
        return {"inbox": self.uri, "name": item.name, "size": item.size, "mtime_ns": item.mtime_ns}

    def deletion_receipt(self, item: InboxItem, requests: list[DeletionRequest]) -> Receipt:
        """The receipt of an erasure-request drop (see receipts.py)."""
        return Receipt.for_deletions(self.source(item), requests, f"{self.uri}/{item.name}")

    def document_receipt(self, item: InboxItem, documents: list[LandedDocument]) -> Receipt:
        """The receipt of a document drop (see receipts.py)."""
        return Receipt.for_documents(self.source(item), [d.doc_id for d in documents], f"{self.uri}/{item.name}")

    # -- after reading ---------------------------------------------------------------------

    def remove(self, item: InboxItem) -> None:
        """Delete a drop once what it holds is safely landed."""
        if item.is_dir:
            self.fs.delete_dir(item.path)
        else:
            self.fs.delete_file(item.path)

    def reject(self, item: InboxItem, reason: str) -> str:
        """Move a drop to rejected/ with a file saying why; returns where it went."""
        folder = f"{self.root}/{REJECTED_DIR}"
        self.fs.create_dir(folder, recursive=True)
        stamp = utc_now().strftime("%Y%m%dT%H%M%S%fZ")
        target = f"{folder}/{stamp}-{item.name}"
        if item.is_dir:
            for info in self.fs.get_file_info(pafs.FileSelector(item.path, recursive=True)):
                if info.type == pafs.FileType.File:
                    relative = info.path[len(item.path) + 1 :]
                    self.fs.create_dir(f"{target}/{relative}".rsplit("/", 1)[0], recursive=True)
                    self.fs.move(info.path, f"{target}/{relative}")
            self.fs.delete_dir(item.path)
        else:
            self.fs.move(item.path, target)
        with self.fs.open_output_stream(f"{target}.reason.txt") as stream:
            stream.write((reason.rstrip() + "\n").encode("utf-8"))
        return target


def _requests_from_object(row: object, where: str, name: str, now, origin: str) -> list[DeletionRequest]:
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected an object with doc_id or doc_ids")
    ids = row.get("doc_ids") if "doc_ids" in row else [row.get("doc_id")]
    if not isinstance(ids, list) or not ids:
        raise DatasetError(f"{where}: doc_id must be a non-empty string (or doc_ids a non-empty list of them)")
    if problem := next(filter(None, map(doc_id_problem, ids)), None):
        raise DatasetError(f"{where}: {problem}")
    erase = row.get("erase", True)
    if not isinstance(erase, bool):
        raise DatasetError(f"{where}: erase must be true or false")
    reason = row.get("reason") or f"erasure request {name}"
    if not isinstance(reason, str):
        raise DatasetError(f"{where}: reason must be a string")
    return [DeletionRequest(d, reason, erase, now, origin) for d in ids]


# -- taking drops -------------------------------------------------------------------------------


@dataclass
class Intake:
    """What one look at an inbox did: the receipts of the drops it took, and the drops it rejected
    (name: why)."""

    receipts: list[Receipt] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    where: str = ""  # the inbox looked at
    kind: str = INGESTION  # what its drops hold: documents (INGESTION) or erasure requests (ERASURE)

    @property
    def doc_ids(self) -> list[str]:
        return sorted({d for r in self.receipts for d in r.doc_ids})

    def news(self) -> list[str]:
        """What the look did, as a sensor says it: counts and the inbox's location, never a drop's
        values (the reasons of rejected drops lie beside them, in the inbox's rejected folder)."""
        files = "drops" if self.kind == INGESTION else "request files"
        if not self.receipts:
            said = [f"nothing new in {self.where}" if self.kind == INGESTION else f"no new request file in {self.where}"]
        elif self.kind == INGESTION:
            said = [f"landed {len(self.doc_ids)} documents from {len(self.receipts)} drops"]
        else:
            said = [f"took {len(self.receipts)} request files"]
        if self.rejected:
            said.append(f"rejected {len(self.rejected)} {files} (their reasons are in the inbox's rejected folder)")
        return said


@dataclass(frozen=True)
class _Drops:
    """How one kind of inbox is drained: what a drop is read as, kept as, and called in the log."""

    kind: str  # the receipt kind
    read: Callable[[Inbox, InboxItem], Sequence]
    receipt: Callable[[Inbox, InboxItem, Sequence], Receipt]
    keep: Callable[[Landing, Sequence], None]
    noun: str  # a drop, in the log: "drop", "request"
    holds: str  # what it holds: "documents", "deletion requests"
    kept: str  # what keeping it is: "landed", "recorded"
    again: str  # what a drop known before is not: "landed again", "applied again"


_DOCUMENT_DROPS = _Drops(
    INGESTION, Inbox.read_documents, Inbox.document_receipt, Landing.put_documents,
    "drop", "documents", "landed", "landed again",
)
_REQUEST_DROPS = _Drops(
    ERASURE, Inbox.read_requests, Inbox.deletion_receipt, Landing.request_deletions,
    "request", "deletion requests", "recorded", "applied again",
)


_REJECTION_KINDS = {DatasetError: "not a readable dataset", UnicodeDecodeError: "not valid UTF-8",
                    OSError: "could not be read"}


def rejection_id(item: InboxItem) -> str:
    """The digest a rejected drop is known by in logs: of its name, size and modification time."""
    return hashlib.sha256(item.signature.encode("utf-8")).hexdigest()[:16]


def take_documents(inbox: Inbox, landing: Landing, log: logging.Logger | logging.LoggerAdapter) -> Intake:
    """Land every ready drop of a document inbox — its documents, then a pending receipt — and
    remove it. A drop whose receipt already exists (one that could not be removed before) is not
    landed again. ``log`` takes ``info``, ``warning`` and ``error`` (a logger, Dagster's
    ``context.log``)."""
    return _take(inbox, landing, log, _DOCUMENT_DROPS)


def take_requests(inbox: Inbox, landing: Landing, log: logging.Logger | logging.LoggerAdapter) -> Intake:
    """Record every ready request file of an erasure inbox — its deletion requests in the landing
    area, then a pending receipt — and remove it. A file whose receipt already exists (one that
    could not be removed before) is not applied again."""
    return _take(inbox, landing, log, _REQUEST_DROPS)


def _take(inbox: Inbox, landing: Landing, log, drops: _Drops) -> Intake:
    intake = Intake(where=inbox.uri, kind=drops.kind)
    receipts = Receipts(landing.store)
    for item in inbox.items():
        try:
            contents = drops.read(inbox, item)
        except (DatasetError, UnicodeDecodeError, OSError) as err:
            reason = str(err)
            intake.rejected[item.name] = reason
            # The log keeps what it is given (an orchestrator's, for good): the kind of reason and
            # the drop's digest, never the reason, which quotes the drop's values (a date, an id, a
            # group). The reason lies beside the drop in rejected/, under the same digest.
            mark = rejection_id(item)
            said = f"rejected {drops.noun} {mark} ({_REJECTION_KINDS.get(type(err), 'could not be read')})"
            try:
                inbox.reject(item, f"{drops.noun} {mark}: {reason}")
                log.warning(f"{said}; it and its reason are in the inbox's {REJECTED_DIR}/ folder")
            except OSError as move_error:
                log.error(f"{said}; could not move it aside ({type(move_error).__name__})")
            continue
        receipt = drops.receipt(inbox, item, contents)
        known = receipts.receipt(drops.kind, receipt.receipt_id)
        if known is None:
            drops.keep(landing, contents)  # before the receipt: a receipt never names what was not kept
            receipts.record(receipt)
            intake.receipts.append(receipt)
            log.info(f"{drops.kept} {len(contents)} {drops.holds} from {item.name} ({drops.noun} {receipt.receipt_id})")
        else:
            log.info(f"{item.name} was {drops.kept} before ({drops.noun} {known.receipt_id}, "
                     f"{'done: ' + known.outcome if known.is_done else 'pending'}); not {drops.again}")
        try:
            inbox.remove(item)
        except OSError as err:
            log.warning(f"{drops.kept} {item.name} but could not remove it from the inbox ({err}); "
                        f"it will not be {drops.again}")
    return intake
