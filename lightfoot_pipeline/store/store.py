"""The store: Delta tables and LanceDB vectors under one root, committed together.

Layout under the root (a local path, or an object-store URI such as ``s3://bucket/prefix`` with
credentials in ``storage_options`` or the standard environment variables)::

    tables/<name>/          one Delta table per concept (see tables.py), partitioned by bucket
    journal/<name>/         append-only Delta tables read at their latest version (caches, ledgers)
    vectors/                LanceDB database: vector caches keyed by (model, text hash)
    _lightfoot/store_log/   Delta table: one row per store commit, naming every table's version
    _lightfoot/fingerprint_cache.json   digests of buckets by their data files (fingerprint.py; a cache)

Readers read each table at the version the newest store-log row names (log.py), so they never
see half of a commit; writers stage and commit through a :class:`Transaction` (transaction.py),
which says how a commit stays atomic across tables and safe beside other writers.

**One writer at a time.** Local stores take an exclusive file lock for the whole
read-compute-commit cycle. On object stores the lock is the orchestrator's (a Dagster
concurrency pool); the commit also checks that nobody committed since it read, and refuses
otherwise.

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
import json
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from lightfoot_pipeline.settings import object_store_options, resolve_store_uri
from lightfoot_pipeline.store.journals import Journals, typed
from lightfoot_pipeline.store.log import (
    LOG_SCHEMA,
    ORPHAN_GRACE_HOURS,
    REMOVED_FILES_LISTED_HOURS,
    Manifest,
    StoreError,
    StoreLayoutError,
    StoreUnavailable,
)
from lightfoot_pipeline.store.recovery import recover
from lightfoot_pipeline.store.roots import check_store_root, check_writable_root, local_file_lock, storage_failure
from lightfoot_pipeline.store.tables import (
    BUCKET,
    LAYOUT_VERSION,
    TableSpec,
    all_specs,
    arrow_frame,
    bucket_of,
    spec_for,
    worth_a_presence_check,
)
from lightfoot_pipeline.store.transaction import Transaction

DEFAULT_BUCKETS = 16
ROWS_PER_PIECE = 500_000  # rows a piecewise column scan holds at once (column_pieces)


class Store(Journals):
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
        self._tables: dict[tuple[str, int], DeltaTable] = {}
        # What this Store read, per table, for tests and reports: buckets and rows by bucket reads,
        # and whole-table reads.
        self.buckets_read: dict[str, int] = {}
        self.rows_read: dict[str, int] = {}
        self.tables_read: dict[str, int] = {}
        self.columns_read: dict[str, int] = {}  # single columns read whole (read_column), per table
        # Digests of buckets by their data files (fingerprint.py), as this process last read or wrote them.
        self.fingerprint_cache: dict | None = None
        # Buckets read, by (table, version, bucket), for a process that reads many small pieces of
        # one version (the query service's provenance routes); off unless keep_buckets() is called.
        self._buckets: OrderedDict[tuple, pl.DataFrame] | None = None
        self._buckets_bytes, self._buckets_limit = 0, 0
        self._buckets_lock = threading.Lock()

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

    def connection_options(self) -> dict[str, str] | None:
        """The storage options to open anything under the root with (Delta tables, LanceDB, a
        filesystem): ``storage_options``, or None when there are none (a local store)."""
        return self.storage_options or None

    # -- the store log ---------------------------------------------------------------------

    def manifest(self) -> Manifest:
        """The newest committed state (an empty store has seq 0 and no tables)."""
        log = self.open_table(self.path("_lightfoot", "store_log"))
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
            return arrow_frame(log.to_pyarrow_table())
        files = log.file_uris()
        return pl.read_parquet(files) if files else arrow_frame(LOG_SCHEMA.empty_table())

    def log_version(self) -> int | None:
        """The store log's Delta version (None before the first commit). It moves with every
        commit, so a watcher can tell that nothing was committed without reading the log's rows."""
        log = self.open_table(self.path("_lightfoot", "store_log"))
        return None if log is None else log.version()

    def history(self) -> pl.DataFrame:
        log = self.open_table(self.path("_lightfoot", "store_log"))
        if log is None:
            return arrow_frame(LOG_SCHEMA.empty_table())
        return arrow_frame(log.to_pyarrow_table()).sort("seq")

    def exists(self) -> bool:
        return self.manifest().seq > 0

    def check_writable(self) -> None:
        """Refuse (StoreUnavailable) a local root where nothing can be written; see
        :func:`~lightfoot_pipeline.store.roots.check_writable_root`."""
        check_writable_root(self.uri)

    # -- reading ---------------------------------------------------------------------------

    def open_table(self, uri: str, version: int | None = None) -> DeltaTable | None:
        """The Delta table at a URI under the root, at ``version`` (None: its latest), or None
        when there is none; StoreUnavailable when storage does not answer or refuses."""
        try:
            return DeltaTable(uri, version=version, storage_options=self.connection_options())
        except TableNotFoundError:
            return None
        except OSError as err:  # storage that does not answer, or refuses the credentials
            endpoint = self.storage_options.get("AWS_ENDPOINT_URL")
            at = f" at {endpoint}" if endpoint else ""
            raise StoreUnavailable(f"store {self.uri}: cannot read {uri}{at}: {storage_failure(err)}") from err

    def read(self, name: str, manifest: Manifest | None = None, columns: list[str] | None = None,
             *, remember: bool = True) -> pl.DataFrame:
        """A table as of the committed state (an empty frame of its schema if never written).

        The table is kept in memory for the next read of the same version unless ``remember`` is
        false (a large table read once)."""
        spec = spec_for(name)
        manifest = manifest or self.manifest()
        version = manifest.versions.get(name)
        wanted = columns or [*spec.columns, BUCKET]
        if version is None:
            return spec.empty().select(wanted)
        cached = self._frames.get(name)
        if cached is not None and cached[0] == version:
            return cached[1].select(wanted)
        table = self.open_version(name, version)
        frame = typed(self.read_files(table, spec), spec)
        self.tables_read[name] = self.tables_read.get(name, 0) + 1
        if remember:
            self.remember_rows(name, version, frame)
        return frame.select(wanted)

    def read_column(self, name: str, manifest: Manifest, column: str) -> pl.Series:
        """One column of a table as of the committed state: only that column is read from storage."""
        return self.read_columns(name, manifest, [column]).get_column(column)

    def read_columns(self, name: str, manifest: Manifest, columns: list[str]) -> pl.DataFrame:
        """Some columns of a table (the bucket among them, if asked) as of the committed state:
        only those are read from storage."""
        spec = spec_for(name)
        version = manifest.versions.get(name)
        if version is None:
            return spec.empty().select(columns)
        cached = self._frames.get(name)
        if cached is not None and cached[0] == version:
            return cached[1].select(columns)
        key = (name, version, "columns", *columns)
        if self._buckets is not None:
            with self._buckets_lock:
                held = self._buckets.get(key)
                if held is not None:
                    self._buckets.move_to_end(key)
                    return held
        table = self.open_version(name, version)
        self.columns_read[name] = self.columns_read.get(name, 0) + 1
        frame = typed(self.read_files(table, spec, columns), spec, columns)
        if self._buckets is not None:
            self._keep(key, frame)
            with self._buckets_lock:
                self._evict(keep=1)
        return frame

    def column_pieces(self, name: str, manifest: Manifest, columns: list[str],
                      rows_per_piece: int = ROWS_PER_PIECE) -> Iterator[pl.DataFrame]:
        """Some columns of a table as of the committed state, a piece at a time: about
        ``rows_per_piece`` rows (whole data files, a file at least, locally; record batches on an
        object store), so that what a scan of a large table holds is one piece, not the table.
        Every row of the version comes once; a table this process holds whole is sliced."""
        spec = spec_for(name)
        version = manifest.versions.get(name)
        if version is None:
            return
        cached = self._frames.get(name)
        if cached is not None and cached[0] == version:
            frame = cached[1].select(columns)
            for start in range(0, frame.height, rows_per_piece):
                yield frame.slice(start, rows_per_piece)
            return
        table = self.open_version(name, version)
        self.columns_read[name] = self.columns_read.get(name, 0) + 1
        if self.is_remote:
            batches = table.to_pyarrow_dataset().to_batches(columns=columns, batch_size=rows_per_piece)
            for batch in batches:
                yield typed(arrow_frame(pa.Table.from_batches([batch])), spec, columns)
            return
        actions = table.get_add_actions(flatten=True)
        rows_of = dict(zip(actions.column("path").to_pylist(), actions.column("num_records").to_pylist(), strict=True))
        root = table.table_uri.removeprefix("file://").rstrip("/") + "/"
        groups: list[list[str]] = [[]]
        held = 0
        for uri in table.file_uris():
            if held >= rows_per_piece:
                groups.append([])
                held = 0
            groups[-1].append(uri)
            # A file whose count the log lacks (or whose path reads otherwise) makes a piece of its own.
            held += int(rows_of.get(uri.removeprefix(root)) or rows_per_piece)
        for group in groups:
            if group:
                yield typed(pl.read_parquet(group, columns=columns, hive_partitioning=BUCKET in columns), spec, columns)

    def keep_buckets(self, max_bytes: int) -> None:
        """Keep the buckets and columns this Store reads, up to ``max_bytes`` of them (the least
        recently used go first): a version's bucket is immutable, so a later read of it costs no
        file read."""
        self._buckets = OrderedDict()
        self._buckets_bytes, self._buckets_limit = 0, max_bytes

    def read_buckets(self, name: str, manifest: Manifest, buckets: Iterable[int]) -> pl.DataFrame:
        """The rows of some buckets of a table as of the committed state (with the bucket column).

        Only those buckets' data files are read (a Delta partition filter), unless this process
        already holds the whole table at that version, or those buckets (:meth:`keep_buckets`).
        """
        spec = spec_for(name)
        wanted = sorted(set(buckets))
        version = manifest.versions.get(name)
        if version is None or not wanted:
            return spec.empty()
        self.buckets_read[name] = self.buckets_read.get(name, 0) + len(wanted)
        cached = self._frames.get(name)
        if cached is not None and cached[0] == version:
            return cached[1].filter(pl.col(BUCKET).is_in(wanted))
        if self._buckets is not None:
            return self._kept_buckets(name, version, wanted)
        return self._read_bucket_files(name, version, wanted)

    def _kept_buckets(self, name: str, version: int, wanted: list[int]) -> pl.DataFrame:
        kept = self._buckets
        assert kept is not None
        with self._buckets_lock:
            missing = [b for b in wanted if (name, version, b) not in kept]
        if missing:
            frame = self._read_bucket_files(name, version, missing)
            parts = {key[0]: part for key, part in frame.partition_by(BUCKET, as_dict=True).items()}
            for bucket in missing:
                self._keep((name, version, bucket), parts.get(bucket, frame.clear()))
        with self._buckets_lock:
            frames = []
            for bucket in wanted:
                kept.move_to_end((name, version, bucket))
                frames.append(kept[(name, version, bucket)])
            self._evict(keep=len(wanted))
        return pl.concat(frames, how="vertical_relaxed")

    def _keep(self, key: tuple, frame: pl.DataFrame) -> None:
        kept = self._buckets
        assert kept is not None
        with self._buckets_lock:
            if key not in kept:
                kept[key] = frame
                self._buckets_bytes += int(frame.estimated_size())

    def _evict(self, keep: int) -> None:
        """Drop the least recently used pieces past the byte limit, but never the last ``keep``."""
        kept = self._buckets
        assert kept is not None
        while self._buckets_bytes > self._buckets_limit and len(kept) > keep:
            _, dropped = kept.popitem(last=False)
            self._buckets_bytes -= int(dropped.estimated_size())

    def _read_bucket_files(self, name: str, version: int, wanted: list[int]) -> pl.DataFrame:
        spec = spec_for(name)
        table = self.open_version(name, version)
        partitions = [(BUCKET, "in", [str(b) for b in wanted])]
        if self.is_remote:
            frame = arrow_frame(table.to_pyarrow_dataset(file_pruning_predicate=partitions).to_table())
        else:
            files = table.file_uris(file_pruning_predicate=partitions)
            frame = pl.read_parquet(files, hive_partitioning=True) if files else spec.empty()
        self.rows_read[name] = self.rows_read.get(name, 0) + frame.height
        return typed(frame, spec)

    def read_matching(self, name: str, manifest: Manifest, column: str, values: Iterable[str],
                      buckets: Iterable[int] | None = None) -> pl.DataFrame:
        """The committed rows whose ``column`` (the table's bucket column) is one of ``values``,
        with the bucket column (``buckets``: the values' buckets, when the caller has them).

        Only the buckets of the values are read, and only the matching rows are kept: the files are
        scanned with the filter, so what this holds is the rows found, not the buckets read (a
        batch's few thousand names land in nearly every bucket of a table of millions of rows).
        A table this process holds whole, or whose buckets it keeps, is filtered in memory.
        """
        spec = spec_for(name)
        wanted = sorted(set(values))
        version = manifest.versions.get(name)
        if version is None or not wanted:
            return spec.empty()
        if buckets is None:
            n_buckets = self.layout_buckets(manifest)
            buckets = {bucket_of(v, n_buckets) for v in wanted}
        buckets = sorted(set(buckets))
        matching = pl.col(column).is_in(pl.Series(wanted, dtype=pl.String).implode())
        cached = self._frames.get(name)
        if self._buckets is not None or (cached is not None and cached[0] == version):
            return self.read_buckets(name, manifest, buckets).filter(matching)
        self.buckets_read[name] = self.buckets_read.get(name, 0) + len(buckets)
        table = self.open_version(name, version)
        partitions = [(BUCKET, "in", [str(b) for b in buckets])]
        if self.is_remote:
            dataset = table.to_pyarrow_dataset(file_pruning_predicate=partitions)
            frame = arrow_frame(dataset.to_table(filter=pc.field(column).isin(wanted)))
        else:
            files = table.file_uris(file_pruning_predicate=partitions)
            frame = (pl.scan_parquet(files, hive_partitioning=True).filter(matching).collect()
                     if files else spec.empty())
        self.rows_read[name] = self.rows_read.get(name, 0) + frame.height
        return typed(frame, spec)

    def rows_per_bucket(self, name: str, manifest: Manifest) -> float:
        """A bucket's rows of a table on average, as committed (from the table's metadata), over this
        Store's bucket count (a migration reads a store of another layout through it)."""
        return self.row_count(name, manifest) / max(1, self.n_buckets)

    def tally(self, name: str, tally: str, manifest: Manifest) -> int | None:
        """One of a table's tallies (tables.TableSpec.tallies) as of the committed state, from the
        store log (no data read): 0 for a table never written, None when the log does not record
        it (a store last written by an earlier version, or a copied table not counted since)."""
        if manifest.versions.get(name) is None:
            return 0
        recorded = ((manifest.details.get("tallies") or {}).get(name) or {}).get(tally)
        return None if recorded is None else int(recorded)

    def row_count(self, name: str, manifest: Manifest) -> int:
        """Rows of a table as of the committed state, from the table's metadata (no data read)."""
        version = manifest.versions.get(name)
        if version is None:
            return 0
        recorded = (manifest.details.get("rows") or {}).get(name)
        if recorded is not None:
            return int(recorded)
        cached = self._frames.get(name)
        if cached is not None and cached[0] == version:
            return cached[1].height
        return int(pc.sum(self._add_actions(name, version).column("num_records")).as_py() or 0)

    def _add_actions(self, name: str, version: int) -> pa.Table:
        """The data files of a table at a version, one row each, from its Delta log (no data read)."""
        return pa.table(self.open_version(name, version).get_add_actions(flatten=True))

    def files_per_bucket(self, name: str, manifest: Manifest) -> dict[int, int]:
        """How many data files make up each bucket of a table as committed."""
        version = manifest.versions.get(name)
        if version is None:
            return {}
        buckets = self._add_actions(name, version).column(f"partition.{BUCKET}")
        counted = pc.value_counts(buckets).to_pylist()  # no per-file Python work
        return {int(entry["values"]): int(entry["counts"]) for entry in counted}

    def bucket_files(self, name: str, manifest: Manifest) -> dict[int, list[str]]:
        """The data files (paths in the table, sorted) of each bucket of a table as of the committed
        state, from the table's metadata (no data read). Data files are immutable and their paths
        unique, so equal lists mean equal rows (a file's deletion vector, if any, is named after its
        path)."""
        version = manifest.versions.get(name)
        if version is None:
            return {}
        actions = self._add_actions(name, version)
        paths = actions.column("path").to_pylist()
        vectors = [actions.column(c).to_pylist() for c in actions.column_names if c.startswith("deletionVector.")]
        files: dict[int, list[str]] = {}
        for i, bucket in enumerate(actions.column(f"partition.{BUCKET}").to_pylist()):
            marks = [str(v[i]) for v in vectors if v[i] is not None]  # a deletion vector: fewer rows
            files.setdefault(int(bucket), []).append("#".join([paths[i], *marks]))
        return {bucket: sorted(paths) for bucket, paths in sorted(files.items())}

    def rows(self, name: str, column: str, values: Iterable[str], manifest: Manifest | None = None) -> pl.DataFrame:
        """The committed rows whose ``column`` (the table's bucket column) is one of ``values``."""
        spec = spec_for(name)
        if column != spec.bucket_by:
            raise ValueError(f"table {name!r} is bucketed by {spec.bucket_by!r}; rows by {column!r} need a whole read")
        manifest = manifest or self.manifest()
        wanted = sorted(set(values))
        n_buckets = self.layout_buckets(manifest)
        buckets = {bucket_of(v, n_buckets) for v in wanted}
        if worth_a_presence_check(len(buckets), n_buckets):
            buckets = {bucket_of(v, n_buckets) for v in self.held_among(name, manifest, column, wanted)}
        frame = self.read_buckets(name, manifest, buckets)
        return frame.filter(pl.col(column).is_in(wanted))

    def held_among(self, name: str, manifest: Manifest, column: str, values: list[str],
                   held: pl.Series | None = None) -> list[str]:
        """The values that the committed table holds in ``column`` (``held``: that column, if read).

        The column is probed for the looked-up values (a set the size of the change), not made
        unique (a set the size of the table)."""
        held = self.read_column(name, manifest, column) if held is None else held
        found = held.filter(held.is_in(pl.Series(values, dtype=pl.String).implode())).unique()
        return sorted(found.to_list())

    def layout_buckets(self, manifest: Manifest) -> int:
        """The bucket count the store's rows were written with (this Store's own for a new store)."""
        layout = manifest.details.get("layout") if manifest.seq else None
        if manifest.seq and not layout:
            raise StoreLayoutError(
                f"store {self.uri} has the layout of an earlier version (forms and fact assertions bucketed by "
                "document)", hint=f"run: lightfoot migrate --store {self.uri}")
        if layout and layout.get("version") != LAYOUT_VERSION:
            older = isinstance(layout.get("version"), int) and layout["version"] < LAYOUT_VERSION
            raise StoreLayoutError(f"store {self.uri} has layout {layout.get('version')}, this version reads "
                                   f"layout {LAYOUT_VERSION}",
                                   hint=f"run: lightfoot migrate --store {self.uri}" if older
                                   else "use the Lightfoot version that wrote it")
        if layout:
            self.n_buckets = int(layout["n_buckets"])
        return self.n_buckets

    def open_version(self, name: str, version: int) -> DeltaTable:
        """A store table at a version, opened once per process (a version never changes);
        StoreError when the version is gone from storage."""
        table = self._tables.pop((name, version), None)
        if table is None:
            table = self.open_table(self.table_uri(name), version)
            if table is None:
                raise StoreError(f"table {name!r} is in the store log at version {version} but missing on storage")
        self.keep_open_table(name, table)
        return table

    def keep_open_table(self, name: str, table: DeltaTable) -> None:
        """Keep a store table opened at its current version for :meth:`open_version` (one version
        per table): a commit keeps the version it wrote, recovery the version it checked."""
        self._tables = {k: t for k, t in self._tables.items() if k[0] != name}
        self._tables[(name, table.version())] = table

    def remember_rows(self, name: str, version: int, frame: pl.DataFrame) -> None:
        """Keep a store table's whole rows at a version for this process's later reads of that
        version (a read, or a commit that staged the whole table)."""
        self._frames[name] = (version, frame.select([*spec_for(name).columns, BUCKET]))

    def forget_rows(self, name: str) -> None:
        """Drop the rows kept of a store table (a commit changed it and holds only some buckets)."""
        self._frames.pop(name, None)

    def read_files(self, table: DeltaTable, spec: TableSpec, columns: list[str] | None = None) -> pl.DataFrame:
        """The rows of a Delta table's data files at the version it is open at (``columns``: only
        these, the bucket among them only if named). Local tables are read straight from their
        Parquet files (the bucket comes from the partition path); remote ones through delta-rs."""
        if self.is_remote:
            return arrow_frame(table.to_pyarrow_table(columns=columns))
        files = table.file_uris()
        if not files:
            return spec.empty() if columns is None else spec.empty().select(columns)
        return pl.read_parquet(files, columns=columns, hive_partitioning=columns is None or BUCKET in columns)

    # -- writing ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, relayout: int | None = None) -> Iterator[Transaction]:
        """Exclusive write access: lock, recover a crashed commit, then stage and commit writes.

        The store's recorded layout sets the bucket count. ``relayout`` (a migration) opens a store
        of any layout instead, to rewrite every table whole into ``relayout`` buckets (or the
        recorded count, else this Store's).
        """
        with self._lock():
            manifest, heads = recover(self)
            if relayout is not None:
                layout = manifest.details.get("layout") or {}
                self.n_buckets = relayout or int(layout.get("n_buckets") or self.n_buckets)
            yield Transaction(self, manifest, heads, adopt_layout=relayout is None)

    def _lock(self) -> contextlib.AbstractContextManager[None]:
        root = self.local_root()
        return contextlib.nullcontext() if root is None else local_file_lock(root / "_lightfoot" / "writer.lock")

    def table_locations(self) -> list[tuple[str, str]]:
        """The name and URI of every store table (tables.all_specs), whether written yet or not."""
        return [(spec.name, self.table_uri(spec.name)) for spec in all_specs()]

    # -- maintenance -----------------------------------------------------------------------

    def vacuum(self, orphan_grace_hours: int = ORPHAN_GRACE_HOURS,
               only: Collection[str] | None = None) -> dict[str, int]:
        """Remove every data file and log entry that the current versions no longer use (of the
        tables named in ``only``: table names, ``journal/<name>`` or ``store_log``; default all).

        The logged version of each table is kept too: it differs from the newest version only
        when a writer is between its table writes and its log row, and readers read it. Files
        that no version references are removed once older than ``orphan_grace_hours`` (see
        ORPHAN_GRACE_HOURS); pass 0 only when no writer can be running.
        """
        if orphan_grace_hours > REMOVED_FILES_LISTED_HOURS:  # see log.REMOVED_FILES_LISTED_HOURS
            raise ValueError(f"an orphan grace of {orphan_grace_hours} h would leave removed files that the "
                             f"tables list for {REMOVED_FILES_LISTED_HOURS} h only")
        removed: dict[str, int] = {}
        logged = self.manifest().versions
        uris = [(name, uri) for name, uri in self.table_locations()]
        uris += [(f"journal/{name}", self.journal_uri(name)) for name, _ in self.table_locations()]
        uris.append(("store_log", self.path("_lightfoot", "store_log")))
        if only is not None:
            uris = [(name, uri) for name, uri in uris if name in only]
        for name, uri in uris:
            table = self.open_table(uri)
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

        return lancedb.connect(self.path("vectors"), storage_options=self.connection_options())


