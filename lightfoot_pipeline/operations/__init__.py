"""The engine's operations on a store: each moves it from one consistent state to the next.

``ingest`` (ingestion.py), ``delete`` (deletion.py) and ``set_readers`` (readers.py: who may read
documents), one commit each; ``rebuild`` and ``migrate`` (migration.py: the index derived again
with no model call); ``erase_history`` and
``vacuum`` (erase.py: deleted text gone from history, caches and snapshots); ``compaction.compact``
(buckets of several data files rewritten as one, no row changed); the ``sync`` module (a
folder of files mirrored into the store) and the ``relink`` module (the graph derived again with
its links computed in pieces); the index's configuration (config.py). The stages of an orchestrated
run, one commit each, are the ``batches`` module (a batch's documents, extractions and forms),
``graph`` (the graph stage and what it changed), ``deletion_requests`` (tombstones from pending
requests) and ``checks`` (the invariants checked after a change): the Dagster assets call these and
open no transaction of their own. ``batch_extraction`` follows extraction batches at a provider or
an offline runner (collect, cancel, erase their files there, export and import). The command line, the Dagster assets, the benchmarks and the
tests all call these.
"""

from lightfoot_pipeline.operations import batches, checks, graph, relink, sync  # modules: relink.relink, sync.sync, …
from lightfoot_pipeline.operations.config import IndexConfigError, check_config, index_config
from lightfoot_pipeline.operations.deletion import DeleteReport, delete
from lightfoot_pipeline.operations.erase import EraseReport, erase_history, vacuum
from lightfoot_pipeline.operations.ingestion import IngestReport, ingest
from lightfoot_pipeline.operations.migration import migrate, rebuild
from lightfoot_pipeline.operations.readers import ReadersReport, set_readers
from lightfoot_pipeline.operations.sync import SyncReport

__all__ = [
    "DeleteReport", "EraseReport", "IndexConfigError", "IngestReport", "ReadersReport", "SyncReport",
    "batches", "check_config", "checks", "delete", "erase_history", "graph", "index_config", "ingest", "migrate", "rebuild", "relink",
    "set_readers", "sync", "vacuum",
]
