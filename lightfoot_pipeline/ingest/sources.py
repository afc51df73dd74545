"""Sources: a folder or an object-store prefix of document files that a store follows.

Every file under the source is a document whose doc id is its path relative to the source
(``guides/setup.pdf``). Names starting with ``.`` (in any folder of the path) and names ending in
``.tmp`` or ``.part`` are not read: write a file under such a name and rename it when complete.

A file ``NAME.lightfoot.json`` beside ``NAME`` is its sidecar, not a document:
``{"title": "…", "retention_until": "2027-06-30"}``, both optional (the date as in a corpus).

What the store knows of each file is in the ``source_files`` table (an operational table, not
part of the fingerprint): its size, modification time and content hash, its sidecar's hash, the
chunking it was cut with, and whether it was indexed or failed and why. Size and modification
time unchanged means the file is unchanged without reading it; otherwise its content hash decides.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass

import polars as pl
import pyarrow.fs as pafs

from lightfoot_pipeline.ingest.chunking import chunk_blocks, document_text
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.doc_ids import doc_id_problem
from lightfoot_pipeline.ingest.files import FileReadError, read_file
from lightfoot_pipeline.ingest.retention import parse_retention_date
from lightfoot_pipeline.settings import ChunkSettings
from lightfoot_pipeline.store.tables import SOURCE_FILES

SIDECAR_SUFFIX = ".lightfoot.json"
_NOT_READY_SUFFIXES = (".tmp", ".part")
INDEXED, FAILED = "indexed", "failed"


@dataclass(frozen=True)
class SourceFile:
    """A document file at the source, as listed (nothing read yet)."""

    doc_id: str
    path: str  # within the source's filesystem
    size: int
    mtime_ns: int
    sidecar: str | None = None  # the sidecar's path, when there is one


@dataclass(frozen=True)
class FileOutcome:
    """What reading one file gave: its document, or the reason it failed; and its record."""

    record: dict  # a source_files row
    document: Document | None = None

    @property
    def failed(self) -> bool:
        return self.record["status"] == FAILED


def list_source(fs: pafs.FileSystem, root: str) -> list[SourceFile]:
    """The document files under ``root``, in doc-id order, each with its sidecar if any."""
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    files: dict[str, pafs.FileInfo] = {}
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        relative = info.path[len(root):].lstrip("/")
        if any(part.startswith(".") for part in relative.split("/")) or relative.endswith(_NOT_READY_SUFFIXES):
            continue
        files[relative] = info
    listed = []
    for relative, info in sorted(files.items()):
        if relative.endswith(SIDECAR_SUFFIX) and relative.removesuffix(SIDECAR_SUFFIX) in files:
            continue
        sidecar = files.get(relative + SIDECAR_SUFFIX)
        listed.append(SourceFile(relative, info.path, info.size or 0, info.mtime_ns or 0,
                                 sidecar.path if sidecar is not None else None))
    return listed


def sidecar_hash(fs: pafs.FileSystem, listed: SourceFile) -> tuple[str | None, bytes | None]:
    """The sidecar's hash and bytes (None, None without one)."""
    if listed.sidecar is None:
        return None, None
    with fs.open_input_stream(listed.sidecar) as stream:
        data = stream.read()
    return hashlib.sha256(data).hexdigest(), data


def read_source_file(
    fs: pafs.FileSystem, source: str, listed: SourceFile, chunking: ChunkSettings,
    sidecar: tuple[str | None, bytes | None], data: bytes | None = None,
) -> FileOutcome:
    """Read, parse and chunk one file into a document, or record why it cannot be indexed."""
    record = {"doc_id": listed.doc_id, "source": source, "size": listed.size, "mtime_ns": listed.mtime_ns,
              "sha256": None, "sidecar_sha256": sidecar[0], "chunking": chunking.label(), "media_type": None,
              "status": FAILED, "reason": None, "n_passages": 0}
    problem = doc_id_problem(listed.doc_id)
    if problem:
        return FileOutcome({**record, "reason": f"its path cannot be a doc id: {problem}"})
    if listed.size > chunking.max_file_bytes:
        return FileOutcome({**record, "reason": f"{listed.size:,} bytes, over the limit of "
                                                f"{chunking.max_file_bytes:,} per file"})
    if data is None:
        with fs.open_input_stream(listed.path) as stream:
            data = stream.read(chunking.max_file_bytes + 1)
    record["sha256"] = hashlib.sha256(data).hexdigest()
    try:
        title, retention = _sidecar_fields(sidecar[1])
        parsed = read_file(data, listed.doc_id)
    except FileReadError as err:
        return FileOutcome({**record, "reason": str(err)})
    record["media_type"] = parsed.media_type
    chunks = chunk_blocks(listed.doc_id, parsed.blocks, chunking)
    if len(chunks) > chunking.max_passages:
        return FileOutcome({**record, "n_passages": len(chunks),
                            "reason": f"{len(chunks):,} passages, over the limit of {chunking.max_passages:,} "
                                      "per document"})
    document = Document(
        doc_id=listed.doc_id, title=title or parsed.title or listed.doc_id.rsplit("/", 1)[-1],
        text=document_text(parsed.blocks), retention_until=retention, source=f"{source}/{listed.doc_id}",
        chunks=tuple(chunks),
    )
    return FileOutcome({**record, "status": INDEXED, "n_passages": len(chunks)}, document)


def _sidecar_fields(data: bytes | None) -> tuple[str | None, dt.date | None]:
    if data is None:
        return None, None
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise FileReadError(f"its sidecar ({SIDECAR_SUFFIX}) is not JSON: {err}") from None
    if not isinstance(value, dict) or set(value) - {"title", "retention_until"}:
        raise FileReadError(f"its sidecar ({SIDECAR_SUFFIX}) must be an object with only title and retention_until")
    title = value.get("title")
    if title is not None and not isinstance(title, str):
        raise FileReadError(f"its sidecar's title must be a string, got {title!r}")
    retention = value.get("retention_until")
    try:
        date = parse_retention_date(retention) if retention is not None else None
    except ValueError as err:
        raise FileReadError(f"its sidecar's retention_until: {err}") from None
    return title, date


def records_frame(records: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(records, schema=pl.from_arrow(SOURCE_FILES.schema.empty_table()).schema)
