"""A store transaction: tables staged in memory, then committed together.

**Commits are atomic across tables.** A commit writes each changed table (one Delta commit per
table), then appends a row to the store log naming the new version of every table. Readers read
each table at the version the newest log row names, so they never see half of a commit. A writer
that finds a table ahead of the log (a crash between the two steps) restores it to the logged
version before it does anything else.

**Commits are conditional, so racing writers lose no commit.** The check that nobody committed
since the transaction read (store.py, "One writer at a time") is only a fast path; what makes a
commit safe without a lock is that every step of it is a Delta commit of one exact version,
written with no retry. Delta writes version N+1 of a table by creating
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
"""

from __future__ import annotations

import datetime as dt
import json
from concurrent.futures import ThreadPoolExecutor

import polars as pl
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from lightfoot_pipeline.store.log import (
    EXACT_VERSION, LOG_SCHEMA, TABLE_CONFIGURATION, ConcurrentCommitError, Manifest, StoreError, conflicts_as,
)
from lightfoot_pipeline.store.tables import BUCKET, TableSpec, conform, spec_for

# Tables written at once by one commit.
WRITE_THREADS = 4


class Transaction:
    """A working copy of the tables, read at one manifest and committed together.

    Stages read a table with :meth:`table` and stage its new content with :meth:`put`; nothing
    reaches storage until :meth:`commit`, which writes only the buckets that differ from what
    was read. ``store`` is the Store whose ``transaction()`` opened it (store.py).
    """

    def __init__(self, store, manifest: Manifest, heads: dict[str, int] | None = None) -> None:
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
        manifest = self._append_log(
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
            table = self._create_table(
                uri, spec.arrow_schema, [BUCKET], f"table {spec.name!r}", name=spec.name, description=spec.description
            )
        else:
            table = self.store._open(uri, head)
            if table is None:
                raise StoreError(f"table {spec.name!r} was at version {head} when this transaction began, and is gone")
        predicate = f"{BUCKET} IN ({', '.join(str(b) for b in buckets)})"
        with conflicts_as(ConcurrentCommitError, f"writing {spec.name}"):
            write_deltalake(table, data, mode="overwrite", predicate=predicate, partition_by=[BUCKET],
                            commit_properties=EXACT_VERSION)
        self._heads[spec.name] = table.version()
        return table.version()

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
        uri = self.store.path("_lightfoot", "store_log")
        if read_at is None:
            log = self._create_table(uri, LOG_SCHEMA, partition_by=None, what="the store log")
        else:
            log = self.store._open(uri, read_at)
            if log is None:
                raise StoreError(f"the store log at {uri} was read at version {read_at} but is gone")
        with conflicts_as(ConcurrentCommitError, f"committing seq {seq}"):
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
                storage_options=self.store._options(), commit_properties=EXACT_VERSION, **metadata,
            )
        except (CommitFailedError, DeltaError) as err:
            if isinstance(err, CommitFailedError) or self.store._open(uri) is not None:
                raise ConcurrentCommitError(f"another writer created {what} first") from err
            raise
        if table.version() != 0:
            raise ConcurrentCommitError(f"another writer created {what} first")
        return table


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
