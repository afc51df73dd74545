"""The serving snapshot: what an export writes from the store and what a query process reads.

A snapshot is a versioned directory of node tables, the graph's CSR adjacency, half-precision
passage and fact vectors and, for large fact tables, an inverted-file fact index, published
atomically under the store root (``format.py``). ``collect.py`` gathers its content from the
store, reusing the previous snapshot's; ``export.py`` writes, publishes, prunes and erases.
"""

from lightfoot_pipeline.snapshot.export import erase_from_snapshots, export_snapshot
from lightfoot_pipeline.snapshot.format import (
    Snapshot,
    SnapshotError,
    SnapshotInfo,
    latest_snapshot,
    list_snapshots,
    load_snapshot,
)

__all__ = [
    "Snapshot", "SnapshotError", "SnapshotInfo",
    "erase_from_snapshots", "export_snapshot", "latest_snapshot", "list_snapshots", "load_snapshot",
]
