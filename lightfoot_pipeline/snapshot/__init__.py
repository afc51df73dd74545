"""The serving snapshot: what an export writes from the store and what a query process reads.

A snapshot is a versioned directory of node tables, the graph's CSR adjacency, half-precision
passage and fact vectors and, for large fact tables, an inverted-file fact index, published
atomically under the store root (``format.py``). ``collect.py`` gathers its content from the
store, reusing the previous snapshot's; ``export.py`` stages, checks, publishes, prunes and
erases; ``verdict.py`` keeps what a staged snapshot's checks found, and why one was not published.
"""

from lightfoot_pipeline.snapshot.export import PublishReport, erase_from_snapshots, export_snapshot, publish_checked
from lightfoot_pipeline.snapshot.format import (
    Snapshot,
    SnapshotError,
    SnapshotInfo,
    latest_snapshot,
    list_snapshots,
    load_snapshot,
)
from lightfoot_pipeline.snapshot.verdict import CheckVerdict, StagedCheck, Verdict, unpublished_snapshot

__all__ = [
    "CheckVerdict", "PublishReport", "Snapshot", "SnapshotError", "SnapshotInfo", "StagedCheck", "Verdict",
    "erase_from_snapshots", "export_snapshot", "latest_snapshot", "list_snapshots", "load_snapshot",
    "publish_checked", "unpublished_snapshot",
]
