"""Serving: the snapshot that retrieval loads (CSR graph, node tables, passage and fact vectors).

Exported only when every blocking check upstream passed: in a run, a failed blocking check skips
it; under automation, it waits for the checks to pass.
"""

import dagster as dg

from assets.code_versions import code_version
from assets.keys import GRAPH_ASSETS, OWNERS, SERVING_GROUP
from assets.provenance import STORE_POOL
from assets.resources import EmbedderResource, StoreResource
from lightfoot_pipeline.progress import StepProgress
from lightfoot_pipeline.snapshot.export import DEFAULT_KEEP, export_snapshot


@dg.asset(
    deps=list(GRAPH_ASSETS),
    group_name=SERVING_GROUP,
    kinds={"numpy", "parquet"},
    pool=STORE_POOL,
    owners=OWNERS,
    code_version=code_version(__name__, "serving_snapshot"),
    automation_condition=dg.AutomationCondition.eager() & dg.AutomationCondition.all_deps_blocking_checks_passed(),
)
def serving_snapshot(
    context: dg.AssetExecutionContext, store: StoreResource, embedder: EmbedderResource
) -> dg.MaterializeResult:
    """The store's committed state exported for retrieval, published atomically; the newest
    snapshots are kept and older ones pruned. An unchanged store keeps its current snapshot.
    Long steps (embedding, indexing, writing) log their progress."""
    lightfoot = store.open()
    model = embedder.get()
    info = export_snapshot(lightfoot, model, keep=DEFAULT_KEEP, progress=StepProgress("snapshot export", context.log.info))
    context.log.info(f"serving snapshot {info.snapshot_id} (store commit {info.store_seq})")
    counts = info.counts
    return dg.MaterializeResult(
        data_version=dg.DataVersion(info.fingerprint[:16]),
        metadata={
            "snapshot_id": dg.MetadataValue.text(info.snapshot_id),
            "dagster/uri": dg.MetadataValue.path(info.uri),
            "fingerprint": dg.MetadataValue.text(info.fingerprint),
            "store_commit": dg.MetadataValue.int(info.store_seq),
            "created_at": dg.MetadataValue.text(info.created_at),
            "dagster/row_count": dg.MetadataValue.int(int(counts.get("passages", 0))),
            "rows": dg.MetadataValue.json(counts),
            "models": dg.MetadataValue.json(info.models),
            "model_calls": dg.MetadataValue.int(0),
            "cost_usd": dg.MetadataValue.float(0.0),
        }
    )
