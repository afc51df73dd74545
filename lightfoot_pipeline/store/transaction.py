"""A store transaction: tables staged in memory, then committed together.

**Commits are atomic across tables.** A commit writes each changed table (one Delta commit per
table), then appends a row to the store log naming the new version of every table. Readers read
each table at the version the newest log row names, so they never see half of a commit. A writer
that finds a table ahead of the log (a crash between the two steps) restores it to the logged
version before it does anything else.

**Commits are conditional, so racing writers lose no commit.** The check that nobody committed
since the transaction read (store.py, "One writer at a time") is only a fast path; what makes a
commit safe without a lock is that every step of it is a Delta commit of one exact version, written
with no retry. Delta writes version N+1 of a table by creating ``_delta_log/<N+1>.json`` only if it
does not exist: an atomic rename on a local disk, a conditional PUT (``If-None-Match: *``) on S3 and
S3-compatible stores, which deltalake 1.6 uses by default (it has no DynamoDB locking provider). So:

- a transaction notes each table's version when it starts (after recovery) and writes the table
  on top of exactly that version: if another writer wrote the table since, the write fails;
- the store-log row is appended on top of exactly the log version the transaction read: of two
  writers that both passed the seq check, one appends seq N+1 and the other fails;
- either failure raises :class:`ConcurrentCommitError` (run the operation again); the loser's
  table writes were never logged, so readers never see them and the next transaction's recovery
  undoes them.

The guarantee needs a store that honours conditional PUTs (AWS S3 since August 2024, MinIO and
Cloudflare R2 do; check any other S3-compatible server); on one that ignores them two writers can
both create the same version, so keep a single writer there (the orchestrator's pool). deltalake 1.6
ignores the old ``AWS_S3_LOCKING_PROVIDER=dynamodb`` setting, so the store does not pass it on.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import polars as pl
from deltalake import DeltaTable, write_deltalake

from lightfoot_pipeline.store.batches import commit_details, note_commit
from lightfoot_pipeline.store.log import (
    EXACT_VERSION,
    LOG_SCHEMA,
    TABLE_CONFIGURATION,
    ConcurrentCommitError,
    Manifest,
    StoreError,
    conflicts_as,
)
from lightfoot_pipeline.store.recovery import create_table
from lightfoot_pipeline.store.tables import (
    BUCKET,
    LAYOUT_VERSION,
    TableSpec,
    bucket_groups,
    bucket_of,
    conform,
    held_nearly_everywhere,
    probe_of,
    spec_for,
    worth_a_presence_check,
)
from lightfoot_pipeline.store.write_plan import WritePlan, plan_writes, rewritten, write_order

# Tables written at once by one commit. Each holds an Arrow copy of its rows while it is written, so
# a commit of more than LARGE_COMMIT_ROWS rows writes fewer at a time.
WRITE_THREADS = 4
LARGE_COMMIT_ROWS = 500_000
# A rewrite of buckets that lost rows reads, changes and writes this many rows at a time (about),
# so that a change reaching every bucket of a table of millions of rows holds a group, not the table.
REWRITE_ROWS = 250_000
# A transaction keeps the buckets it reads whole, for later lookups and the commit's rewrite of
# them, up to this many rows; past that it holds only the rows of the values it looks up.
KEPT_ROWS = 1_000_000
# A commit that writes to at least this many buckets of a table is followed by a checkpoint of its
# Delta log. Each later opening of the table (every transaction and read that uses it) would
# otherwise replay the commit's thousands of file actions as JSON, up to the table's checkpoint
# interval (log.TABLE_CONFIGURATION); a checkpoint is one Parquet file read in a fraction of the
# time, and costs one such read to write.
CHECKPOINT_AFTER_BUCKETS = 256


class Transaction:
    """A working copy of the tables, read at one manifest and committed together.

    A stage reads the rows it needs with :meth:`rows` (the rows of the given keys only) or a
    whole table with :meth:`table` (a full rebuild), and stages changes with :meth:`update` (or a
    whole new table with :meth:`put`). The transaction holds, per table, the rows it has looked up,
    never whole buckets, so what it holds follows the change, not the store; a removal can only
    touch those rows, and nothing reaches storage until :meth:`commit`, which writes only the
    buckets that changed: rows appended to those that only grew, and those that lost a row
    rewritten a group at a time from their committed rows and the staged changes.
    ``store`` is the Store whose ``transaction()`` opened it (store.py); a transaction opened
    directly on a manifest (a dry run, never committed) works the same. Either way the store's
    recorded layout sets the bucket count, and a store of an earlier layout is refused
    (StoreLayoutError), except by a migration (``adopt_layout=False``).
    """

    def __init__(self, store, manifest: Manifest, heads: dict[str, int] | None = None, *,
                 adopt_layout: bool = True) -> None:
        self.store = store
        self.manifest = manifest
        if adopt_layout:  # rows are found in the buckets the store's layout put them in
            store.layout_buckets(manifest)
        # The version each table is written on top of (see the module docstring): its version at
        # the start, after recovery; without recovery, the logged one.
        self._heads: dict[str, int] = dict(manifest.versions if heads is None else heads)
        self._original: dict[str, pl.DataFrame] = {}
        self._working: dict[str, pl.DataFrame] = {}
        # The values of each table's bucket column whose committed rows were looked up (and are
        # held); None means the whole table was read.
        self._seen: dict[str, pl.Series | None] = {}
        # Buckets each table's staged changes may touch; None means "compare every bucket".
        self._touched: dict[str, set[int] | None] = {}
        # The rows each table's staged changes removed and added, so that a commit finds what
        # changed from them rather than by comparing every bucket read; None after put().
        self._changes: dict[str, tuple[list[pl.DataFrame], list[pl.DataFrame]] | None] = {}
        # Committed columns read whole to tell which looked-up values a table holds, and the columns
        # whose values a table was found to hold in nearly every bucket (see rows).
        self._columns: dict[tuple[str, str], pl.Series] = {}
        self._dense: set[tuple[str, str]] = set()
        # Whole buckets read, as committed, kept for later lookups and a rewrite at commit (KEPT_ROWS).
        self._kept: dict[tuple[str, int], pl.DataFrame] = {}
        self._kept_rows = 0
        # Tables staged as another store's (copy_from): that store, the state copied and the buckets.
        self._copies: dict[str, tuple[Any, Manifest, Sequence[int]]] = {}
        # What the index is built with (embedder, thresholds); carried from commit to commit.
        self.config: dict = dict(manifest.config)

    @property
    def n_buckets(self) -> int:
        return self.store.n_buckets

    def buckets_of(self, values: Iterable[str]) -> set[int]:
        return {bucket_of(v, self.n_buckets) for v in values}

    def loaded(self, name: str) -> set[int] | None:
        """The buckets of a table whose rows this transaction has looked up (None: the whole table
        was read). A bucket is never held whole: only the rows of the values looked up are."""
        self._start(name)
        seen = self._seen[name]
        return None if seen is None else self.buckets_of(seen.to_list())

    def _start(self, name: str) -> None:
        if name not in self._working:
            frame = spec_for(name).empty()
            self._original[name] = self._working[name] = frame
            self._seen[name] = pl.Series("v", [], dtype=pl.String)
            self._touched[name] = set()
            self._changes[name] = ([], [])

    def _unseen(self, name: str, values: list[str]) -> list[str]:
        seen = self._seen[name]
        if seen is None or not values:
            return []
        asked = pl.Series("v", values, dtype=pl.String)
        return asked.filter(~asked.is_in(seen.implode())).to_list()

    def _take(self, name: str, values: list[str], frame: pl.DataFrame) -> None:
        """Hold the committed rows of looked-up values (``frame``: all of them, read from storage)."""
        seen = self._seen[name]
        assert seen is not None, "a table read whole has no values left to look up"
        self._seen[name] = pl.concat([seen, pl.Series("v", values, dtype=pl.String)])
        if frame.height:
            self._original[name] = pl.concat([self._original[name], frame])
            self._working[name] = pl.concat([self._working[name], frame])

    def table(self, name: str) -> pl.DataFrame:
        """The whole table as staged so far in this transaction (with its bucket column)."""
        self._start(name)
        seen = self._seen[name]
        if seen is not None:
            spec = spec_for(name)
            whole = self.store.read(name, self.manifest)
            if seen.len():  # the rows of the values looked up are held already, with their changes
                whole = whole.filter(~pl.col(spec.bucket_by).is_in(seen.implode()))
            if self._original[name].height or self._working[name].height:  # rows looked up, or added
                self._original[name] = pl.concat([self._original[name], whole])
                self._working[name] = pl.concat([self._working[name], whole])
            else:
                self._original[name] = self._working[name] = whole
            self._seen[name] = None
        return self._working[name]

    def rows(self, name: str, column: str, values: Iterable[str]) -> pl.DataFrame:
        """The staged rows whose ``column`` is one of ``values``, reading only theirs.

        ``column`` is the table's bucket column (tables.py), or any column once the whole table
        has been read. The committed rows of a value are read once (the buckets of the values,
        scanned with the filter: ``Store.read_matching``) and held with this transaction's changes.
        """
        spec = spec_for(name)
        wanted = sorted(set(values))
        self._start(name)
        if column == spec.bucket_by:
            unseen = self._unseen(name, wanted)
            if unseen:
                self._look_up(name, column, unseen)
        elif self._seen[name] is not None:
            raise ValueError(f"table {name!r} is bucketed by {spec.bucket_by!r}: rows by {column!r} need tx.table()")
        frame = self._working[name]
        return frame.filter(pl.col(column).is_in(wanted)) if wanted else frame.clear()

    def _look_up(self, name: str, column: str, values: list[str]) -> None:
        """Read and hold the committed rows of values not looked up yet. A lookup that would read many
        buckets first asks which of the values the table holds (see _held), so a batch of new
        documents reads none of their buckets."""
        asked = values
        buckets = [bucket_of(v, self.n_buckets) for v in values]  # once per lookup: a hash a value
        unread = {b for b in set(buckets) if (name, b) not in self._kept}
        if worth_a_presence_check(len(unread), self.n_buckets):
            values, buckets = self._held(name, column, values, buckets)
        self._take(name, asked, self._committed_rows_of(name, column, values, buckets))

    def _committed_rows_of(self, name: str, column: str, values: list[str], buckets: list[int]) -> pl.DataFrame:
        """The committed rows of some values (``buckets``: each one's bucket). Buckets read are kept
        whole while the transaction keeps fewer than KEPT_ROWS rows of them, so that later lookups
        and the commit's rewrite of them read nothing again; past that, the buckets are scanned for
        the values' rows alone (``Store.read_matching``), so what a large change holds follows the
        change, not the store."""
        if not values:
            return spec_for(name).empty()
        matching = pl.col(column).is_in(pl.Series(values, dtype=pl.String).implode())
        distinct = sorted(set(buckets))
        frames = [self._kept[(name, b)] for b in distinct if (name, b) in self._kept]
        unread = [b for b in distinct if (name, b) not in self._kept]
        if unread:
            if self._kept_rows + self.store.rows_per_bucket(name, self.manifest) * len(unread) <= KEPT_ROWS:
                whole = self.store.read_buckets(name, self.manifest, unread)
                parts = {key[0]: part for key, part in whole.partition_by(BUCKET, as_dict=True).items()}
                for bucket in unread:
                    self._kept[(name, bucket)] = parts.get(bucket, whole.clear())
                self._kept_rows += whole.height
                frames.append(whole)
            else:
                scanned = set(unread)
                rest = [(v, b) for v, b in zip(values, buckets, strict=True) if b in scanned]
                frames.append(self.store.read_matching(name, self.manifest, column, [v for v, _ in rest],
                                                       [b for _, b in rest]))
        found = pl.concat(frames) if frames else spec_for(name).empty()
        return found.filter(matching)

    def _held(self, name: str, column: str, values: list[str], buckets: list[int]) -> tuple[list[str], list[int]]:
        """Of many looked-up values (with their buckets), those whose buckets are worth reading. The
        first such lookup of a column reads the values of a few buckets first (tables.probe_of): if
        they are held in nearly all of them, every value's bucket is read, then and later, rather
        than the column whole; otherwise the column tells which values the table holds (a batch's
        new documents and facts)."""
        key = (name, column)
        if key not in self._columns and key not in self._dense:
            probe = set(probe_of(set(buckets)))
            probed = [(v, b) for v, b in zip(values, buckets, strict=True) if b in probe]
            hits = self._committed_rows_of(name, column, [v for v, _ in probed], [b for _, b in probed])
            self._take(name, [v for v, _ in probed], hits)
            if held_nearly_everywhere(hits.get_column(BUCKET).n_unique(), sorted(probe)):
                self._dense.add(key)
            probed_values = {v for v, _ in probed}
            kept = [(v, b) for v, b in zip(values, buckets, strict=True) if v not in probed_values]
            values, buckets = [v for v, _ in kept], [b for _, b in kept]
        if key in self._dense:
            return values, buckets
        held = set(self._committed_among(name, column, values))
        pairs = [(v, b) for v, b in zip(values, buckets, strict=True) if v in held]
        return [v for v, _ in pairs], [b for _, b in pairs]

    def _committed_among(self, name: str, column: str, values: list[str]) -> list[str]:
        """The values that the committed table holds in ``column`` (the column is read once per transaction)."""
        key = (name, column)
        if key not in self._columns:
            self._columns[key] = self.store.read_column(name, self.manifest, column)
        return self.store.held_among(name, self.manifest, column, values, self._columns[key])

    def count(self, name: str) -> int:
        """Rows of the table as staged: the committed count, with this transaction's changes."""
        self._start(name)
        if self._seen[name] is None:
            return self._working[name].height
        committed = self.store.row_count(name, self.manifest)
        return committed + self._working[name].height - self._original[name].height

    def staged(self, name: str) -> pl.DataFrame:
        """The rows looked up so far, with this transaction's changes."""
        self._start(name)
        return self._working[name]

    def touched_rows(self, name: str) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The rows held of the buckets this transaction changed in a table: as read, and as staged
        (every row this transaction removed or added among them)."""
        self._start(name)
        touched, original, working = self._touched[name], self._original[name], self._working[name]
        if touched is None:
            return original, working
        scope = sorted(touched)
        return original.filter(pl.col(BUCKET).is_in(scope)), working.filter(pl.col(BUCKET).is_in(scope))

    def committed_rows(self, name: str, column: str, values: Iterable[str]) -> pl.DataFrame:
        """Like :meth:`rows`, as the table was read (before this transaction's changes)."""
        wanted = sorted(set(values))
        self.rows(name, column, wanted)
        return self._original[name].filter(pl.col(column).is_in(wanted))

    def put(self, name: str, frame: pl.DataFrame) -> None:
        """Stage the whole new content of a table (rows carry their bucket column)."""
        spec = spec_for(name)
        self.table(name)
        self._working[name] = frame.select([*spec.columns, BUCKET])
        self._touched[name] = None
        self._changes[name] = None

    def copy_from(self, name: str, source, manifest: Manifest, buckets: Iterable[int] | None = None) -> None:
        """Stage the whole content of a table as another store's (of the same bucket count) at
        ``manifest``: at commit it is copied a group of buckets at a time (about REWRITE_ROWS rows),
        never held whole (a graph derived in a store of its own, relink.py). ``buckets``: only these
        (this store's own at its manifest: each bucket rewritten as one file, compaction.py). The
        table takes no other change in this transaction."""
        theirs = source.layout_buckets(manifest)
        if theirs != self.n_buckets:
            raise StoreError(f"table {name!r}: a copy needs the same bucket count ({theirs} there, "
                             f"{self.n_buckets} here)")
        chosen = range(self.n_buckets) if buckets is None else sorted(set(buckets))
        if not chosen:
            return
        self._start(name)
        self._copies[name] = (source, manifest, chosen)

    def update(self, name: str, remove: pl.Series | pl.Expr | None = None, add: pl.DataFrame | None = None) -> None:
        """Stage a change: drop the staged rows that ``remove`` selects, then add ``add``.

        ``remove`` is a predicate over the table's columns, or a mask over the frame that
        :meth:`table` or the staged rows currently are; it reaches only the rows looked up so far,
        so look up the rows to drop first (:meth:`rows`). Added rows need no lookup: a bucket
        that only gained rows gets them appended, so a batch of new documents writes what it adds
        and reads few of the buckets it lands in (see rows); a bucket that lost a row is rewritten
        at commit (write_plan.py). Only the buckets of dropped and added rows are written, so
        small changes to large tables cost little.
        """
        spec = spec_for(name)
        self._start(name)
        if name in self._copies:
            raise ValueError(f"table {name!r} is staged as a copy of another store's: it takes no other change")
        current = self._working[name]
        touched: set[int] = set()
        if remove is not None:
            mask = current.select(remove.fill_null(False)).to_series() if isinstance(remove, pl.Expr) else remove
            if mask.len() != current.height:
                raise ValueError(f"a removal mask over {mask.len()} rows given for {current.height} staged rows of {name!r}")
            if mask.any():
                dropped = current.filter(mask)
                touched.update(dropped.get_column(BUCKET).unique().to_list())
                current = current.filter(~mask)
                changes = self._changes[name]
                if changes is not None:
                    changes[0].append(dropped)
        self._working[name] = current
        if add is not None and add.height:
            add = add.select([*spec.columns, BUCKET]).cast(spec.empty().schema)
            touched.update(add.get_column(BUCKET).unique().to_list())
            self._working[name] = pl.concat([self._working[name], add])
            changes = self._changes[name]
            if changes is not None:
                changes[1].append(add)
        previous = self._touched[name]
        self._touched[name] = None if previous is None else previous | touched

    def pending(self) -> dict[str, list[int]]:
        """Buckets that a commit now would write, per table."""
        return {name: sorted(set(plan.rewrite) | set(plan.append)) for name, plan in self._plan().items()}

    def _plan(self) -> dict[str, WritePlan]:
        """Per changed table, what a commit writes (write_plan.py)."""
        out = {}
        for name, frame in self._working.items():
            if frame is self._original[name] or name in self._copies:
                continue
            plan = plan_writes(spec_for(name), self._original[name], frame, self._touched.get(name),
                               self._changes.get(name),
                               functools.partial(self.store.files_per_bucket, name, self.manifest))
            if plan is not None:
                out[name] = plan
        return out

    def commit(self, operation: str, details: dict | None = None) -> Manifest:
        """Write every changed table, then the store-log row that makes them visible together."""
        current = self.store.manifest()
        if current.seq != self.manifest.seq:
            raise ConcurrentCommitError(
                f"store changed while this {operation} ran (read seq {self.manifest.seq}, now {current.seq})"
            )
        versions = dict(self.manifest.versions)
        plans = self._plan()
        held = {name: self._rows_held(name, plan) for name, plan in plans.items()}
        order = write_order(held)
        written = {name: len(plan.rewrite) + len(plan.append) for name, plan in plans.items()}
        counts = {name: self.count(name) for name in written}
        tallies = {**(self.manifest.details.get("tallies") or {}),
                   **{name: self._tallies(name) for name in written if spec_for(name).tallies}}
        for name, (source, at, buckets) in sorted(self._copies.items()):  # each alone: a group at a time
            versions[name] = self._copy_table(spec_for(name), source, at, buckets)
            self._checkpoint_if_large(name, versions[name], len(buckets))
            written[name] = len(buckets)
            tallies.pop(name, None)  # not known until a later commit counts them again
            counts[name] = source.row_count(name, at) if len(buckets) == self.n_buckets else self.count(name)
        for name in written:  # the rows as read are compared now: let them go before the writes copy rows
            self._original[name] = self._working[name]
        # The first table is written alone, the heavy ones in turn (write_plan.write_order says why).
        # The tables are independent until the log row names them and are written in parallel (delta-rs
        # releases the GIL); a failure leaves the log untouched.
        def write(name: str) -> int:
            plan, version = plans[name], self._heads.get(name)
            spec = spec_for(name)
            if plan.rewrite and plan.changes is None:  # a table read whole: its staged rows are its buckets
                rows = self._working[name]
                if not set(rows.get_column(BUCKET).unique().to_list()) <= set(plan.rewrite):
                    rows = rows.filter(pl.col(BUCKET).is_in(plan.rewrite))
                version = self._write_table(spec, rows, plan.rewrite)
            elif plan.rewrite:
                version = self._rewrite_buckets(spec, plan)
            if plan.append:
                version = self._write_table(spec, plan.added, plan.append, append=True)
            assert version is not None, "a write plan rewrites or appends to at least one bucket"
            self._checkpoint_if_large(name, version, len(set(plan.rewrite) | set(plan.append)))
            return version

        if order.first is not None:
            versions[order.first] = write(order.first)
        large = sum(held.values()) > LARGE_COMMIT_ROWS
        with ThreadPoolExecutor(max_workers=WRITE_THREADS // 2 if large else WRITE_THREADS,
                                thread_name_prefix="commit") as pool:
            in_turn = pool.submit(lambda: {name: write(name) for name in order.in_turn})
            futures = {name: pool.submit(write, name) for name in order.at_once}
            versions.update(in_turn.result())
            for name, future in futures.items():
                versions[name] = future.result()
        rows = {**(self.manifest.details.get("rows") or {}), **counts}
        details = {**commit_details(), **(details or {}), "buckets_written": written, "config": self.config, "rows": rows,
                   **({"tallies": tallies} if tallies else {}),
                   "layout": {"version": LAYOUT_VERSION, "n_buckets": self.n_buckets}}
        manifest = self._append_log(self.manifest.seq + 1, operation, versions, details, read_at=self.manifest.log_version)
        note_commit(manifest.seq)
        for name in written:
            if name in self._copies:
                self.store.forget_rows(name)
                self._seen[name] = pl.Series("v", [], dtype=pl.String)  # nothing held: rows are looked up again
                self._working[name] = spec_for(name).empty()
            elif self._seen[name] is None:
                self.store.remember_rows(name, versions[name], self._working[name])
            else:
                self.store.forget_rows(name)
        self.manifest = manifest
        for name, seen in self._seen.items():
            if seen is not None and name in written:  # rows added for values not looked up are stored now
                by = spec_for(name).bucket_by
                self._working[name] = self._working[name].filter(pl.col(by).is_in(seen.implode()))
        self._original = dict(self._working)
        self._touched = {name: set() for name in self._working}
        self._changes = {name: ([], []) for name in self._working}
        self._columns.clear()
        self._dense.clear()
        self._kept.clear()
        self._kept_rows = 0
        self._copies.clear()
        return manifest

    def _tallies(self, name: str) -> dict[str, int]:
        """A table's tallies (tables.TableSpec.tallies) as staged: the committed ones, with what
        this transaction's changes added and removed among the rows it holds. A store whose log
        does not record them yet (written by an earlier version) has them counted from storage."""
        spec = spec_for(name)
        recorded = (self.manifest.details.get("tallies") or {}).get(name) or {}
        original, working = self._original[name], self._working[name]
        committed: pl.DataFrame | None = None
        out = {}
        for tally, predicate in spec.tallies:
            matches = predicate()
            if tally in recorded:
                before = int(recorded[tally])
            elif self._seen[name] is None:  # the whole table is held, as committed
                before = _matching(original, matches)
            else:
                if committed is None:
                    columns = sorted({c for _, p in spec.tallies for c in p().meta.root_names()})
                    committed = self.store.read_columns(name, self.manifest, columns)
                before = _matching(committed, matches)
            out[tally] = before + _matching(working, matches) - _matching(original, matches)
        return out

    def _checkpoint_if_large(self, name: str, version: int, buckets_written: int) -> None:
        """Checkpoint a table's Delta log after a commit that wrote many of its buckets (see
        CHECKPOINT_AFTER_BUCKETS)."""
        if buckets_written >= CHECKPOINT_AFTER_BUCKETS:
            self.store.open_version(name, version).create_checkpoint()

    def _copy_table(self, spec: TableSpec, source, manifest: Manifest, buckets: Sequence[int]) -> int:
        """Write another store's buckets of a table as this one's, a group of buckets at a time (copy_from)."""
        version = self._heads.get(spec.name)
        for group in bucket_groups(buckets, source.rows_per_bucket(spec.name, manifest), REWRITE_ROWS):
            version = self._write_table(spec, source.read_buckets(spec.name, manifest, group), group)
        assert version is not None
        return version

    def _rows_held(self, name: str, plan: WritePlan) -> int:
        """About how many rows a table's write holds at once: a table read whole its staged rows, a
        rewrite of looked-up rows one group of buckets (see _rewrite_buckets)."""
        if plan.changes is None:
            return (self._working[name].height if plan.rewrite else 0) + plan.added.height
        if not plan.rewrite:
            return plan.added.height
        per_bucket = self.store.rows_per_bucket(name, self.manifest)
        return min(REWRITE_ROWS, round(per_bucket * len(plan.rewrite))) + plan.added.height

    def _rewrite_buckets(self, spec: TableSpec, plan: WritePlan) -> int:
        """Rewrite the buckets that lost a row (or hold too many files) from their committed rows and
        the transaction's net changes, a group of buckets of about REWRITE_ROWS rows at a time: each
        group's rows are read, changed, written (one Delta commit of the table each) and let go, so
        a change that reaches every bucket holds one group, never the table. The store log names the
        table's last version only, so readers never see a table half rewritten, and recovery undoes
        the groups a failed commit wrote (recovery.py)."""
        assert plan.changes is not None
        removed, added = plan.changes
        version = self._heads.get(spec.name)
        for group in bucket_groups(plan.rewrite, self.store.rows_per_bucket(spec.name, self.manifest), REWRITE_ROWS):
            unread = [b for b in group if (spec.name, b) not in self._kept]
            committed = pl.concat([self.store.read_buckets(spec.name, self.manifest, unread),
                                   *(self._kept[(spec.name, b)] for b in group if (spec.name, b) in self._kept)])
            in_group = pl.col(BUCKET).is_in(group)
            rows = rewritten(committed, removed.filter(in_group), added.filter(in_group), spec)
            version = self._write_table(spec, rows, group)
        assert version is not None
        return version

    def _write_table(self, spec: TableSpec, rows: pl.DataFrame, buckets: list[int], append: bool = False) -> int:
        """Replace the buckets' rows (or, with ``append``, add these rows to them) as the version right
        after this transaction's head of the table."""
        uri = self.store.table_uri(spec.name)
        data = conform(rows, spec)
        head = self._heads.get(spec.name)
        if head is None:
            table = create_table(self.store, uri, spec.arrow_schema, [BUCKET], f"table {spec.name!r}",
                                 name=spec.name, description=spec.description)
        else:
            try:
                table = self.store.open_version(spec.name, head)
            except StoreError as err:
                raise StoreError(f"table {spec.name!r} was at version {head} when this transaction began, "
                                 "and is gone") from err
        with conflicts_as(ConcurrentCommitError, f"writing {spec.name}"):
            _adopt_configuration(table)
            if append:
                write_deltalake(table, data, mode="append", partition_by=[BUCKET], commit_properties=EXACT_VERSION)
            else:
                predicate = f"{BUCKET} IN ({', '.join(str(b) for b in buckets)})"
                write_deltalake(table, data, mode="overwrite", predicate=predicate, partition_by=[BUCKET],
                                commit_properties=EXACT_VERSION)
        self._heads[spec.name] = table.version()
        self.store.keep_open_table(spec.name, table)
        return table.version()

    def _append_log(
        self, seq: int, operation: str, versions: dict[str, int], details: dict, *, read_at: int | None
    ) -> Manifest:
        """Append the log row as the log version right after ``read_at`` (the version the
        committing transaction read), or raise ConcurrentCommitError if another writer got there
        first: two writers can never both commit seq N+1."""
        now = dt.datetime.now(dt.UTC)
        # Built through Polars: a row of Python values given to pyarrow makes it load pandas (seconds).
        row = pl.DataFrame(
            {"seq": [seq], "operation": [operation], "versions": [json.dumps(versions, sort_keys=True)],
             "details": [json.dumps(details, sort_keys=True, default=str)], "committed_at": [now]},
            schema={"seq": pl.Int64, "operation": pl.String, "versions": pl.String, "details": pl.String,
                    "committed_at": pl.Datetime("us", "UTC")},
        ).to_arrow().cast(LOG_SCHEMA)
        uri = self.store.path("_lightfoot", "store_log")
        if read_at is None:
            log = create_table(self.store, uri, LOG_SCHEMA, partition_by=None, what="the store log")
        else:
            log = self.store.open_table(uri, read_at)
            if log is None:
                raise StoreError(f"the store log at {uri} was read at version {read_at} but is gone")
        with conflicts_as(ConcurrentCommitError, f"committing seq {seq}"):
            write_deltalake(log, row, mode="append", commit_properties=EXACT_VERSION)
        return Manifest(seq=seq, versions=versions, operation=operation, details=details, committed_at=now,
                        log_version=log.version())


def _matching(frame: pl.DataFrame, predicate: pl.Expr) -> int:
    """How many of a frame's rows the predicate holds for (a null counts as no)."""
    return int(frame.select(predicate.sum()).item() or 0)


def _adopt_configuration(table: DeltaTable) -> None:
    """Give a table created by an earlier version the table properties of this one
    (log.TABLE_CONFIGURATION), as a version of its own before the write: a transaction's write is
    the only change to a table that the store log names, so a table ahead of the log after a crash
    is restored to the logged version by recovery like any other write."""
    current = table.metadata().configuration
    missing = {key: value for key, value in TABLE_CONFIGURATION.items() if current.get(key) != value}
    if missing:
        table.alter.set_table_properties(missing, commit_properties=EXACT_VERSION)
