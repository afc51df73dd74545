"""Sources: a folder or an object-store prefix of document files that a store follows.

Every file under the source is a document whose doc id is the source's name and the file's path
within it, ``NAME:PATH`` (``handbook:guides/setup.pdf``; see :func:`file_doc_id` for how a path
that a doc id cannot hold is escaped), so two sources synced into one store never share a doc id.
Names starting with ``.`` (in any folder of the path) and names ending in ``.tmp`` or ``.part``
are not read: write a file under such a name and rename it when complete.

A local folder is walked with :func:`os.scandir`, names as the operating system gives them
(:func:`os.fsdecode`). A symbolic link is followed only when its target lies inside the source,
and then once: every real folder is walked once and every real file gets one doc id (its own
path when that is listed, else the first link to it), so link cycles end. A link out of the
source, or one that leads nowhere, is listed as a failed file with its reason and never read.
Object stores have no links and are listed by pyarrow.

A file ``NAME.lightfoot.json`` beside ``NAME`` is its sidecar, not a document:
``{"title": "…", "retention_until": "2027-06-30", "readers": ["legal"]}``, each optional (the date
and the readers as in a corpus: a list of group names or one comma-separated string). Readers fail
closed: a sidecar that cannot be used whole (a symbolic link, in the source or out of it, or to
nothing; unreadable; over :data:`MAX_SIDECAR_BYTES`; not JSON; another shape; a name that is not a
group name) fails its file with the reason, and never lets the file take the settings' or the
default readers instead. Such a failure leaves a document stored for the file before as it is,
readers and all (:attr:`FileOutcome.keeps_stored`): it is the readers that are unknown, not the text.

A file ``lightfoot.json`` at the source's root holds the source's settings, and is not a document
either: ``{"readers": {"legal/": ["legal"], "": ["public"]}}`` gives the readers of the files whose
path within the source starts with each prefix (a plain string prefix: ``"legal"`` also covers
``legalese.txt``), the longest matching prefix winning. A file's sidecar naming readers overrides
it; a file that neither names gets the default (``$LIGHTFOOT_DEFAULT_READERS``). The settings file
is bounded (:data:`MAX_SETTINGS_BYTES`, :data:`MAX_READER_PREFIXES`) and checked whole: one that
cannot be used (not JSON, another key, a group that is not a group name, a symbolic link in or out
of the source or to nothing, unreadable) makes every file of the source fail with that reason, so
no file is indexed with readers it was not meant to have, and their stored documents stay as they
are.

What the store knows of each file is in the ``source_files`` table (an operational table, not
part of the fingerprint): its source, size, modification time and content hash, its sidecar's
hash (folded with what the settings file says of the file, when it says anything: see
:func:`sidecar_hash`), the chunking it was cut with, and whether it was indexed or failed and why.
Size, modification time and sidecar hash unchanged means the file is unchanged without reading
it; otherwise its content hash decides, and a change of its readers alone is picked up as one.

Reading is bounded: a file over ``max_file_bytes`` is refused unread, and so is a text, Markdown
or HTML file larger than its passages could be (:func:`text_bytes_limit`, from the listing's
size); a reader stops as soon as the file has more text than ``max_passages`` passages can hold,
when a Word file's XML inflates past ``max_file_bytes``, or after :data:`READ_SECONDS`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import heapq
import io
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple

import polars as pl
import pyarrow.fs as pafs

from lightfoot_pipeline.ingest.chunking import chunk_blocks, document_text
from lightfoot_pipeline.ingest.dataset import DatasetError, Document, parse_json_value
from lightfoot_pipeline.ingest.doc_ids import doc_id_problem, file_doc_id
from lightfoot_pipeline.ingest.files import FileReadError, read_file
from lightfoot_pipeline.ingest.files.blocks import ReadLimits
from lightfoot_pipeline.ingest.files.detect import sniff
from lightfoot_pipeline.ingest.readers import NOBODY, PUBLIC, ReadersError, default_groups, parse_groups, readers_text
from lightfoot_pipeline.ingest.retention import parse_retention_date
from lightfoot_pipeline.settings import ChunkSettings
from lightfoot_pipeline.store.tables import SOURCE_FILES

SIDECAR_SUFFIX = ".lightfoot.json"
SETTINGS_FILE = "lightfoot.json"  # at the source's root: its settings, not a document
MAX_SETTINGS_BYTES = 64 * 1024
MAX_SIDECAR_BYTES = 64 * 1024  # a title, a date and at most 64 group names fit many times over
MAX_READER_PREFIXES = 256
MAX_PREFIX_CHARS = 1024
_NOT_READY_SUFFIXES = (".tmp", ".part")
INDEXED, FAILED = "indexed", "failed"
READ_SECONDS = 120.0  # the most one file may take to read, parse and cut into passages
# A text, Markdown or HTML file larger than this many bytes per token its passages may hold
# (max_passages × tokens) is refused unread: English runs 5 to 6 bytes a token, markup more.
TEXT_BYTES_PER_TOKEN = 16
HTML_BYTES_PER_TOKEN = 64
_HEAD_BYTES = 64 * 1024  # what is read first to tell a file's type


@dataclass(frozen=True)
class SourceFile:
    """A document file at the source, as listed (nothing read yet)."""

    doc_id: str
    path: str  # within the source's filesystem (a local file's real path)
    size: int
    mtime_ns: int
    sidecar: str | None = None  # the sidecar's path, when there is one
    relative: str = ""  # the path within the source, as listed
    problem: str | None = None  # why it is not read at all (a link out of the source, or to nothing)
    readers: tuple[str, ...] | None = None  # the readers the source's settings file gives it (None: none)
    # What the settings file says of it, as its sidecar hash counts it (sidecar_hash): None for
    # nothing, ``readers:GROUPS`` or ``refused:DIGEST`` (a settings file that cannot be used), or
    # ``default:nobody`` when it says nothing and the default readers are nobody.
    source_defaults: str | None = None
    # Why its readers cannot be known from the listing: the settings file or its sidecar cannot be
    # used (the full reason). Its file fails, and a document stored for it is kept as it is.
    readers_problem: str | None = None


class Sidecar(NamedTuple):
    """A listed file's sidecar as read for its listing: what ``source_files`` records as its
    sidecar hash (:func:`sidecar_hash`), the sidecar's bytes, and why it cannot be used, if so."""

    digest: str | None = None
    data: bytes | None = None
    problem: str | None = None


@dataclass(frozen=True)
class SourceSettings:
    """What a source's settings file (``lightfoot.json``) says: reader groups by path prefix, the
    longest prefix first, or the reason it cannot be used."""

    readers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    problem: str | None = None
    digest: str = ""  # of its bytes (or of why it could not be read): what a refusal is known by

    def readers_of(self, relative: str) -> tuple[str, ...] | None:
        """The groups of the longest prefix of ``relative`` that the settings name, else None."""
        for prefix, groups in self.readers:
            if relative.startswith(prefix):
                return groups
        return None

    def defaults_of(self, relative: str) -> str | None:
        """What the settings say of the file at ``relative``, as its listing records it."""
        if self.problem is not None:
            return f"refused:{self.digest}"
        groups = self.readers_of(relative)
        return None if groups is None else f"readers:{readers_text(groups)}"


@dataclass(frozen=True)
class FileOutcome:
    """What reading one file gave: its document, or the reason it failed; and its record."""

    record: dict  # a source_files row
    document: Document | None = None
    # A failure of its readers (a sidecar or the settings file cannot be used), not of its text: a
    # document stored for the file before keeps its text and its readers, and is not deleted.
    keeps_stored: bool = False

    @property
    def failed(self) -> bool:
        return self.record["status"] == FAILED


@dataclass(frozen=True)
class _Entry:
    relative: str
    path: str
    size: int
    mtime_ns: int
    problem: str | None = None
    link: bool = False  # reached through a symbolic link
    repeat: bool = False  # a link to a file listed already: not a document of its own


def shown_path(relative: str) -> str:
    """A listed path as a person reads it (a title, a document's source): as the file system names
    it, with a byte that is not UTF-8 shown as U+FFFD (the doc id keeps it, escaped, exactly)."""
    return relative.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def list_source(fs: pafs.FileSystem, root: str, name: str) -> list[SourceFile]:
    """The document files under ``root`` of the source named ``name``, in doc-id order, each with
    its sidecar if any."""
    entries = _walk_local(root) if isinstance(fs, pafs.LocalFileSystem) else _list_objects(fs, root)
    files = {e.relative: e for e in entries if not _skipped(e.relative)}
    settings = read_source_settings(fs, files.get(SETTINGS_FILE))
    refused = f"the source's {SETTINGS_FILE} cannot be used: {settings.problem}" if settings.problem else None
    # A default of nobody is part of what the listing records of a file the settings say nothing
    # of, so that a change of the default reaches the files that take it (public, the default's
    # default, is left out: a store synced before keeps its records).
    default = None if default_groups() == (PUBLIC,) else f"default:{NOBODY}"
    listed = []
    for relative, entry in files.items():
        if entry.repeat or relative == SETTINGS_FILE or (relative.endswith(SIDECAR_SUFFIX)
                                                         and relative.removesuffix(SIDECAR_SUFFIX) in files):
            continue
        sidecar = files.get(relative + SIDECAR_SUFFIX)
        unusable = _link_problem(sidecar)
        listed.append(SourceFile(
            file_doc_id(name, relative), entry.path, entry.size, entry.mtime_ns,
            sidecar.path if sidecar is not None and unusable is None else None, relative, entry.problem,
            settings.readers_of(relative), settings.defaults_of(relative) or default,
            refused or (_sidecar_refused(unusable) if unusable else None)))
    return sorted(listed, key=lambda f: f.doc_id)


def _link_problem(entry: _Entry | None) -> str | None:
    """Why a listed sidecar or settings file cannot be used as listed: a symbolic link, whether to
    nothing, out of the source or into it (a file that says who may read others is a file of its
    own, never one a link puts in its place)."""
    if entry is None:
        return None
    if entry.problem:
        return entry.problem
    return "a symbolic link, not a file of its own" if entry.link else None


def _sidecar_refused(problem: str) -> str:
    return f"its sidecar ({SIDECAR_SUFFIX}) cannot be used: {problem}"


def read_source_settings(fs: pafs.FileSystem, entry: _Entry | None) -> SourceSettings:
    """The source's settings file as listed (None: it has none), read and checked whole; one that
    cannot be used gives its reason, never an exception."""
    if entry is None:
        return SourceSettings()
    if problem := _link_problem(entry):
        return _refused(problem)
    try:
        with open_source_file(fs, entry.path) as stream:
            data = stream.read(MAX_SETTINGS_BYTES + 1)
    except OSError as err:
        return _refused(f"cannot be read: {err.strerror or err}")
    digest = hashlib.sha256(data).hexdigest()
    if len(data) > MAX_SETTINGS_BYTES:
        return SourceSettings(problem=f"over the limit of {MAX_SETTINGS_BYTES:,} bytes", digest=digest)
    try:
        readers = _settings_readers(data)
    except (DatasetError, ReadersError) as err:
        return SourceSettings(problem=str(err).removeprefix(f"{SETTINGS_FILE}: "), digest=digest)
    return SourceSettings(readers=readers, digest=digest)


def _refused(problem: str) -> SourceSettings:
    return SourceSettings(problem=problem, digest=hashlib.sha256(problem.encode()).hexdigest())


def _settings_readers(data: bytes) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The (prefix, groups) pairs of a settings file, longest prefix first; DatasetError or
    ReadersError say what is wrong with it."""
    value = parse_json_value(data, SETTINGS_FILE)
    if not isinstance(value, dict) or set(value) - {"readers"}:
        raise DatasetError(f"{SETTINGS_FILE}: must be an object with only readers")
    by_prefix = value.get("readers", {})
    if not isinstance(by_prefix, dict):
        raise DatasetError(f"{SETTINGS_FILE}: readers must be an object of path prefixes and their groups")
    if len(by_prefix) > MAX_READER_PREFIXES:
        raise DatasetError(f"{SETTINGS_FILE}: {len(by_prefix):,} reader prefixes; at most {MAX_READER_PREFIXES}")
    readers = []
    for prefix, groups in by_prefix.items():
        if prefix.startswith("/") or len(prefix) > MAX_PREFIX_CHARS:
            raise DatasetError(f"{SETTINGS_FILE}: a reader prefix is a path within the source (no leading /, "
                               f"at most {MAX_PREFIX_CHARS} characters), not {prefix[:80]!r}")
        readers.append((prefix, parse_groups(groups, f"{SETTINGS_FILE}: readers of {prefix!r}")))
    return tuple(sorted(readers, key=lambda pair: (-len(pair[0]), pair[0])))


def _skipped(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/")) or relative.endswith(_NOT_READY_SUFFIXES)


def _list_objects(fs: pafs.FileSystem, root: str) -> Iterator[_Entry]:
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File:
            yield _Entry(info.path[len(root):].lstrip("/"), info.path, info.size or 0, info.mtime_ns or 0)


def _walk_local(root: str) -> list[_Entry]:
    """Every file under a local folder, links followed only inside it and each real file once.

    The real tree is walked first, links set aside; then the links, in order of their paths, each
    to a file or folder not yet reached. Folders are known by (device, inode), files by real path.
    """
    real_root = os.path.realpath(root)
    inside = real_root.rstrip(os.sep) + os.sep
    folders: set[tuple[int, int]] = set()
    reached: set[str] = set()
    found: list[_Entry] = []
    links: list[tuple[str, str]] = []  # (relative path of the link, its path)

    def walk(folder: str, prefix: str) -> None:
        info = os.stat(folder)
        if (info.st_dev, info.st_ino) in folders:
            return
        folders.add((info.st_dev, info.st_ino))
        pending = [(folder, prefix)]
        while pending:
            here, at = pending.pop()
            with os.scandir(here) as scan:
                entries = sorted(scan, key=lambda e: e.name)
            for entry in entries:
                relative = at + entry.name
                if entry.name.startswith("."):
                    continue
                if entry.is_symlink():
                    heapq.heappush(links, (relative, entry.path))
                elif entry.is_dir(follow_symlinks=False):
                    held = entry.stat(follow_symlinks=False)
                    if (held.st_dev, held.st_ino) not in folders:
                        folders.add((held.st_dev, held.st_ino))
                        pending.append((entry.path, relative + "/"))
                elif entry.is_file(follow_symlinks=False) and entry.path not in reached:
                    held = entry.stat(follow_symlinks=False)
                    reached.add(entry.path)
                    found.append(_Entry(relative, entry.path, held.st_size, held.st_mtime_ns))

    walk(real_root, "")
    while links:  # a heap: the link with the smallest path first, among those found so far
        relative, path = heapq.heappop(links)
        target = os.path.realpath(path)
        try:
            held = os.stat(target)
        except OSError:
            found.append(_Entry(relative, path, 0, 0, "a symbolic link to nothing (its target is gone)", link=True))
            continue
        if target != real_root and not target.startswith(inside):
            found.append(_Entry(relative, path, 0, 0, "a symbolic link out of the source, not followed", link=True))
            continue
        if stat.S_ISDIR(held.st_mode):
            walk(target, relative + "/")
        elif stat.S_ISREG(held.st_mode):
            # A second link to a file is listed too (no document of its own), so that a sidecar
            # or settings file that is such a link is seen, and refused, rather than missed.
            found.append(_Entry(relative, target, held.st_size, held.st_mtime_ns, link=True, repeat=target in reached))
            reached.add(target)
    return found


def open_source_file(fs: pafs.FileSystem, listed: SourceFile | str) -> BinaryIO:
    """A listed file (or a sidecar's path) opened for reading. A local file is opened by its real
    path without following a link, so a file swapped for a link after the listing is not read."""
    path = listed if isinstance(listed, str) else listed.path
    if isinstance(fs, pafs.LocalFileSystem):
        return os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb")
    return io.BufferedReader(fs.open_input_stream(path))


def sidecar_hash(fs: pafs.FileSystem, listed: SourceFile) -> Sidecar:
    """The file's sidecar, read (at most :data:`MAX_SIDECAR_BYTES`), with what ``source_files``
    records as its sidecar hash, or why it cannot be used (never an exception).

    The hash is the sidecar's (or that of why it cannot be used), folded with what the source's
    settings file says of the file when it says anything (``source_defaults``), so that a change
    of either reads the file again; a file that neither concerns has None (and a store synced
    before settings files keeps its records)."""
    digest, data, problem = None, None, None
    if listed.sidecar is not None:
        try:
            with open_source_file(fs, listed.sidecar) as stream:
                data = stream.read(MAX_SIDECAR_BYTES + 1)
        except OSError as err:
            problem = f"cannot be read: {err.strerror or err}"
        else:
            if len(data) > MAX_SIDECAR_BYTES:
                problem = f"over the limit of {MAX_SIDECAR_BYTES:,} bytes"
        if problem:
            data, problem = None, _sidecar_refused(problem)
    refused = problem or listed.readers_problem
    if refused:
        digest = hashlib.sha256(f"refused:{refused}".encode()).hexdigest()
    elif data is not None:
        digest = hashlib.sha256(data).hexdigest()
    if listed.source_defaults is not None:
        digest = hashlib.sha256(f"{digest or ''}\x00{listed.source_defaults}".encode()).hexdigest()
    return Sidecar(digest, data, problem)


def text_bytes_limit(chunking: ChunkSettings, html: bool = False) -> int:
    """The largest text (or HTML) file read: any larger one holds more passages than allowed."""
    per_token = HTML_BYTES_PER_TOKEN if html else TEXT_BYTES_PER_TOKEN
    return min(chunking.max_file_bytes, chunking.max_passages * chunking.tokens * per_token)


def read_limits(chunking: ChunkSettings, seconds: float = READ_SECONDS) -> ReadLimits:
    """The limits a reader works within for one file under ``chunking``."""
    return ReadLimits(max_words=chunking.max_passages * chunking.tokens,
                      too_long=f"more than {chunking.max_passages:,} passages, over the limit per document",
                      max_inflated_bytes=chunking.max_file_bytes, seconds=seconds)


def read_source_file(
    fs: pafs.FileSystem, source: str, listed: SourceFile, chunking: ChunkSettings,
    sidecar: Sidecar | tuple[str | None, bytes | None], data: bytes | None = None, *, seconds: float = READ_SECONDS,
) -> FileOutcome:
    """Read, parse and chunk one file into a document, or record why it cannot be indexed.

    ``sidecar`` is :func:`sidecar_hash`'s answer for the file. Its readers come first: when the
    sidecar or the settings file cannot be used, the file is not read (a failure that keeps a
    stored document, :attr:`FileOutcome.keeps_stored`)."""
    sidecar = Sidecar(*sidecar)
    record = {"doc_id": listed.doc_id, "source": source, "size": listed.size, "mtime_ns": listed.mtime_ns,
              "sha256": None, "sidecar_sha256": sidecar.digest, "chunking": chunking.label(), "media_type": None,
              "status": FAILED, "reason": None, "n_passages": 0}
    problem = doc_id_problem(listed.doc_id)
    if problem:
        return FileOutcome({**record, "reason": f"its path cannot be a doc id: {problem}"})
    if listed.problem:
        return FileOutcome({**record, "reason": listed.problem})
    readers_problem = listed.readers_problem or sidecar.problem
    try:
        title, retention, readers = (None, None, None) if readers_problem else _sidecar_fields(sidecar.data)
    except FileReadError as err:
        readers_problem = str(err)
    if readers_problem:
        return FileOutcome({**record, "reason": readers_problem}, keeps_stored=True)
    if listed.size > chunking.max_file_bytes:
        return FileOutcome({**record, "reason": f"{listed.size:,} bytes, over the limit of "
                                                f"{chunking.max_file_bytes:,} per file"})
    limits = read_limits(chunking, seconds)
    try:
        if data is None:
            with open_source_file(fs, listed) as stream:
                data = stream.read(_HEAD_BYTES)
                _check_text_size(data, listed, chunking)
                if len(data) == _HEAD_BYTES:
                    data += stream.read(chunking.max_file_bytes + 1 - _HEAD_BYTES)
        else:
            _check_text_size(data[:_HEAD_BYTES], listed, chunking)
    except FileReadError as err:
        return FileOutcome({**record, "reason": str(err)})
    except OSError as err:
        return FileOutcome({**record, "reason": f"cannot be read: {err.strerror or err}"})
    record["sha256"] = hashlib.sha256(data).hexdigest()
    try:
        parsed = read_file(data, listed.relative or listed.doc_id, limits)
        chunks = chunk_blocks(listed.doc_id, parsed.blocks, chunking, limit=chunking.max_passages)
        limits.check_time()
    except FileReadError as err:
        return FileOutcome({**record, "reason": str(err)})
    record["media_type"] = parsed.media_type
    if len(chunks) > chunking.max_passages:
        return FileOutcome({**record, "n_passages": len(chunks), "reason": limits.too_long})
    path = shown_path(listed.relative) if listed.relative else listed.doc_id.partition(":")[2]
    document = Document(
        doc_id=listed.doc_id, title=title or parsed.title or path.rsplit("/", 1)[-1],
        text=document_text(parsed.blocks), retention_until=retention, source=f"{source}/{path}",
        # Named by its sidecar, else by the settings file, else the default: a synced document's
        # readers are a function of the source as it is, whatever they were before.
        readers=readers if readers is not None else listed.readers if listed.readers is not None
        else default_groups(),
        chunks=tuple(chunks),
    )
    return FileOutcome({**record, "status": INDEXED, "n_passages": len(chunks)}, document)


def _check_text_size(head: bytes, listed: SourceFile, chunking: ChunkSettings) -> None:
    """Refuse a text-like file (by its first bytes) that is larger than its passages could be."""
    kind = sniff(head, listed.relative or listed.doc_id)
    if kind is None:
        return
    limit = text_bytes_limit(chunking, html=kind == "html")
    if listed.size > limit:
        raise FileReadError(f"{listed.size:,} bytes of {kind}: more than {chunking.max_passages:,} passages of "
                            f"{chunking.tokens} tokens can hold (the limit is {limit:,} bytes), so it is not read")


def _sidecar_fields(data: bytes | None) -> tuple[str | None, dt.date | None, tuple[str, ...] | None]:
    """A sidecar's title, retention date and readers (each None when it names none)."""
    if data is None:
        return None, None, None
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise FileReadError(f"its sidecar ({SIDECAR_SUFFIX}) is not JSON: {err}") from None
    if not isinstance(value, dict) or set(value) - {"title", "retention_until", "readers"}:
        raise FileReadError(f"its sidecar ({SIDECAR_SUFFIX}) must be an object with only title, retention_until "
                            "and readers")
    title = value.get("title")
    if title is not None and not isinstance(title, str):
        raise FileReadError(f"its sidecar's title must be a string, got {title!r}")
    retention = value.get("retention_until")
    try:
        date = parse_retention_date(retention) if retention is not None else None
    except ValueError as err:
        raise FileReadError(f"its sidecar's retention_until: {err}") from None
    try:
        readers = parse_groups(value["readers"], "its sidecar's readers") if value.get("readers") is not None else None
    except ReadersError as err:
        raise FileReadError(str(err)) from None
    return title, date, readers


def records_frame(records: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(records, schema=pl.from_arrow(SOURCE_FILES.schema.empty_table()).schema)
