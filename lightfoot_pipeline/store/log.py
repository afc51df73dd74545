"""The store log, and how the store's Delta tables are configured and committed.

The store log is a Delta table of its own (``_lightfoot/store_log/``) with one row per store
commit, naming the version of every table: a :class:`Manifest` is one row, one committed state
of the store. Readers read each table at the version the newest row names (store.py); a commit
appends its row once its tables are written (transaction.py).

Every Delta commit the store makes lands on one exact version or fails (``EXACT_VERSION``, no
retry); :func:`conflicts_as` turns the failure into the store's own error.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import CommitProperties
from deltalake.exceptions import CommitFailedError

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.store.tables import BUCKET

# A data file that no table version references is either left over from a failed commit or the
# upload of a commit still in flight (journal appends run beside everything, and on object stores
# so may another writer), so vacuum leaves unreferenced files younger than this alone. The files
# that a commit removed, which hold deleted rows, go at once.
ORPHAN_GRACE_HOURS = 1
# How long a table's checkpoints keep listing the files its commits removed (Delta's default is a
# week, and every opening of the table reads the list: 51,000 files a table after a 10% deletion
# at 1M passages, three times what its live files cost). Vacuum deletes the removed files it finds
# listed at once, and any unreferenced file older than the grace from a listing of storage; a file
# whose removal left the list was written before its removal, so it is older than the window and,
# while the window is at least the grace, the second pass takes it: no removed file outlives a
# vacuum (Store.vacuum refuses a longer grace).
REMOVED_FILES_LISTED_HOURS = 2 * ORPHAN_GRACE_HOURS
TABLE_CONFIGURATION = {
    "delta.dataSkippingStatsColumns": BUCKET,
    "delta.checkpointInterval": "50",
    "delta.deletedFileRetentionDuration": f"interval {REMOVED_FILES_LISTED_HOURS} hours",
}
# Every commit of a store transaction lands on the exact version it was computed from, or fails.
EXACT_VERSION = CommitProperties(max_commit_retries=0)
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


class StoreLayoutError(StoreError):
    """The store's files are laid out by another version of Lightfoot."""


class StoreUnavailable(StoreError, OSError):
    """The store's URI cannot be read: a file, an unknown scheme, an object store out of reach."""

    hint = "check --store (or LIGHTFOOT_STORE), and for an object store the AWS_* settings (README: Settings)"


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


@contextlib.contextmanager
def conflicts_as(error: type[StoreError], doing: str) -> Iterator[None]:
    """Turn a failed exact-version Delta commit into ``error``, saying what was being done."""
    try:
        yield
    except CommitFailedError as err:
        raise error(f"another writer committed while this one was {doing}; run the operation again ({err})") from err
