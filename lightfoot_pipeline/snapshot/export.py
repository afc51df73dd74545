"""Serving snapshots exported from the store: written, published, pruned, and removed when they
hold erased text.

:func:`publish_checked` writes the store's committed state as a new snapshot directory (the
format is in format.py), staged: the ``latest`` pointer does not move. The staged copy's checks run
(verdict.py), and only when none fails is it published by replacing the pointer; the older ones
are pruned. :func:`export_snapshot` publishes with no check, for stores a caller built itself.
Snapshots hold passage text, so a hard erase must reach them too: :func:`erase_from_snapshots`
removes every snapshot, published or staged, that holds an erased document, or the earlier text
of a document that was ingested again, exporting a fresh one first when the current one has to go.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.snapshot.collect import Content, ExportProgress, collect
from lightfoot_pipeline.snapshot.fact_index import INDEX_MIN_ROWS
from lightfoot_pipeline.snapshot.format import (
    ACCESS_FILE,
    FACT_INDEX_FILE,
    FORMAT_VERSION,
    MANIFEST_FILE,
    Snapshot,
    SnapshotDirectory,
    SnapshotError,
    SnapshotInfo,
    embedder_for_models,
    latest_snapshot,
    load_snapshot,
    read_info,
    read_table_file,
)
from lightfoot_pipeline.snapshot.verdict import (
    CheckVerdict,
    StagedCheck,
    Verdict,
    failing_reason,
    read_verdict,
    write_verdict,
)
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.log import StoreError
from lightfoot_pipeline.store.scratch import scratch_folder
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import PASSAGES
from lightfoot_pipeline.store.vectors import UnloadedEmbedder

log = logging.getLogger(__name__)

DEFAULT_KEEP = 3


def _new_snapshot_id(now: dt.datetime, fingerprint: str) -> str:
    return f"{now:%Y%m%dT%H%M%S%f}Z-{fingerprint[:12]}"


def _register_vector_model(store: Store, embedder: Embedder) -> None:
    """Record a passage/fact vector model other than the index's, so that erasure purges its caches."""
    config = store.manifest().config
    if not config.get("embedder") or config["embedder"] == embedder.model_id:
        return
    entry = {"model": embedder.model_id, "dim": int(embedder.dim)}
    known = config.get("vector_models", {})
    if all(entry in known.get(kind, []) for kind in ("passage", "fact")):
        return
    with store.transaction() as tx:
        vector_models = {k: list(v) for k, v in tx.config.get("vector_models", {}).items()}
        for kind in ("passage", "fact"):
            if entry not in vector_models.setdefault(kind, []):
                vector_models[kind].append(entry)
        tx.config = {**tx.config, "vector_models": vector_models}
        tx.commit("register-vector-model", {"model": embedder.model_id})


def _previous(store: Store, current: SnapshotInfo | None) -> Snapshot | None:
    """The published snapshot, to take unchanged vectors from; None if it cannot be read."""
    if current is None:
        return None
    try:
        return load_snapshot(store, current.snapshot_id)
    except SnapshotError as err:
        log.info("not reusing snapshot %s: %s", current.snapshot_id, err)
        return None


@dataclass(frozen=True)
class PublishReport:
    """What :func:`publish_checked` did: the snapshot it staged (or the published one it kept),
    whether that is now the published one, and the verdict of its checks."""

    info: SnapshotInfo  # the snapshot staged, or the published one when it already held the store's state
    published: bool  # whether ``info`` is the published snapshot now
    previous: SnapshotInfo | None  # the snapshot published before (when not published: the one still published)
    verdict: Verdict | None = None  # the staged snapshot's; when kept, the published one's (None if it has none)
    staged: bool = True  # False: the published snapshot already held the store's state, so it was kept

    @property
    def kept(self) -> bool:
        """The published snapshot already held the store's state: nothing was staged or checked."""
        return not self.staged

    @property
    def reason(self) -> str | None:
        """Why the staged snapshot was not published (None when it was)."""
        return None if self.published else self.verdict.reason if self.verdict else "not published"

    @property
    def served(self) -> SnapshotInfo | None:
        """The snapshot a service loads after this: the staged one if published, else the previous."""
        return self.info if self.published else self.previous


def _write_snapshot(location: SnapshotDirectory, store: Store, manifest, embedder: Embedder, models: dict,
                    digest: str, current: SnapshotInfo | None, progress: ExportProgress | None,
                    index_min_rows: int) -> SnapshotInfo:
    """Write the store's state as a new snapshot directory, its manifest last; the pointer stays."""
    with scratch_folder("export") as scratch:
        content = collect(store, manifest, embedder, scratch, _previous(store, current), progress, index_min_rows)
        return _write_content(location, content, manifest, models, digest, progress)


def _write_content(location: SnapshotDirectory, content: Content, manifest, models: dict, digest: str,
                   progress: ExportProgress | None) -> SnapshotInfo:
    now = dt.datetime.now(dt.UTC)
    snapshot_id = _new_snapshot_id(now, digest)
    counts = {
        "entities": content.entities.height,
        "passages": content.passages.height,
        "documents": content.passages.get_column("doc_id").n_unique(),
        "facts": content.facts.height,
        "fact_evidence": content.evidence.height,
        "nodes": content.nodes,
        "stored_entries": content.stored_entries,
        "edges": {k: int(v) for k, v in content.edge_counts.items()},
        "fact_index_groups": 0 if content.fact_index is None else len(content.fact_index.offsets) - 1,
        "embedded": content.embedded,
        "reader_sets": 1 if content.access is None else content.access.readers.get_column("readers").n_unique(),
    }
    info = SnapshotInfo(
        snapshot_id=snapshot_id, uri=location.uri(snapshot_id), fingerprint=digest, store_seq=manifest.seq,
        created_at=now.isoformat(), counts=counts, models=models,
    )
    location.fs.create_dir(location.path(snapshot_id), recursive=True)
    folder = lambda name: location.path(snapshot_id, name)  # noqa: E731
    written: list[tuple[str, Callable[[], bytes]]] = []  # files made here: small ones
    if content.fact_index is not None:
        written.append((FACT_INDEX_FILE, content.fact_index.to_bytes))
    if content.access is not None:
        settings = content.access.settings
        written.append((ACCESS_FILE, lambda: json.dumps(settings, sort_keys=True).encode()))
    copied = sorted(content.files.items())  # tables, the graph, vectors and codes: scratch files in the format
    total = len(copied) + len(written)
    for done, (name, local) in enumerate(copied):
        if progress is not None:
            progress("writing the snapshot", done, total)
        location.write_file(folder(name), local)
    for done, (name, data) in enumerate(written, start=len(copied)):
        if progress is not None:
            progress("writing the snapshot", done, total)
        location.write_bytes(folder(name), data())
    if progress is not None:
        progress("writing the snapshot", total, total)
    payload = {"format": FORMAT_VERSION, **info.as_dict()}
    payload.pop("uri")
    # The manifest goes last: a directory without one is an export that did not finish.
    location.write_bytes(folder(MANIFEST_FILE), json.dumps(payload, indent=2, sort_keys=True).encode())
    return info


def _run_check(check: StagedCheck, store: Store, info: SnapshotInfo) -> CheckVerdict:
    """A check's verdict; a check that cannot run fails, naming the error's kind (its message may
    quote what the check read)."""
    try:
        return check(store, info)
    except Exception as err:  # fail closed: a check that cannot say the snapshot is sound keeps it unpublished
        log.exception("a check of staged snapshot %s could not run", info.snapshot_id)
        name = getattr(check, "check_name", getattr(check, "__name__", type(check).__name__))
        return CheckVerdict(name=name, passed=False, reason=f"the check could not run ({type(err).__name__})")


def publish_checked(store: Store, embedder: Embedder, checks: Sequence[StagedCheck] = (), *,
                    keep: int = DEFAULT_KEEP, progress: ExportProgress | None = None,
                    index_min_rows: int = INDEX_MIN_ROWS, restage: bool = False) -> PublishReport:
    """Stage the store's committed state as a new snapshot, run ``checks`` on the staged copy, and
    publish it (replace the ``latest`` pointer) only when none fails; then prune old snapshots.

    A snapshot whose checks fail stays unpublished with its verdict beside it (verdict.py), and
    services keep loading the previous one. A snapshot is published only if no newer one was
    published while it was checked, and only if it is still there (an erasure may remove it).
    When the published snapshot already holds this state (same commit or fingerprint, same
    models), it is kept and nothing is staged or checked, unless ``restage`` (after an upgrade
    that writes what the published snapshot lacks, such as its facts' codes: codes.py). Vectors the published snapshot holds are
    reused (collect.py). ``progress(step, done, total)`` hears about each step and every chunk of
    embedded texts; ``index_min_rows`` is the fact count from which the facts get an index.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the published snapshot), got {keep}")
    if not store.exists():
        raise SnapshotError(f"no index at {store.uri}: ingest documents before exporting a snapshot")
    _register_vector_model(store, embedder)
    manifest = store.manifest()
    models = {"embedder": embedder.model_id, "dim": int(embedder.dim),
              "index_embedder": manifest.config.get("embedder")}
    location = SnapshotDirectory(store)
    with location.lock():
        current = latest_snapshot(store)
        if not restage and current is not None and current.store_seq == manifest.seq and current.models == models:
            _prune(location, keep)  # the same commit holds the same state: no fingerprint needed
            return PublishReport(current, True, current, read_verdict(location, current.snapshot_id), staged=False)
        if progress is not None:
            progress("fingerprinting the store", 0, 1)
        digest = fingerprint(store, manifest).digest
        if progress is not None:
            progress("fingerprinting the store", 1, 1)
        if not restage and current is not None and current.fingerprint == digest and current.models == models:
            _prune(location, keep)
            return PublishReport(current, True, current, read_verdict(location, current.snapshot_id), staged=False)
        info = _write_snapshot(location, store, manifest, embedder, models, digest, current, progress,
                               index_min_rows)
    # The checks run outside the lock (a permission audit builds stores): pruning keeps a snapshot
    # under check, since it has no verdict yet and is newer than the published one.
    found = []
    for done, check in enumerate(checks):
        if progress is not None:
            progress("checking the staged snapshot", done, len(checks))
        found.append(_run_check(check, store, info))
    if checks and progress is not None:
        progress("checking the staged snapshot", len(checks), len(checks))
    with location.lock():
        reason = failing_reason(found)
        now_published = location.pointer()
        if reason is None and now_published is not None and now_published > info.snapshot_id:
            reason = f"snapshot {now_published}, staged later, was published first"
        verdict = Verdict(info.snapshot_id, reason is None, found, reason)
        if not write_verdict(location, verdict):
            verdict = Verdict(info.snapshot_id, False, found, "removed while it was checked (an erasure)")
        elif verdict.published:
            location.publish_pointer(info.snapshot_id)
        _prune(location, keep)
        # What was published before this one, or is still published: another export's, perhaps.
        previous = current if verdict.published or now_published is None else read_info(location, now_published)
    if not verdict.published:
        log.warning("staged snapshot %s not published: %s", info.snapshot_id, verdict.reason)
    return PublishReport(info, verdict.published, previous, verdict)


def export_snapshot(store: Store, embedder: Embedder, *, keep: int = DEFAULT_KEEP,
                    progress: ExportProgress | None = None, index_min_rows: int = INDEX_MIN_ROWS) -> SnapshotInfo:
    """Export and publish the store's state with no check of the staged copy (:func:`publish_checked`
    with none): for stores whose every document the caller built and reads itself (evaluation,
    benchmarks, an audit's reference stores). What services of a deployment load is published by
    ``lightfoot snapshot`` and Dagster's ``serving_snapshot``, which check first."""
    report = publish_checked(store, embedder, (), keep=keep, progress=progress, index_min_rows=index_min_rows)
    return report.info


def _prune(location: SnapshotDirectory, keep: int) -> list[str]:
    """Remove what can no longer be served. Kept: the published snapshot and the newest ``keep - 1``
    complete ones before it that were published; every snapshot staged after it that is under
    check (no verdict yet) or still being written; and the newest one left unpublished, whose
    verdict says why. Removed: the rest (older unpublished ones, unfinished exports older than
    the published one)."""
    published = location.pointer() or ""
    ids = location.snapshot_ids()
    complete = {i for i in ids if location.exists(location.path(i, MANIFEST_FILE))}
    verdicts = {i: read_verdict(location, i) for i in complete}
    kept = {published} if published else set()
    left_out = {i for i, verdict in verdicts.items() if verdict is not None and not verdict.published}
    older = [i for i in ids if i < published and i in complete and i not in left_out]  # published in their day
    kept.update(older[-(keep - 1):] if keep > 1 else [])
    newer = [i for i in ids if i > published]
    unpublished = [i for i in newer if i in left_out]
    kept.update(i for i in newer if i not in unpublished)  # under check, or being written
    kept.update(unpublished[-1:])
    removed = []
    for snapshot_id in ids:
        if snapshot_id in kept:
            continue
        location.remove(snapshot_id)
        removed.append(snapshot_id)
    return removed


# -- erasure ------------------------------------------------------------------------------------


def _holds_any(
    location: SnapshotDirectory, snapshot_id: str, doc_ids: set[str], live: pl.DataFrame | None = None
) -> bool:
    """Whether a snapshot holds any of ``doc_ids`` or, given the store's ``live`` passages
    (doc_id, chunk_id, title), a passage of a live document that the store no longer holds as it
    is: the text that re-ingesting the document replaced."""
    for name in ("passages", "fact_evidence"):
        columns = ["doc_id", "chunk_id", "title"] if live is not None and name == "passages" else ["doc_id"]
        table = _table_columns(location, snapshot_id, name, columns)
        if table is None:
            return True  # cannot tell what an unfinished export holds: treat it as holding them
        if any(d in doc_ids for d in table.column("doc_id").unique().to_pylist()):
            return True
        if live is not None and name == "passages":
            held = pl.from_arrow(table).join(live.select("doc_id").unique(), on="doc_id", how="semi")
            if held.join(live, on=["doc_id", "chunk_id", "title"], how="anti", nulls_equal=True).height:
                return True
    return False


def _table_columns(location: SnapshotDirectory, snapshot_id: str, name: str, columns: list[str]) -> pa.Table | None:
    """Some columns of a snapshot's table (format.py: ``read_table_file``); None when it has no
    such file or it cannot be read whole (an export still writing it)."""
    try:
        return read_table_file(location, lambda file: location.path(snapshot_id, file), name, columns)
    except FileNotFoundError:
        return None
    except pa.ArrowException as err:
        log.info("snapshot %s: %s cannot be read (%s): counted as holding the erased text", snapshot_id, name,
                 type(err).__name__)
        return None


def erase_from_snapshots(
    store: Store, doc_ids: Sequence[str], embedder: Embedder | None = None, *, replaced_text: bool = False,
    checks: Sequence[StagedCheck] = (),
) -> int:
    """Remove every snapshot that holds any of ``doc_ids``; return how many were removed.

    Called after a hard erase. With ``replaced_text``, also every snapshot that holds a live
    document's passage in a version the store no longer holds (the text a re-ingest replaced).
    Staged snapshots are removed like published ones: one left unpublished, or under check, holds
    text too. When the published snapshot must go, a fresh one is exported first (with
    ``embedder``, else the snapshot's own embedder, else from cached vectors only) and published
    if it passes ``checks`` (:func:`publish_checked`), so the service keeps a snapshot to answer
    from. If no fresh one can be made or it fails its checks, the pointer is removed with the old
    snapshot: no snapshot may keep an erased document's text.
    """
    wanted = set(doc_ids)
    location = SnapshotDirectory(store)
    if not wanted and not replaced_text:
        return 0
    # three columns of the passages, not their text, and not kept in the store's memory of whole tables
    live = store.read_columns(PASSAGES.name, store.manifest(), ["doc_id", "chunk_id", "title"]) if replaced_text else None
    with location.lock():
        published = location.pointer()
        doomed = [i for i in location.snapshot_ids() if _holds_any(location, i, wanted, live)]
    if not doomed:
        return 0
    if published in doomed:
        info = read_info(location, published)
        chosen = embedder or embedder_for_models(info.models if info else {})
        if chosen is None and info is not None:
            chosen = UnloadedEmbedder(info.models["embedder"], int(info.models["dim"]))  # cached vectors only
        try:
            if chosen is None:
                raise SnapshotError("the published snapshot names no embedder")
            fresh = publish_checked(store, chosen, checks, keep=DEFAULT_KEEP)
            if not fresh.published:
                raise SnapshotError(f"its replacement {fresh.info.snapshot_id} was not published: {fresh.reason}")
            log.info("exported snapshot %s to replace %s after an erase", fresh.info.snapshot_id, published)
        except (SnapshotError, StoreError, RuntimeError) as err:
            log.warning("could not export a replacement snapshot (%s); unpublishing %s", err, published)
            with location.lock():
                if location.pointer() == published:
                    location.clear_pointer()
    removed = 0
    with location.lock():
        for snapshot_id in location.snapshot_ids():
            # Snapshots exported since the first look hold the store's passages as they were then or
            # later, so only an erased document can make one of them go.
            if snapshot_id in doomed or _holds_any(location, snapshot_id, wanted):
                if location.pointer() == snapshot_id:
                    location.clear_pointer()
                location.remove(snapshot_id)
                removed += 1
    return removed
