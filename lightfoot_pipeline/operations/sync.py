"""Sync: mirror a folder or an object-store prefix of document files into the store.

New files are read and ingested, changed files replace their documents (only passages whose
text changed reach the model; unchanged passages keep their chunk ids and extractions, and one
that only moved, to another page or place, is answered by the extraction cache), and files no longer at the source are deleted, exactly,
with no model call (with ``erase``, their text is erased from history as ``delete --erase``
does). A file that cannot be read (encrypted or corrupt, binary, empty, too large, too many
passages) is recorded as failed with its reason and affects nothing else; if it was indexed
before, its old version is deleted, since the source no longer holds a readable one.

Size and modification time decide which files to read, their content hash whether they
changed (see :mod:`lightfoot_pipeline.ingest.sources`). Files are read and ingested in batches,
one commit each, so a sync that stops midway keeps every finished batch and the next sync goes
on from there. After any sequence of syncs, the store equals a fresh sync of the source as it is.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs

from lightfoot_pipeline import operations
from lightfoot_pipeline.index.documents import tombstone_documents
from lightfoot_pipeline.ingest.extraction.outcome import Extractor, ProgressCallback
from lightfoot_pipeline.ingest.sources import (
    FAILED,
    SOURCE_FILES,
    FileOutcome,
    SourceFile,
    list_source,
    read_source_file,
    records_frame,
    sidecar_hash,
)
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.operations.erase import erase_history
from lightfoot_pipeline.settings import ChunkSettings, IndexSettings, SettingsError
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.filesystem import open_filesystem
from lightfoot_pipeline.store.store import Store, StoreError
from lightfoot_pipeline.store.tables import with_buckets
from lightfoot_pipeline.store.transaction import Transaction
from lightfoot_pipeline.store.vectors import EmbedProgress

BATCH_FILES = 200


@dataclass
class SyncReport:
    """What a sync did. Every listed file is ``new``, ``changed`` or ``unchanged`` (a file whose
    content is the same after a touch is unchanged); ``failed`` lists every file of the source
    that is not indexed now, with its reason, ``read_failed`` those of them read in this sync."""

    source: str = ""
    files: int = 0
    new: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)
    read_failed: int = 0
    passages: int = 0  # of the documents read in this sync
    extracted: int = 0
    already_extracted: int = 0
    from_cache: int = 0
    extraction_failed: int = 0
    model_calls: int = 0
    retries: int = 0
    cost_usd: float = 0.0
    commits: list[int] = field(default_factory=list)
    read_seconds: float = 0.0
    seconds: float = 0.0
    erase: dict | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def source_root(source: str) -> str:
    """A source as recorded: an object-store URI without its trailing slash, or an absolute path."""
    if "://" in source and not source.startswith("file://"):
        return source.rstrip("/")
    return str(Path(source.removeprefix("file://")).expanduser().resolve())


def sync(
    store: Store,
    source: str,
    extractor: Extractor,
    embedder: Embedder,
    settings: IndexSettings | None = None,
    chunking: ChunkSettings | None = None,
    *,
    erase: bool = False,
    batch_files: int = BATCH_FILES,
    progress: ProgressCallback | None = None,
    embed_progress: EmbedProgress | None = None,
) -> SyncReport:
    """Mirror ``source`` (a folder or an ``s3://`` prefix) into ``store``; see the module docstring.

    ``progress`` hears how extraction proceeds, ``embed_progress`` how embedding new names does."""
    settings = settings or IndexSettings()
    chunking = chunking or ChunkSettings()
    if not isinstance(batch_files, int) or batch_files < 1:
        raise SettingsError(f"sync: files per commit must be a whole number from 1, got {batch_files!r}")
    started = time.perf_counter()
    look = look_at_source(store, source, chunking)
    fs, root, records = look.fs, look.root, look.records
    report = SyncReport(source=root, files=len(look.files), unchanged=len(look.unchanged))
    report.failed = [{"doc_id": d, "reason": records[d]["reason"]} for d in look.unchanged
                     if records[d]["status"] == FAILED]
    live = live_doc_ids(store)
    if look.gone:
        report.removed = [d for d in look.gone if d in live]
        deleted = operations.delete(store, report.removed, settings, erase=erase, reason=f"removed from {root}",
                                  stage=lambda tx: _put_records(tx, [], look.gone))
        report.commits.append(deleted.seq)
    to_read = look.to_read

    failed_live: list[str] = []
    for first in range(0, len(to_read), batch_files):
        batch = to_read[first:first + batch_files]
        read_started = time.perf_counter()
        outcomes = [_read(fs, root, f, signature, chunking, records.get(f.doc_id)) for f, signature in batch]
        report.read_seconds += time.perf_counter() - read_started
        documents = []
        for (f, _), outcome in zip(batch, outcomes, strict=True):
            known = records.get(f.doc_id)
            if outcome is None:  # touched, the same content
                report.unchanged += 1
                if known["status"] == FAILED:
                    report.failed.append({"doc_id": f.doc_id, "reason": known["reason"]})
                continue
            if outcome.failed:
                report.read_failed += 1
                report.failed.append({"doc_id": f.doc_id, "reason": outcome.record["reason"]})
            else:
                documents.append(outcome.document)
            (report.new if known is None else report.changed).append(f.doc_id)
        unreadable = [o.record["doc_id"] for o in outcomes if o is not None and o.failed and o.record["doc_id"] in live]
        failed_live.extend(unreadable)
        rows = [o.record if o is not None else _touched(records[f.doc_id], f) for (f, _), o in zip(batch, outcomes, strict=True)]

        def stage(tx: Transaction, rows=rows, unreadable=unreadable) -> None:
            if unreadable:
                tombstone_documents(tx, unreadable, reason=f"no longer readable at {root}", erase=erase)
            _put_records(tx, rows, [])

        ingested = operations.ingest(store, documents, extractor, embedder, settings, progress=progress,
                                   operation="sync", stage=stage, embed_progress=embed_progress)
        report.commits.append(ingested.seq)
        report.passages += ingested.passages
        report.extracted += ingested.extracted
        report.already_extracted += ingested.already_extracted
        report.from_cache += ingested.from_cache
        report.extraction_failed += ingested.failed
        report.model_calls += ingested.model_calls
        report.retries += ingested.retries
        report.cost_usd += ingested.cost_usd
    report.failed.sort(key=lambda f: f["doc_id"])
    if erase and (report.removed or failed_live):
        report.erase = erase_history(store, [*report.removed, *failed_live]).as_dict()
    report.seconds = time.perf_counter() - started
    return report


@dataclass
class SourceLook:
    """A source as listed, against what the store records of it: which files to read (new, or
    with another size, modification time, sidecar or chunking), which are as recorded, which are gone."""

    root: str
    fs: pafs.FileSystem
    files: list[SourceFile]
    records: dict[str, dict]  # source_files rows of this source, by doc id
    to_read: list[tuple[SourceFile, tuple[str | None, bytes | None]]]  # with each one's sidecar
    unchanged: list[str]
    gone: list[str]

    @property
    def in_sync(self) -> bool:
        return not self.to_read and not self.gone

    def signature(self) -> str:
        """A hash of what is to do: the same pending changes give the same signature."""
        digest = hashlib.sha256()
        for f, sidecar in self.to_read:
            digest.update(f"{f.doc_id}\x00{f.size}\x00{f.mtime_ns}\x00{sidecar[0]}\n".encode())
        for doc_id in self.gone:
            digest.update(f"-{doc_id}\n".encode())
        return digest.hexdigest()[:24]


def look_at_source(store: Store, source: str, chunking: ChunkSettings | None = None) -> SourceLook:
    """List ``source`` and compare it with the store's records; reads no file but sidecars."""
    chunking = chunking or ChunkSettings()
    root = source_root(source)
    fs, path = open_filesystem(root, store.storage_options or None)
    try:
        files = list_source(fs, path)
        exists = bool(files) or fs.get_file_info(path).type == pafs.FileType.Directory
    except OSError as err:
        raise StoreError(f"cannot list the source {root}: {err}",
                         hint="name a folder or s3:// prefix that exists and can be read") from err
    if not exists:
        raise StoreError(f"the source {root} is not a folder or prefix that exists",
                         hint="name a folder or s3:// prefix that exists and can be read")
    records = {r["doc_id"]: r for r in store.read(SOURCE_FILES.name).filter(pl.col("source") == root)
               .iter_rows(named=True)}
    look = SourceLook(root, fs, files, records, [], [], [])
    listed_ids = {f.doc_id for f in files}
    look.gone = sorted(d for d in records if d not in listed_ids)
    for f in files:
        known = records.get(f.doc_id)
        sidecar = sidecar_hash(fs, f)
        if known is not None and _same_listing(known, f, sidecar[0], chunking):
            look.unchanged.append(f.doc_id)
        else:
            look.to_read.append((f, sidecar))
    return look


def _same_listing(known: dict, listed: SourceFile, sidecar: str | None, chunking: ChunkSettings) -> bool:
    return (known["size"], known["mtime_ns"], known["sidecar_sha256"], known["chunking"]) == (
        listed.size, listed.mtime_ns, sidecar, chunking.label())


def _read(fs, root: str, listed: SourceFile, signature, chunking: ChunkSettings, known: dict | None) -> FileOutcome | None:
    """The file read, or None when its content is what the store holds (only its listing changed)."""
    data = None
    if known is not None and known["sha256"] and listed.size <= chunking.max_file_bytes:
        with fs.open_input_stream(listed.path) as stream:
            data = stream.read(chunking.max_file_bytes + 1)
        same = (hashlib.sha256(data).hexdigest(), signature[0], chunking.label()) == (
            known["sha256"], known["sidecar_sha256"], known["chunking"])
        if same:
            return None
    return read_source_file(fs, root, listed, chunking, signature, data)


def _touched(known: dict, listed: SourceFile) -> dict:
    return {**known, "size": listed.size, "mtime_ns": listed.mtime_ns}


def _put_records(tx: Transaction, rows: Sequence[dict], drop: Sequence[str]) -> None:
    """Stage the records of files (replacing earlier ones) and drop those of ``drop``."""
    ids = [r["doc_id"] for r in rows] + list(drop)
    table = tx.table(SOURCE_FILES.name)
    frame = records_frame(list(rows))
    tx.update(SOURCE_FILES.name, remove=table.get_column("doc_id").is_in(ids),
              add=with_buckets(frame, SOURCE_FILES, tx.n_buckets) if frame.height else None)
