"""Sync: mirror a folder or an object-store prefix of document files into the store.

New files are read and ingested, changed files replace their documents (only passages whose
text changed reach the model; unchanged passages keep their chunk ids and extractions, and one
that only moved, to another page or place, is answered by the extraction cache), and files no longer at the source are deleted, exactly,
with no model call (with ``erase``, their text is erased from history as ``delete --erase``
does). A file that cannot be read (encrypted or corrupt, binary, empty, too large, too many
passages) is recorded as failed with its reason and affects nothing else; if it was indexed
before, its old version is deleted, since the source no longer holds a readable one. A file whose
readers cannot be known (its sidecar or the source's ``lightfoot.json`` cannot be used) fails too,
but its stored document, if any, stays as it was, readers and all, until the sidecar or settings
file is fixed: readers fail closed, never wider than a valid input gave.

Size, modification time and sidecar decide which files to read, their content hash whether they
changed (see :mod:`lightfoot_pipeline.ingest.sources`). A file whose readers alone changed (its
sidecar's, or its prefix's in the source's ``lightfoot.json``) gets them with no model call and
nothing else rewritten (``readers_changed``). Files are read and ingested in batches,
one commit each, so a sync that stops midway keeps every finished batch and the next sync goes
on from there. After any sequence of syncs, the store equals a fresh sync of the source as it is.

A sync finishes what earlier runs left: passages stored without an extraction (the endpoint
failed) are asked again, whatever the listing says, until every one has one (the report counts
those still without, ``unextracted``), and erasures asked for and not finished are finished
(:func:`~lightfoot_pipeline.operations.erase.pending_erasures`). Two syncs at once ask each
passage text once: they claim what they ask (:mod:`lightfoot_pipeline.ingest.extraction.claims`).
A file whose document was deleted (``lightfoot delete``) is excluded: no sync brings it back,
whatever it becomes, until it is readmitted (``readmit``).

With ``link=False`` each commit holds the documents, extractions, forms, file records and
deletions but not the graph: the graph queue keeps the names and facts for the graph stage
(Dagster's graph asset), no embedder is needed, and erasures wait for an erase after that stage
(the graph's tables hold the deleted names until it runs).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs

from lightfoot_pipeline import operations
from lightfoot_pipeline.index.documents import EXCLUDED, tombstone_documents
from lightfoot_pipeline.index.link_pieces import STAGING
from lightfoot_pipeline.ingest.doc_ids import default_source_name, file_doc_id, file_path_of, source_name_problem
from lightfoot_pipeline.ingest.extraction.answers import ClaimingExtractor
from lightfoot_pipeline.ingest.extraction.openai_extractor import OpenAIExtractor
from lightfoot_pipeline.ingest.extraction.outcome import OK, Extractor, ProgressCallback, reason_kind
from lightfoot_pipeline.ingest.landing import LANDING_DIR
from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.ingest.readers import default_groups
from lightfoot_pipeline.ingest.sources import (
    FAILED,
    INDEXED,
    SOURCE_FILES,
    FileOutcome,
    Sidecar,
    SourceFile,
    list_source,
    open_source_file,
    read_source_file,
    records_frame,
    sidecar_hash,
)
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.operations.erase import erase_history, pending_erasures
from lightfoot_pipeline.settings import ChunkSettings, IndexSettings, SettingsError
from lightfoot_pipeline.snapshot.verdict import StagedCheck
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.filesystem import open_filesystem
from lightfoot_pipeline.store.store import Store, StoreError
from lightfoot_pipeline.store.tables import EXTRACTIONS, PASSAGES, with_buckets
from lightfoot_pipeline.store.transaction import Transaction
from lightfoot_pipeline.store.vectors import EmbedProgress

BATCH_FILES = 200


@dataclass
class SyncReport:
    """What a sync did. Every listed file is ``new``, ``changed``, ``unchanged`` (a file whose
    content is the same after a touch is unchanged) or ``excluded`` (its document was deleted, and
    it stays out until readmitted); ``failed`` lists every file of the source that is not indexed
    now, with its reason, ``read_failed`` those of them read in this sync. ``readers_changed``: the
    changed files whose documents changed only in their readers (a sidecar's or the source's
    ``lightfoot.json``), of which only the readers were rewritten. ``kept``: the failed files whose
    readers cannot be known (a sidecar or settings file that cannot be used) and whose stored
    documents stay live as they were, readers and all, until it is fixed. ``asked_again``: the
    unchanged files read again for their passages without an extraction; ``unextracted``: the
    passages of the source's documents still without one after this sync (the next asks again)."""

    source: str = ""
    files: int = 0
    new: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    readers_changed: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    excluded: list[dict] = field(default_factory=list)
    readmitted: list[str] = field(default_factory=list)
    asked_again: list[str] = field(default_factory=list)
    read_failed: int = 0
    passages: int = 0  # of the documents read in this sync
    extracted: int = 0
    already_extracted: int = 0
    from_cache: int = 0
    extraction_failed: int = 0
    unextracted: int = 0
    model_calls: int = 0
    retries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    commits: list[int] = field(default_factory=list)
    read_seconds: float = 0.0
    seconds: float = 0.0
    erase: dict | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def file_counts(self) -> dict[str, int | dict[str, int]]:
        """How many files the sync found of each kind, the kinds of reason the failed ones give
        (never a reason's text, which may quote a file), and the passages read and still to
        extract: what an orchestrated sync reports."""
        failures = Counter(reason_kind(f["reason"]) for f in self.failed)
        return {"files": self.files, "files_new": len(self.new), "files_changed": len(self.changed),
                "files_removed": len(self.removed), "files_unchanged": self.unchanged,
                "files_failed": len(self.failed), "files_excluded": len(self.excluded),
                "failure_kinds": dict(sorted(failures.items())), "passages_read": self.passages,
                "passages_to_extract": self.unextracted}


class LeftToExtractionSteps:
    """An extractor that extracts nothing, for a sync whose passages are extracted by steps of
    their own (an orchestrated sync: the batch's extraction steps extract them, as they do a
    drop's): the sync stores the files' documents and passages, and counts them unextracted."""

    name = "extraction steps"

    def extract(self, passages: list[Passage], progress: ProgressCallback | None = None) -> list:
        return []


_NAME_HINT = "name this source with --name NAME (lightfoot sync), the NAME of its doc ids NAME:PATH"
_SOURCE_HINT = "name a folder or s3:// prefix that exists and can be read"


def source_root(source: str) -> str:
    """A source as recorded: an object-store URI without its trailing slash, or an absolute path
    with its links resolved. An empty source is refused (it is not the working directory)."""
    if not isinstance(source, str) or not source.strip() or source.strip() in ("file://", "s3://", "s3a://"):
        raise StoreError(f"no source to sync (got {source!r})", hint=_SOURCE_HINT)
    if "://" in source and not source.startswith("file://"):
        return source.rstrip("/")
    root = os.path.realpath(Path(source.removeprefix("file://")).expanduser())
    try:
        root.encode("utf-8")
    except UnicodeEncodeError:
        raise StoreError(f"the source {root!r} has a path that is not UTF-8, which the store cannot record",
                         hint="rename the folder, or sync it through a link with a UTF-8 name") from None
    return root


def source_name(root: str, name: str | None = None) -> str:
    """The name of a source's doc ids (``NAME:PATH``): ``name``, else the folder's last part."""
    chosen = default_source_name(root.split("://", 1)[-1]) if name is None else name
    problem = source_name_problem(chosen)
    if problem:
        raise StoreError(f"the source {root} cannot be named {chosen!r}: {problem}", hint=_NAME_HINT)
    return chosen


def check_store_outside(store: Store, root: str) -> None:
    """Refuse a source that holds the store, or any folder the store writes (its landing area,
    staging, snapshots, tables), or that lies inside the store: a sync would index the store."""
    if store.is_remote or "://" in root:
        if not (store.is_remote and "://" in root):
            return
        ours, theirs = (u.replace("s3a://", "s3://", 1).rstrip("/") + "/" for u in (store.uri, root))
        if ours.startswith(theirs) or theirs.startswith(ours):
            raise StoreError(f"the store {store.uri} and the source {root} overlap: a sync would index the store",
                             hint="keep the store outside the source")
        return
    local = store.local_root()
    assert local is not None
    if (root.rstrip(os.sep) + os.sep).startswith(os.path.realpath(local).rstrip(os.sep) + os.sep):
        raise StoreError(f"the source {root} is inside the store {store.uri}", hint="sync a folder outside the store")
    paths = [("the store", str(local)), ("its landing area", str(local / LANDING_DIR)),
             ("its staging", str(local.joinpath(*STAGING)))]
    if local.is_dir():
        paths += [(f"its folder {child.name}", str(child)) for child in sorted(local.iterdir())]
    inside = root.rstrip(os.sep) + os.sep
    for what, path in paths:
        real = os.path.realpath(path)
        if real == root or real.startswith(inside):
            where = "" if what == "the store" else f" ({what}, {real})"
            raise StoreError(f"the store {store.uri}{where} is inside the source {root}: a sync would index the "
                             "store itself", hint="keep the store and its folders outside the source")


def sync(
    store: Store,
    source: str,
    extractor: Extractor,
    embedder: Embedder | None = None,
    settings: IndexSettings | None = None,
    chunking: ChunkSettings | None = None,
    *,
    erase: bool = False,
    link: bool = True,
    name: str | None = None,
    readmit: Sequence[str] = (),
    batch_files: int = BATCH_FILES,
    progress: ProgressCallback | None = None,
    embed_progress: EmbedProgress | None = None,
    snapshot_checks: Sequence[StagedCheck] = (),
) -> SyncReport:
    """Mirror ``source`` (a folder or an ``s3://`` prefix) into ``store``; see the module docstring.

    ``name`` names the source's doc ids (``NAME:PATH``; by default the folder's last part).
    ``readmit``: excluded files to index again (each a path within the source or a doc id).
    ``progress`` hears how extraction proceeds, ``embed_progress`` how embedding new names does.
    ``link=False``: leave the graph, and so the erasures, to the graph stage; ``embedder`` may be None.
    ``snapshot_checks``: what a snapshot exported to replace one holding erased text must pass to
    be published (snapshot/export.py: ``publish_checked``)."""
    if link and embedder is None:
        raise SettingsError("sync: linking the graph needs an embedder (or link=False, to leave it to the graph stage)")
    settings = settings or IndexSettings()
    chunking = chunking or ChunkSettings()
    if not isinstance(batch_files, int) or batch_files < 1:
        raise SettingsError(f"sync: files per commit must be a whole number from 1, got {batch_files!r}")
    default_groups()  # $LIGHTFOOT_DEFAULT_READERS, for files that name no readers: checked before any is read
    started = time.perf_counter()
    look = look_at_source(store, source, chunking, name=name)
    readmitted = readmissions(look, readmit)
    if isinstance(extractor, OpenAIExtractor):  # two syncs at once ask each passage text once
        extractor = ClaimingExtractor(extractor)
    fs, root, records = look.fs, look.root, look.records
    listed = {f.doc_id: f for f in look.files}
    excluded = [d for d in look.unchanged if records[d]["status"] == EXCLUDED and d not in readmitted]
    again = unextracted_files(store, look)
    report = SyncReport(source=root, files=len(look.files), readmitted=readmitted, asked_again=again,
                        unchanged=len(look.unchanged) - len(excluded) - len(readmitted))
    report.excluded = [{"doc_id": d, "reason": records[d]["reason"]} for d in excluded]
    report.failed = [{"doc_id": d, "reason": records[d]["reason"]} for d in look.unchanged
                     if records[d]["status"] == FAILED]
    live = live_doc_ids(store)
    if look.renamed:  # files listed under other ids now: their text stays live, so nothing is erased
        renamed = operations.delete(store, [d for d in look.renamed if d in live], settings,
                                    reason=f"renamed at {root}", stage=lambda tx: _put_records(tx, [], look.renamed),
                                    link=link)
        report.commits.append(renamed.seq)
    gone = [d for d in look.gone if d not in set(look.renamed)]
    report.removed = [d for d in look.gone if d in live]
    if gone:
        deleted = operations.delete(store, [d for d in gone if d in live], settings, erase=erase,
                                    reason=f"removed from {root}", stage=lambda tx: _put_records(tx, [], gone),
                                    link=link)
        report.commits.append(deleted.seq)
        report.erase = deleted.erase  # the removed files' erasure, and any pending one
    for doc_id in readmitted:
        del records[doc_id]  # read as a new file
    to_read = [*look.to_read, *((listed[d], sidecar_hash(fs, listed[d])) for d in sorted({*readmitted, *again}))]
    indexed = {d for d in look.unchanged if d in records and records[d]["status"] == INDEXED}

    failed_live: list[str] = []
    for first in range(0, len(to_read), batch_files):
        batch = to_read[first:first + batch_files]
        read_started = time.perf_counter()
        outcomes = [_read(fs, root, f, signature, chunking, records.get(f.doc_id), again=f.doc_id in again)
                    for f, signature in batch]
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
                indexed.discard(f.doc_id)
            else:
                documents.append(outcome.document)
                indexed.add(f.doc_id)
            if f.doc_id not in again:  # those are counted as unchanged
                (report.new if known is None else report.changed).append(f.doc_id)
        # A file that failed for its readers (a sidecar or settings file that cannot be used) keeps
        # its stored document as it was: deleting it would act on readers nobody can know.
        unreadable = [o.record["doc_id"] for o in outcomes
                      if o is not None and o.failed and not o.keeps_stored and o.record["doc_id"] in live]
        failed_live.extend(unreadable)
        rows = [o.record if o is not None else _touched(records[f.doc_id], f) for (f, _), o in zip(batch, outcomes, strict=True)]

        def stage(tx: Transaction, rows=rows, unreadable=unreadable) -> None:
            if unreadable:
                tombstone_documents(tx, unreadable, reason=f"no longer readable at {root}", erase=erase)
            _put_records(tx, rows, [])

        ingested = operations.ingest(store, documents, extractor, embedder, settings, progress=progress,
                                   operation="sync", stage=stage, embed_progress=embed_progress, link=link)
        report.commits.append(ingested.seq)
        report.readers_changed.extend(ingested.readers_changed_doc_ids)
        report.passages += ingested.passages
        report.extracted += ingested.extracted
        report.already_extracted += ingested.already_extracted
        report.from_cache += ingested.from_cache
        report.extraction_failed += ingested.failed
        report.model_calls += ingested.model_calls
        report.retries += ingested.retries
        report.tokens_in += ingested.tokens_in
        report.tokens_out += ingested.tokens_out
        report.cost_usd += ingested.cost_usd
    report.failed.sort(key=lambda f: f["doc_id"])
    report.kept = sorted(live_doc_ids(store, among=[f["doc_id"] for f in report.failed])) if report.failed else []
    report.unextracted = sum(unextracted_passages(store, indexed).values())
    erased = failed_live if erase else []
    if link and (erased or pending_erasures(store)):  # and the erasures asked for earlier and not finished
        done = erase_history(store, erased, snapshot_checks=snapshot_checks).as_dict()
        if report.erase:
            done["documents"] = sorted({*report.erase["documents"], *done["documents"]})
        report.erase = done
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
    to_read: list[tuple[SourceFile, Sidecar]]  # with each one's sidecar
    unchanged: list[str]
    gone: list[str]
    # Of ``gone``, the ids of files still listed under another id: recorded before doc ids carried
    # the source's name (a bare path), or under another name of the source.
    renamed: list[str] = field(default_factory=list)

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


def look_at_source(store: Store, source: str, chunking: ChunkSettings | None = None, *,
                   name: str | None = None) -> SourceLook:
    """List ``source`` and compare it with the store's records; reads no file but sidecars and the
    source's settings file (``lightfoot.json``).

    Refused: an empty source, one that is not there, one that holds the store or lies inside it,
    and a name that another source recorded in the store already has."""
    chunking = chunking or ChunkSettings()
    root = source_root(source)
    named = source_name(root, name)
    check_store_outside(store, root)
    fs, path = open_filesystem(root, store.storage_options or None)
    try:
        exists = fs.get_file_info(path).type == pafs.FileType.Directory
        files = list_source(fs, path, named) if exists else []
        exists = exists or bool(files)  # an object-store prefix is no directory of its own
    except OSError as err:
        raise StoreError(f"cannot list the source {root}: {err}", hint=_SOURCE_HINT) from err
    if not exists:
        raise StoreError(f"the source {root} is not a folder or prefix that exists", hint=_SOURCE_HINT)
    recorded = store.read(SOURCE_FILES.name)
    taken = recorded.filter((pl.col("source") != root) & pl.col("doc_id").str.starts_with(f"{named}:"))
    if taken.height:
        raise StoreError(f"the source name {named!r} is taken in {store.uri} by the source "
                         f"{taken.get_column('source')[0]}: doc ids of two sources would meet", hint=_NAME_HINT)
    records = {r["doc_id"]: r for r in recorded.filter(pl.col("source") == root).iter_rows(named=True)}
    look = SourceLook(root, fs, files, records, [], [], [])
    listed_ids = {f.doc_id for f in files}
    look.gone = sorted(d for d in records if d not in listed_ids)
    look.renamed = [d for d in look.gone if _listed_as(d, named) & listed_ids]
    for f in files:
        known = records.get(f.doc_id)
        sidecar = sidecar_hash(fs, f)
        if known is not None and _same_listing(known, f, sidecar[0], chunking):
            look.unchanged.append(f.doc_id)
        else:
            look.to_read.append((f, sidecar))
    return look


def _listed_as(doc_id: str, name: str) -> set[str]:
    """The ids a file recorded as ``doc_id`` has under the name ``name``: as a bare path, or as
    ``OTHER:PATH``."""
    ids = {file_doc_id(name, doc_id)}
    if ":" in doc_id:
        ids.add(file_doc_id(name, file_path_of(doc_id)[1]))
    return ids


def _same_listing(known: dict, listed: SourceFile, sidecar: str | None, chunking: ChunkSettings) -> bool:
    if known["status"] == EXCLUDED:  # left out whatever the file becomes, until readmitted
        return True
    return (known["size"], known["mtime_ns"], known["sidecar_sha256"], known["chunking"]) == (
        listed.size, listed.mtime_ns, sidecar, chunking.label())


def unextracted_passages(store: Store, doc_ids: Iterable[str]) -> dict[str, int]:
    """How many passages of each of these documents have no extraction (none stored, or a failed
    one), for the documents that have any."""
    ids = sorted(set(doc_ids))
    if not ids:
        return {}
    manifest = store.manifest()
    passages = store.rows(PASSAGES.name, "doc_id", ids, manifest).select("doc_id", "chunk_id")
    extracted = (store.rows(EXTRACTIONS.name, "doc_id", ids, manifest).filter(pl.col("status") == OK)
                 .get_column("chunk_id"))
    missing = passages.filter(~pl.col("chunk_id").is_in(extracted.implode())).group_by("doc_id").len()
    return {doc_id: n for doc_id, n in missing.iter_rows()}


def unextracted_files(store: Store, look: SourceLook) -> list[str]:
    """The indexed files, unchanged at the source, whose documents have passages without an
    extraction: a sync reads them again, so those passages are asked again."""
    indexed = [d for d in look.unchanged if look.records[d]["status"] == INDEXED]
    return sorted(unextracted_passages(store, indexed))


def readmissions(look: SourceLook, paths: Sequence[str]) -> list[str]:
    """The doc ids of the excluded files that ``paths`` name, each by its path within the source
    or its doc id; a path that names no excluded file of the source is refused (SettingsError)."""
    excluded = {d for d, r in look.records.items() if r["status"] == EXCLUDED}
    by_name: dict[str, str] = {}
    for f in look.files:
        if f.doc_id in excluded:
            by_name[f.doc_id] = by_name[f.relative or f.doc_id] = f.doc_id
    readmitted, unknown = [], []
    for path in paths:
        doc_id = by_name.get(path) or by_name.get(path.strip("/"))
        if doc_id:
            readmitted.append(doc_id)
        else:
            unknown.append(path)
    if unknown:
        shown = ", ".join(sorted(excluded)[:10]) or "none"
        raise SettingsError(f"sync --readmit: {', '.join(map(repr, unknown))} names no excluded file of {look.root} "
                        f"(excluded now: {shown})",
                        hint="name an excluded file by its path within the source or by its doc id")
    return sorted(set(readmitted))


def _read(fs, root: str, listed: SourceFile, signature, chunking: ChunkSettings, known: dict | None,
          again: bool = False) -> FileOutcome | None:
    """The file read, or None when its content is what the store holds (only its listing changed);
    ``again``: read whatever the store holds (its passages without an extraction are asked again)."""
    data = None
    if not again and known is not None and known["sha256"] and listed.problem is None and listed.size <= chunking.max_file_bytes:
        with open_source_file(fs, listed) as stream:
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
