"""Serving: the snapshot that retrieval loads (CSR graph, node tables, passage and fact vectors).

Exported only when every blocking check upstream passed: in a run, a failed blocking check skips
it; under automation, it waits for the checks to pass. It depends on the store log too
(store_log.py), so a commit it does not reflect, made by any path, makes it stale.
"""

import dagster as dg

from assets.batches import dagster_batch
from assets.code_versions import code_version
from assets.keys import EXTRACTION_BATCHES, GRAPH_ASSETS, OWNERS, SERVING_GROUP, STORE_LOG
from assets.provenance import STORE_POOL
from assets.resources import EmbedderResource, StoreResource
from lightfoot_pipeline.progress import LOG_EVERY, StepProgress
from lightfoot_pipeline.snapshot.export import DEFAULT_KEEP, export_snapshot


@dg.asset(
    # extraction_batches: so that a collection's run exports after it; automation ignores it (a
    # store that never uses the Batch API never materializes it, and would count it missing).
    deps=[*GRAPH_ASSETS, STORE_LOG, EXTRACTION_BATCHES],
    group_name=SERVING_GROUP,
    kinds={"numpy", "parquet"},
    pool=STORE_POOL,
    owners=OWNERS,
    code_version=code_version(__name__, "serving_snapshot"),
    automation_condition=(dg.AutomationCondition.eager() & dg.AutomationCondition.all_deps_blocking_checks_passed())
    .ignore(dg.AssetSelection.assets(EXTRACTION_BATCHES)),
)
def serving_snapshot(
    context: dg.AssetExecutionContext, store: StoreResource, embedder: EmbedderResource
) -> dg.MaterializeResult:
    """The store's committed state exported for retrieval, published atomically; the newest
    snapshots are kept and older ones pruned. An unchanged store keeps its current snapshot.
    Stages longer than a few seconds (embedding, indexing, writing) log their progress.

    ``store_commit`` is the newest commit the snapshot is known to equal: the one its export read,
    which a kept snapshot equals too (the store-log observation compares it with the store's);
    ``exported_at_commit`` is the commit the snapshot was written at."""
    lightfoot = store.open()
    model = embedder.get()
    read = lightfoot.manifest().seq  # the export reads this commit or a later one
    with dagster_batch(context):  # registering a vector model is a commit of Dagster's own
        info = export_snapshot(lightfoot, model, keep=DEFAULT_KEEP,
                               progress=StepProgress("snapshot export", context.log.info, delay=LOG_EVERY))
    reflected = max(read, info.store_seq)
    context.log.info(f"serving snapshot {info.snapshot_id} (exported at store commit {info.store_seq}; "
                     f"the store's state at commit {reflected})")
    counts = info.counts
    return dg.MaterializeResult(
        data_version=dg.DataVersion(info.fingerprint[:16]),
        metadata={
            "snapshot_id": dg.MetadataValue.text(info.snapshot_id),
            "dagster/uri": dg.MetadataValue.path(info.uri),
            "fingerprint": dg.MetadataValue.text(info.fingerprint),
            "store_commit": dg.MetadataValue.int(reflected),
            "exported_at_commit": dg.MetadataValue.int(info.store_seq),
            "created_at": dg.MetadataValue.text(info.created_at),
            "dagster/row_count": dg.MetadataValue.int(int(counts.get("passages", 0))),
            "rows": dg.MetadataValue.json(counts),
            "models": dg.MetadataValue.json(info.models),
            "model_calls": dg.MetadataValue.int(0),
            "cost_usd": dg.MetadataValue.float(0.0),
        }
    )
