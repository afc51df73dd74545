"""Journals: append-only store tables outside the store log (the extraction cache, its claims,
the cost ledger and the other records that many writers append to at once).

Appends never conflict with each other, so journals are not versioned with the index tables; a
journal is read at its latest version. Two appenders can still lose a commit to each other: the
first appends to a journal that does not exist yet both try to create it, and a burst of appends
can outlast deltalake's own commit retries. :meth:`Journals.append_journal` therefore tries again,
with a bounded backoff, until the rows are written, and raises :class:`StoreError` only after
``APPEND_RETRY_S``; :meth:`Journals.ensure_journal` creates an empty journal race-free, before
the first concurrent writes. ``append_journal_after`` appends only on top of an exact version,
for records that must not race (a claim on a passage). :class:`Journals` is a part of
:class:`~lightfoot_pipeline.store.store.Store`.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING

import polars as pl
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from lightfoot_pipeline.store.log import (
    EXACT_VERSION,
    ORPHAN_GRACE_HOURS,
    TABLE_CONFIGURATION,
    ConcurrentCommitError,
    StoreError,
    conflicts_as,
)
from lightfoot_pipeline.store.roots import storage_failure
from lightfoot_pipeline.store.tables import BUCKET, TableSpec, conform, spec_for

# Journal appends (an answer at a time) leave small files; compaction waits for this many per bucket.
JOURNAL_FILES_PER_BUCKET = 4
# An append that lost its commit (or met a storage failure) is sent again after a wait that
# starts at APPEND_BACKOFF_S and doubles to APPEND_BACKOFF_MAX_S, for APPEND_RETRY_S at most.
APPEND_BACKOFF_S = 0.02
APPEND_BACKOFF_MAX_S = 2.0
APPEND_RETRY_S = 120.0


def typed(frame: pl.DataFrame, spec: TableSpec, columns: list[str] | None = None) -> pl.DataFrame:
    """Columns in the spec's order and types (Parquet and Arrow types differ in small ways), or
    only ``columns``, in that order, in the spec's types."""
    target = spec.empty().schema
    return frame.select([pl.col(c).cast(target[c]) for c in (target if columns is None else columns)])


class Journals:
    """The journal operations of a Store, through its public methods ``open_table``,
    ``journal_uri``, ``connection_options`` and ``read_files``, and its ``n_buckets``."""

    if TYPE_CHECKING:  # what the host Store provides (declared for the type checker only)
        n_buckets: int

        def open_table(self, uri: str, version: int | None = None) -> DeltaTable | None: ...
        def journal_uri(self, name: str) -> str: ...
        def connection_options(self) -> dict[str, str] | None: ...
        def read_files(self, table: DeltaTable, spec: TableSpec, columns: list[str] | None = None) -> pl.DataFrame: ...

    def read_journal(self, name: str, columns: list[str] | None = None) -> pl.DataFrame:
        """An append-only journal table at its latest version; ``columns``: only these are read
        (a purge reads the keys of a journal whose entries hold model replies)."""
        spec = spec_for(name)
        table = self.open_table(self.journal_uri(name))
        if table is None:
            return spec.empty() if columns is None else spec.empty().select(columns)
        if columns is None:
            return typed(self.read_files(table, spec), spec).select([*spec.columns, BUCKET])
        return typed(self.read_files(table, spec, columns), spec, columns)

    def append_journal(self, name: str, rows: pl.DataFrame, *, retry_for_s: float = APPEND_RETRY_S) -> int:
        """Append rows to a journal table, durable when this returns; the attempts it took.

        A commit lost to another writer (deltalake's CommitFailedError: two writers creating the
        journal, or more concurrent appends than deltalake retries) or a storage failure is tried
        again after a jittered backoff, until ``retry_for_s`` has passed; then StoreError says
        how many attempts failed and the last reason. A lost commit wrote nothing, so trying it
        again never doubles a row (its data files are orphans that vacuum removes); a storage
        failure met after the commit landed could, and the rows keep their ids to tell.
        """
        if rows.height == 0:
            return 0
        spec = spec_for(name)
        table = conform(rows, spec)
        deadline = time.monotonic() + retry_for_s
        attempts = 0
        while True:
            attempts += 1
            try:
                write_deltalake(self.journal_uri(name), table, mode="append", partition_by=[BUCKET],
                                configuration=TABLE_CONFIGURATION, storage_options=self.connection_options())
                return attempts
            except (DeltaError, OSError) as err:
                wait = min(APPEND_BACKOFF_MAX_S, APPEND_BACKOFF_S * 2 ** min(attempts - 1, 16))
                wait *= 0.5 + random.random() / 2  # jitter keeps racing appenders apart
                if time.monotonic() + wait > deadline:
                    lost = "the commit was lost to other writers: " if isinstance(err, CommitFailedError) else ""
                    raise StoreError(f"cannot append {rows.height} rows to journal {name} after {attempts} attempts "
                                     f"in {retry_for_s:g}s: {lost}{storage_failure(err)}") from err
                time.sleep(wait)

    def ensure_journal(self, name: str) -> bool:
        """Create the journal, empty, if it does not exist (race-free: of two creators one wins and
        the other finds it made); True when this call created it."""
        if self.open_table(self.journal_uri(name)) is not None:
            return False
        spec = spec_for(name)
        return self.append_journal_after(name, spec.empty(), None)

    def read_journal_version(self, name: str) -> tuple[int | None, pl.DataFrame]:
        """A journal table at its latest version, and that version (None when it does not exist)."""
        spec = spec_for(name)
        table = self.open_table(self.journal_uri(name))
        if table is None:
            return None, spec.empty()
        return table.version(), typed(self.read_files(table, spec), spec).select([*spec.columns, BUCKET])

    def append_journal_after(self, name: str, rows: pl.DataFrame, version: int | None) -> bool:
        """Append rows as the journal's next version after ``version`` (None: create the journal);
        False, with nothing written, when another writer took that version first."""
        spec = spec_for(name)
        if version is None:
            try:
                write_deltalake(self.journal_uri(name), conform(rows, spec), mode="error", partition_by=[BUCKET],
                                configuration=TABLE_CONFIGURATION, storage_options=self.connection_options(),
                                commit_properties=EXACT_VERSION)
                return True
            except DeltaError as err:  # another writer created it first (or storage failed)
                if self.open_table(self.journal_uri(name)) is None:
                    raise StoreError(f"cannot create journal {name}: {storage_failure(err)}") from err
                return False
        table = self.open_table(self.journal_uri(name), version)
        if table is None:
            raise StoreError(f"journal {name!r} at version {version} is missing on storage")
        try:
            write_deltalake(table, conform(rows, spec), mode="append", partition_by=[BUCKET],
                            commit_properties=EXACT_VERSION)
        except CommitFailedError:
            return False
        return True

    def compact_journal(self, name: str) -> int:
        """Rewrite a journal table's small appended files into about one per bucket, once it has
        more than JOURNAL_FILES_PER_BUCKET files per bucket; the files removed are deleted once
        older than ORPHAN_GRACE_HOURS (a reader may still be reading them).

        Safe beside appenders (compaction commutes with appends). Beside a deletion from the same
        journal the later of the two fails: this with ConcurrentCommitError, the deletion with
        deltalake's CommitFailedError. Returns the files compacted.
        """
        table = self.open_table(self.journal_uri(name))
        if table is None or len(table.file_uris()) <= JOURNAL_FILES_PER_BUCKET * self.n_buckets:
            return 0
        with conflicts_as(ConcurrentCommitError, f"compacting journal {name}"):
            metrics = table.optimize.compact()
        table.vacuum(retention_hours=ORPHAN_GRACE_HOURS, enforce_retention_duration=False, dry_run=False, full=False)
        return int(metrics.get("numFilesRemoved", 0) or 0)

    def delete_from_journal(self, name: str, column: str, values: list[str]) -> int:
        """Delete journal rows whose column is one of values (ids and hashes only, never text)."""
        table = self.open_table(self.journal_uri(name))
        if table is None or not values:
            return 0
        total = 0
        for start in range(0, len(values), 500):
            chunk = values[start : start + 500]
            quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in chunk)
            metrics = table.delete(f"{column} IN ({quoted})")
            total += int(metrics.get("num_deleted_rows", 0) or 0)
        return total
