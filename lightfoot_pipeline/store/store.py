"""The store: Delta tables and LanceDB vectors under one root, committed together.

Layout under the root (a local path, or an object-store URI such as ``s3://bucket/prefix`` with
credentials in ``storage_options`` or the standard environment variables)::

    tables/<name>/          one Delta table per concept (see tables.py), partitioned by bucket
    journal/<name>/         append-only Delta tables read at their latest version (caches, ledgers)
    vectors/                LanceDB database: vector caches keyed by (model, text hash)
    _lightfoot/store_log/   Delta table: one row per store commit, naming every table's version

**Commits are atomic across tables.** A commit writes each changed table (one Delta commit per
table), then appends a row to the store log naming the new version of every table. Readers read
each table at the version the newest log row names, so they never see half of a commit. A writer
that finds a table ahead of the log (a crash between the two steps) restores it to the logged
version before it does anything else.

**One writer at a time.** Local stores take an exclusive file lock for the whole
read-compute-commit cycle. On object stores the lock is the orchestrator's (a Dagster
concurrency pool); the commit also checks that nobody committed since it read, and refuses
otherwise.

**Commits are conditional, so racing writers lose no commit.** The check above is only a fast
path; what makes a commit safe without a lock is that every step of it is a Delta commit of one
exact version, written with no retry. Delta writes version N+1 of a table by creating
``_delta_log/<N+1>.json`` only if it does not exist: an atomic rename on a local disk, a
conditional PUT (``If-None-Match: *``) on S3 and S3-compatible stores, which deltalake 1.6 uses
by default (it no longer has a DynamoDB locking provider). So:

- a transaction notes each table's version when it starts (after recovery) and writes the table
  on top of exactly that version: if another writer wrote the table since, the write fails;
- the store-log row is appended on top of exactly the log version the transaction read: of two
  writers that both passed the seq check, one appends seq N+1 and the other fails;
- either failure raises :class:`ConcurrentCommitError` (run the operation again); the loser's
  table writes were never logged, so readers never see them and the next transaction's recovery
  undoes them.

The guarantee needs a store that honours conditional PUTs (AWS S3 since August 2024, MinIO and
Cloudflare R2 do; check any other S3-compatible server); on one that ignores them two writers can
both create the same version, so keep a single writer there (the orchestrator's pool). deltalake 1.6 ignores the
old ``AWS_S3_LOCKING_PROVIDER=dynamodb`` setting, so the store does not pass it on.

**Vacuum beside writers.** Vacuum (run by erasure) deletes at once the files that commits
removed, which are the ones holding deleted rows, and keeps each table's logged version. A file
that no version references at all is deleted only once it is older than ``ORPHAN_GRACE_HOURS``:
it may be the upload of an append or commit still in flight (extraction appends to its cache
while erasure runs), and deleting it would leave that commit pointing at a missing file.

**No text in the transaction log.** Tables collect column statistics for ``bucket`` only
(``delta.dataSkippingStatsColumns``), so names and passage text never reach ``_delta_log``,
and erasing a document leaves no copy of its text once old files are vacuumed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import polars as pl
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from lightfoot_pipeline.settings import object_store_options, resolve_store_uri
from lightfoot_pipeline.store.tables import BUCKET, TableSpec, conform, spec_for
from lightfoot_pipeline.errors import LightfootError

DEFAULT_BUCKETS = 16
TABLE_CONFIGURATION = {
    "delta.dataSkippingStatsColumns": BUCKET,
    "delta.checkpointInterval": "50",
}
# Every commit of a store transaction lands on the exact version it was computed from, or fails.
EXACT_VERSION = CommitProperties(max_commit_retries=0)
# Tables written at once by one commit.
WRITE_THREADS = 4
# A data file that no table version references is either left over from a failed commit or the
# upload of a commit still in flight (journal appends run beside everything, and on object stores
# so may another writer), so vacuum leaves unreferenced files younger than this alone. The files
# that a commit removed, which hold deleted rows, go at once.
ORPHAN_GRACE_HOURS = 1
# Journal appends (an answer at a time) leave small files; compaction waits for this many per bucket.
JOURNAL_FILES_PER_BUCKET = 4
LOG_SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64()),
        pa.field("operation", pa.string()),
        pa.field("versions", pa.string()),
        pa.field("details", pa.string()),
        pa.field("committed_at", pa.timestamp("us", tz="UTC")),
    ]
)


class StoreError(LightfootError, RuntimeError):
    """The store cannot do what was asked; the message says why."""


class ConcurrentCommitError(StoreError):
    """Another writer committed after this one read the store."""

    hint = "run the operation again: it starts from the other writer's commit"


class StoreUnavailable(StoreError, OSError):
    """The store's URI cannot be read: a file, an unknown scheme, an object store out of reach."""

    hint = "check --store (or LIGHTFOOT_STORE), and for an object store the AWS_* settings (README: Settings)"


# Schemes of a store root that both Delta (deltalake) and LanceDB open; a bare path is a local one.
STORE_SCHEMES = ("file", "s3", "gs", "az", "abfss")
_TERMINAL_STYLE = re.compile(r"\x1b\[[0-9;]*m")


def _storage_failure(err: BaseException) -> str:
    """An object-store error on one line: deltalake's outermost and innermost causes, without
    terminal colours."""
    lines = [line.strip(" ↳") for line in _TERMINAL_STYLE.sub("", str(err)).splitlines()]
    lines = [line for line in lines if line] or [type(err).__name__]
    return lines[0] if len(lines) == 1 else f"{lines[0]}: {lines[-1]}"


def check_store_root(uri: str) -> None:
    """Refuse a store root that cannot hold a store: an unknown scheme, or a local path under a file."""
    scheme = uri.split("://", 1)[0].casefold() if "://" in uri else None
    if scheme is not None and scheme not in STORE_SCHEMES:
        raise StoreUnavailable(f"store {uri}: unknown scheme {scheme + '://'!r}",
                               hint=f"give a local path or a URI of {', '.join(s + '://' for s in STORE_SCHEMES)}")
    if scheme in (None, "file"):
        root = Path(uri.removeprefix("file://"))
        existing = next((p for p in (root, *root.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            raise StoreUnavailable(f"store {root}: {existing} is a file, not a directory",
                                   hint="give --store (or LIGHTFOOT_STORE) a directory, or a path that does not exist yet")


@dataclass(frozen=True)
class Manifest:
    """One committed state of the store: the version of every table."""

    seq: int = 0
    versions: dict[str, int] = field(default_factory=dict)
    operation: str = ""
    details: dict = field(default_factory=dict)
    committed_at: dt.datetime | None = None
    # The store log's Delta version this state was read at (None before the first commit).
    log_version: int | None = None

    @property
    def config(self) -> dict:
        """What the index is built with: embedder model and the settings that shape its tables."""
        return dict(self.details.get("config") or {})


class Store:
    """A store root: read tables at the committed state, write through a locked transaction."""

    def __init__(
        self,
        uri: str | None = None,
        storage_options: dict[str, str] | None = None,
        n_buckets: int = DEFAULT_BUCKETS,
    ) -> None:
        self.uri = resolve_store_uri(uri)
        check_store_root(self.uri)
        self.is_remote = "://" in self.uri and not self.uri.startswith("file://")
        options = object_store_options() if self.is_remote else {}
        options.update(storage_options or {})
        self.storage_options = options
        self.n_buckets = n_buckets
        # Table versions are immutable, so a version read (or written) once in this process is
        # kept and reused: a process that runs several operations reads each table once.
        self._frames: dict[str, tuple[int, pl.DataFrame]] = {}

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"

    # -- locations -------------------------------------------------------------------------

    def path(self, *parts: str) -> str:
        return "/".join([self.uri, *parts])

    def table_uri(self, name: str) -> str:
        return self.path("tables", name)

    def journal_uri(self, name: str) -> str:
        return self.path("journal", name)

    def local_root(self) -> Path | None:
        if self.is_remote:
            return None
        return Path(self.uri.removeprefix("file://"))

    def _options(self) -> dict[str, str] | None:
        return self.storage_options or None

    # -- the store log ---------------------------------------------------------------------

    def manifest(self) -> Manifest:
        """The newest committed state (an empty store has seq 0 and no tables)."""
        log = self._open(self.path("_lightfoot", "store_log"))
        if log is None:
            return Manifest()
        rows = self._read_log_rows(log)
        if rows.height == 0:
            return Manifest(log_version=log.version())
        last = rows.sort("seq").row(-1, named=True)
        return Manifest(
            seq=last["seq"],
            versions=json.loads(last["versions"]),
            operation=last["operation"],
            details=json.loads(last["details"]),
            committed_at=last["committed_at"],
            log_version=log.version(),
        )

    def _read_log_rows(self, log: DeltaTable) -> pl.DataFrame:
        if self.is_remote:
            return pl.from_arrow(log.to_pyarrow_table())  # type: ignore[return-value]
        files = log.file_uris()
        return pl.read_parquet(files) if files else pl.from_arrow(LOG_SCHEMA.empty_table())  # type: ignore[return-value]

    def history(self) -> pl.DataFrame:
        log = self._open(self.path("_lightfoot", "store_log"))
        if log is None:
            return pl.from_arrow(LOG_SCHEMA.empty_table())  # type: ignore[return-value]
        return pl.from_arrow(log.to_pyarrow_table()).sort("seq")  # type: ignore[return-value]

    def exists(self) -> bool:
        return self.manifest().seq > 0

    # -- reading ---------------------------------------------------------------------------

    def _open(self, uri: str, version: int | None = None) -> DeltaTable | None:
        try:
            return DeltaTable(uri, version=version, storage_options=self._options())
        except TableNotFoundError:
            return None
        except OSError as err:  # storage that does not answer, or refuses the credentials
            endpoint = self.storage_options.get("AWS_ENDPOINT_URL")
            at = f" at {endpoint}" if endpoint else ""
            raise StoreUnavailable(f"store {self.uri}: cannot read {uri}{at}: {_storage_failure(err)}") from err

    def read(self, name: str, manifest: Manifest | None = None, columns: list[str] | None = None) -> pl.DataFrame:
        """A table as of the committed state (an empty frame of its schema if never written)."""
        spec = spec_for(name)
        manifest = manifest or self.manifest()
        version = manifest.versions.get(name)
        wanted = columns or [*spec.columns, BUCKET]
        if version is None:
            return spec.empty().select(wanted)
        cached = self._frames.get(name)
        if cached is not None and cached[0] == version:
            return cached[1].select(wanted)
        table = self._open(self.table_uri(name), version)
        if table is None:
            raise StoreError(f"table {name!r} is in the store log at version {version} but missing on storage")
        frame = _typed(self._read_files(table, spec), spec)
        self._remember(name, version, frame)
        return frame.select(wanted)

    def _remember(self, name: str, version: int, frame: pl.DataFrame) -> None:
        self._frames[name] = (version, frame.select([*spec_for(name).columns, BUCKET]))

    def _read_files(self, table: DeltaTable, spec: TableSpec) -> pl.DataFrame:
        """The table's current data files. Local tables are read straight from their Parquet files
        (the bucket comes from the partition path); remote ones through delta-rs."""
        if self.is_remote:
            return pl.from_arrow(table.to_pyarrow_table())  # type: ignore[return-value]
        files = table.file_uris()
        if not files:
            return spec.empty()
        return pl.read_parquet(files, hive_partitioning=True)

    def read_journal(self, name: str) -> pl.DataFrame:
        """An append-only journal table at its latest version."""
        spec = spec_for(name)
        table = self._open(self.journal_uri(name))
        if table is None:
            return spec.empty()
        return _typed(self._read_files(table, spec), spec).select([*spec.columns, BUCKET])

    def append_journal(self, name: str, rows: pl.DataFrame) -> None:
        """Append rows to a journal table (safe beside other appenders: appends never conflict)."""
        if rows.height == 0:
            return
        spec = spec_for(name)
        write_deltalake(
            self.journal_uri(name),
            conform(rows, spec),
            mode="append",
            partition_by=[BUCKET],
            configuration=TABLE_CONFIGURATION,
            storage_options=self._options(),
        )

    def compact_journal(self, name: str) -> int:
        """Rewrite a journal table's small appended files into about one per bucket, once it has
        more than JOURNAL_FILES_PER_BUCKET files per bucket; the files removed are deleted once
        older than ORPHAN_GRACE_HOURS (a reader may still be reading them).

        Safe beside appenders (compaction commutes with appends). Beside a deletion from the same
        journal the later of the two fails: this with ConcurrentCommitError, the deletion with
        deltalake's CommitFailedError. Returns the files compacted.
        """
        table = self._open(self.journal_uri(name))
        if table is None or len(table.file_uris()) <= JOURNAL_FILES_PER_BUCKET * self.n_buckets:
            return 0
        with _conflicts_as(ConcurrentCommitError, f"compacting journal {name}"):
            metrics = table.optimize.compact()
        table.vacuum(retention_hours=ORPHAN_GRACE_HOURS, enforce_retention_duration=False, dry_run=False, full=False)
        return int(metrics.get("numFilesRemoved", 0) or 0)

    def delete_from_journal(self, name: str, column: str, values: list[str]) -> int:
        """Delete journal rows whose column is one of values (ids and hashes only, never text)."""
        table = self._open(self.journal_uri(name))
        if table is None or not values:
            return 0
        total = 0
        for start in range(0, len(values), 500):
            chunk = values[start : start + 500]
            quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in chunk)
            metrics = table.delete(f"{column} IN ({quoted})")
            total += int(metrics.get("num_deleted_rows", 0) or 0)
        return total

    # -- writing ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator["Transaction"]:
        """Exclusive write access: lock, recover a crashed commit, then stage and commit writes."""
        with self._lock():
            manifest, heads = self._recover()
            yield Transaction(self, manifest, heads)

    def _lock(self) -> contextlib.AbstractContextManager[None]:
        root = self.local_root()
        return contextlib.nullcontext() if root is None else local_file_lock(root / "_lightfoot" / "writer.lock")

    def _recover(self) -> tuple[Manifest, dict[str, int]]:
        """The state, and each existing table's version once it holds exactly the logged content.

        A transaction writes each table on top of that version (see the module docstring). The
        undoing commits are exact-version too: if another writer moves a table meanwhile, this
        raises ConcurrentCommitError rather than mixing the two writers' files.
        """
        manifest = self.manifest()
        heads: dict[str, int] = {}
        for spec_name, uri in self._physical_tables():
            table = self._open(uri)
            if table is None:
                continue
            logged = manifest.versions.get(spec_name)
            with _conflicts_as(ConcurrentCommitError, f"recovering {spec_name}"):
                if logged is None:
                    if table.to_pyarrow_dataset().count_rows() > 0:
                        table.delete(commit_properties=EXACT_VERSION)
                elif table.version() > logged:
                    table.restore(logged, commit_properties=EXACT_VERSION)
            heads[spec_name] = table.version()
        return manifest, heads

    def _physical_tables(self) -> list[tuple[str, str]]:
        from lightfoot_pipeline.store.tables import all_specs

        return [(spec.name, self.table_uri(spec.name)) for spec in all_specs()]

    def _append_log(
        self, seq: int, operation: str, versions: dict[str, int], details: dict, *, read_at: int | None
    ) -> Manifest:
        """Append the log row as the log version right after ``read_at`` (the version the
        committing transaction read), or raise ConcurrentCommitError if another writer got there
        first: two writers can never both commit seq N+1."""
        now = dt.datetime.now(dt.timezone.utc)
        row = pa.table(
            {
                "seq": [seq],
                "operation": [operation],
                "versions": [json.dumps(versions, sort_keys=True)],
                "details": [json.dumps(details, sort_keys=True, default=str)],
                "committed_at": [now],
            },
            schema=LOG_SCHEMA,
        )
        uri = self.path("_lightfoot", "store_log")
        if read_at is None:
            log = self._create_table(uri, LOG_SCHEMA, partition_by=None, what="the store log")
        else:
            log = self._open(uri, read_at)
            if log is None:
                raise StoreError(f"the store log at {uri} was read at version {read_at} but is gone")
        with _conflicts_as(ConcurrentCommitError, f"committing seq {seq}"):
            write_deltalake(log, row, mode="append", commit_properties=EXACT_VERSION)
        return Manifest(seq=seq, versions=versions, operation=operation, details=details, committed_at=now,
                        log_version=log.version())

    def _create_table(
        self, uri: str, schema: pa.Schema, partition_by: list[str] | None, what: str, **metadata: str
    ) -> DeltaTable:
        """A new empty table at version 0, or ConcurrentCommitError if another writer created it."""
        try:
            table = DeltaTable.create(
                uri, schema, mode="error", partition_by=partition_by, configuration=TABLE_CONFIGURATION,
                storage_options=self._options(), commit_properties=EXACT_VERSION, **metadata,
            )
        except (CommitFailedError, DeltaError) as err:
            if isinstance(err, CommitFailedError) or self._open(uri) is not None:
                raise ConcurrentCommitError(f"another writer created {what} first") from err
            raise
        if table.version() != 0:
            raise ConcurrentCommitError(f"another writer created {what} first")
        return table

    # -- maintenance -----------------------------------------------------------------------

    def vacuum(self, orphan_grace_hours: int = ORPHAN_GRACE_HOURS) -> dict[str, int]:
        """Remove every data file and log entry that the current versions no longer use.

        The logged version of each table is kept too: it differs from the newest version only
        when a writer is between its table writes and its log row, and readers read it. Files
        that no version references are removed once older than ``orphan_grace_hours`` (see
        ORPHAN_GRACE_HOURS); pass 0 only when no writer can be running.
        """
        removed: dict[str, int] = {}
        logged = self.manifest().versions
        uris = [(name, uri) for name, uri in self._physical_tables()]
        uris += [(f"journal/{name}", self.journal_uri(name)) for name, _ in self._physical_tables()]
        uris.append(("store_log", self.path("_lightfoot", "store_log")))
        for name, uri in uris:
            table = self._open(uri)
            if table is None:
                continue
            keep = [logged[name]] if name in logged else None
            files = table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=False,
                                 keep_versions=keep)
            files += table.vacuum(retention_hours=orphan_grace_hours, enforce_retention_duration=False,
                                  dry_run=False, full=True, keep_versions=keep)
            table.create_checkpoint()
            table.cleanup_metadata()
            removed[name] = len(files)
        return removed

    def lance(self):
        """The LanceDB connection for vector caches."""
        import lancedb

        return lancedb.connect(self.path("vectors"), storage_options=self._options())


class Transaction:
    """A working copy of the tables, read at one manifest and committed together.

    Stages read a table with :meth:`table` and stage its new content with :meth:`put`; nothing
    reaches storage until :meth:`commit`, which writes only the buckets that differ from what
    was read.
    """

    def __init__(self, store: Store, manifest: Manifest, heads: dict[str, int] | None = None) -> None:
        self.store = store
        self.manifest = manifest
        # The version each table is written on top of (see the module docstring): its version at
        # the start, after recovery; without recovery, the logged one.
        self._heads: dict[str, int] = dict(manifest.versions if heads is None else heads)
        self._original: dict[str, pl.DataFrame] = {}
        self._working: dict[str, pl.DataFrame] = {}
        # Buckets each table's staged changes may touch; None means "compare every bucket".
        self._touched: dict[str, set[int] | None] = {}
        # What the index is built with (embedder, thresholds); carried from commit to commit.
        self.config: dict = dict(manifest.config)

    @property
    def n_buckets(self) -> int:
        return self.store.n_buckets

    def table(self, name: str) -> pl.DataFrame:
        """The table as staged so far in this transaction (with its bucket column)."""
        if name not in self._working:
            frame = self.store.read(name, self.manifest)
            self._original[name] = frame
            self._working[name] = frame
            self._touched[name] = set()
        return self._working[name]

    def put(self, name: str, frame: pl.DataFrame) -> None:
        """Stage the whole new content of a table (rows carry their bucket column)."""
        spec = spec_for(name)
        self.table(name)
        self._working[name] = frame.select([*spec.columns, BUCKET])
        self._touched[name] = None

    def update(self, name: str, remove: pl.Series | None = None, add: pl.DataFrame | None = None) -> None:
        """Stage a change: drop the rows where ``remove`` (a mask over :meth:`table`) is true, add ``add``.

        Only the buckets of the dropped and added rows are compared at commit, so small changes to
        large tables cost little.
        """
        spec = spec_for(name)
        current = self.table(name)
        touched: set[int] = set()
        if remove is not None and remove.any():
            touched.update(current.filter(remove).get_column(BUCKET).unique().to_list())
            current = current.filter(~remove)
        if add is not None and add.height:
            add = add.select([*spec.columns, BUCKET]).cast(current.schema)
            touched.update(add.get_column(BUCKET).unique().to_list())
            current = pl.concat([current, add])
        self._working[name] = current
        previous = self._touched[name]
        self._touched[name] = None if previous is None else previous | touched

    def pending(self) -> dict[str, list[int]]:
        """Buckets that a commit now would write, per table."""
        out = {}
        for name, frame in self._working.items():
            original = self._original[name]
            if frame is original:
                continue
            touched = self._touched.get(name)
            if touched is not None:
                if not touched:
                    continue
                scope = sorted(touched)
                changed = changed_buckets(
                    original.filter(pl.col(BUCKET).is_in(scope)), frame.filter(pl.col(BUCKET).is_in(scope)),
                    spec_for(name),
                )
            else:
                changed = changed_buckets(original, frame, spec_for(name))
            if changed:
                out[name] = sorted(changed)
        return out

    def commit(self, operation: str, details: dict | None = None) -> Manifest:
        """Write every changed table, then the store-log row that makes them visible together."""
        current = self.store.manifest()
        if current.seq != self.manifest.seq:
            raise ConcurrentCommitError(
                f"store changed while this {operation} ran (read seq {self.manifest.seq}, now {current.seq})"
            )
        versions = dict(self.manifest.versions)
        pending = sorted(self.pending().items())
        written = {name: len(buckets) for name, buckets in pending}
        # The first table is written alone: of two writers racing on the same tables, the one that
        # loses it stops there. The rest are independent until the log row names them and are written
        # in parallel (delta-rs releases the GIL); a failure leaves the log untouched.
        def write(name: str, buckets: list[int]) -> int:
            rows = self._working[name].filter(pl.col(BUCKET).is_in(buckets))
            return self._write_table(spec_for(name), rows, buckets)

        if pending:
            versions[pending[0][0]] = write(*pending[0])
        with ThreadPoolExecutor(max_workers=WRITE_THREADS, thread_name_prefix="commit") as pool:
            futures = {name: pool.submit(write, name, buckets) for name, buckets in pending[1:]}
            for name, future in futures.items():
                versions[name] = future.result()
        details = {**(details or {}), "buckets_written": written, "config": self.config}
        manifest = self.store._append_log(
            self.manifest.seq + 1, operation, versions, details, read_at=self.manifest.log_version
        )
        for name in written:
            self.store._remember(name, versions[name], self._working[name])
        self.manifest = manifest
        self._original = dict(self._working)
        self._touched = {name: set() for name in self._working}
        return manifest

    def _write_table(self, spec: TableSpec, rows: pl.DataFrame, buckets: list[int]) -> int:
        """Replace the buckets' rows as the version right after this transaction's head of the table."""
        uri = self.store.table_uri(spec.name)
        data = conform(rows, spec)
        head = self._heads.get(spec.name)
        if head is None:
            table = self.store._create_table(
                uri, spec.arrow_schema, [BUCKET], f"table {spec.name!r}", name=spec.name, description=spec.description
            )
        else:
            table = self.store._open(uri, head)
            if table is None:
                raise StoreError(f"table {spec.name!r} was at version {head} when this transaction began, and is gone")
        predicate = f"{BUCKET} IN ({', '.join(str(b) for b in buckets)})"
        with _conflicts_as(ConcurrentCommitError, f"writing {spec.name}"):
            write_deltalake(table, data, mode="overwrite", predicate=predicate, partition_by=[BUCKET],
                            commit_properties=EXACT_VERSION)
        self._heads[spec.name] = table.version()
        return table.version()


@contextlib.contextmanager
def local_file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on a local file, held for the block (released if the process dies)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _conflicts_as(error: type[StoreError], doing: str) -> Iterator[None]:
    """Turn a failed exact-version Delta commit into ``error``, saying what was being done."""
    try:
        yield
    except CommitFailedError as err:
        raise error(f"another writer committed while this one was {doing}; run the operation again ({err})") from err


def _typed(frame: pl.DataFrame, spec: TableSpec) -> pl.DataFrame:
    """Columns in the spec's order and types (Parquet and Arrow types differ in small ways)."""
    target = spec.empty().schema
    return frame.select([pl.col(c).cast(t) for c, t in target.items()])


def changed_buckets(old: pl.DataFrame, new: pl.DataFrame, spec: TableSpec) -> set[int]:
    """Buckets whose set of rows differs between two versions of a table."""
    columns = [*spec.columns, BUCKET]

    def summary(frame: pl.DataFrame) -> pl.DataFrame:
        if frame.height == 0:
            return pl.DataFrame(schema={BUCKET: pl.Int32, "n": pl.UInt32, "lo": pl.Int64, "hi": pl.Int64})
        hashed = frame.select(columns).with_columns(_h=frame.select(columns).hash_rows(seed=7))
        return hashed.group_by(BUCKET).agg(
            pl.len().alias("n"),
            (pl.col("_h") % (1 << 32)).cast(pl.Int64).sum().alias("lo"),
            (pl.col("_h") // (1 << 32)).cast(pl.Int64).sum().alias("hi"),
        )

    joined = summary(old).join(summary(new), on=BUCKET, how="full", coalesce=True, suffix="_new")
    differs = joined.filter(
        (pl.col("n") != pl.col("n_new")).fill_null(True)
        | (pl.col("lo") != pl.col("lo_new")).fill_null(True)
        | (pl.col("hi") != pl.col("hi_new")).fill_null(True)
    )
    return set(differs.get_column(BUCKET).to_list())
