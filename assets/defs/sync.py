"""Sync: a folder or object-store prefix of document files, followed by a sensor, beside the inbox.

The ``sync_sensor`` lists the source (``LIGHTFOOT_SYNC_SOURCE``, or the inbox resource's
``sync_source``) on every tick and compares it with what the store records of its files; when
files were added, changed or removed, or passages of its files are stored without an extraction,
it adds a batch and asks for one run of ``sync_job`` over it. Its ``source_files`` step
mirrors the source into the store (lightfoot_pipeline/operations/sync.py: new and changed files
stored with their passages, removed ones deleted, unreadable ones recorded with their reason); the
batch's extraction and forms steps, the graph and the snapshot follow, as for a drop. The run key is a hash of the pending changes and the hour, so the
same changes are asked for once an hour at most: a failed run is asked again the next hour, or at
once when the source changes again. Nothing depends on the cursor: the store's records say what
is in sync.
"""

import datetime as dt

import dagster as dg

from assets.batches import apply_deletion_events, dagster_batch, deletion_events, run_batch_id
from assets.code_versions import code_version
from assets.keys import (
    BATCH_GROUP,
    ERASURES,
    GRAPH_GROUP,
    OWNERS,
    SERVING_GROUP,
    SOURCE_FILES,
    SOURCES_GROUP,
    SYNC_JOB,
    TRIGGER_TAG,
)
from assets.partitions import BATCHES, LEGACY_HINT, legacy_layout, sync_batch
from assets.provenance import (
    STORE_POOL,
    add_run_cost,
    batch_metadata,
    metadata_value,
    store_metadata,
    table_metadata,
)
from assets.resources import InboxResource, StoreResource
from lightfoot_pipeline.operations.batches import STAGE_TABLES, batch_counts, store_state
from lightfoot_pipeline.operations.sync import LeftToExtractionSteps, look_at_source, sync, unextracted_files


@dg.asset(key=SOURCE_FILES, group_name=SOURCES_GROUP, pool=STORE_POOL, kinds={"deltalake", "python"},
          owners=OWNERS, code_version=code_version(__name__, "source_files"),
          metadata=table_metadata(*STAGE_TABLES["source_files"]))
def source_files(context: dg.AssetExecutionContext, store: StoreResource, inbox: InboxResource) -> dg.MaterializeResult:
    """The source's files mirrored into the store, one batch per sync run: one document per file,
    its passages cut by section with their page or heading path; removed files' documents deleted;
    files that cannot be read listed with why. The batch's passages, extractions and forms steps
    follow, then the graph and the snapshot, as for a drop. Not partitioned: a drop's batch has no
    files, so it would show as missing on every drop; each materialization names its sync's batch."""
    uri = inbox.sync_source_uri()
    if not uri:
        raise dg.Failure(description="no source to sync: set LIGHTFOOT_SYNC_SOURCE (or the inbox resource's sync_source)")
    batch = run_batch_id(context.run)
    lightfoot = store.open()
    settings = store.settings()
    with dagster_batch(context):
        report = sync(lightfoot, uri, LeftToExtractionSteps(), None, settings, erase=inbox.sync_erase, link=False)
    context.log.info(f"batch {batch}: {len(report.new)} new, {len(report.changed)} changed, {report.unchanged} "
                     f"unchanged, {len(report.removed)} removed, {len(report.failed)} failed files")
    add_run_cost(context, model_calls=0, tokens_in=0, tokens_out=0, cost_usd=0.0)
    manifest = lightfoot.manifest()
    if report.removed:
        apply_deletion_events(context, deletion_events(lightfoot, context.instance, report.removed, manifest.seq))
    state = store_state(lightfoot, manifest, [t.name for t in STAGE_TABLES["source_files"]],
                        changed=bool(report.commits), fingerprint=store.report_fingerprint)
    counts = report.file_counts()
    metadata = {**batch_metadata(batch, batch_counts(lightfoot, batch, manifest)), **store_metadata(state, lightfoot.uri),
                "source": dg.MetadataValue.path(report.source), "dagster/row_count": dg.MetadataValue.int(report.files),
                **{name: metadata_value(value) for name, value in counts.items()}}
    return dg.MaterializeResult(metadata=metadata)


sync_job = dg.define_asset_job(
    SYNC_JOB,
    selection=dg.AssetSelection.assets(SOURCE_FILES, ERASURES) | dg.AssetSelection.groups(
        BATCH_GROUP, GRAPH_GROUP, SERVING_GROUP),
    partitions_def=BATCHES,
    description="Mirror the source's files into the store as one batch, extract its new passages, then bring the "
    "graph and the serving snapshot up to date, with every blocking check, and erase the removed files' history "
    "where sync_erase asks.",
    executor_def=dg.in_process_executor,
)


@dg.sensor(
    job=sync_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Follows the sync source (LIGHTFOOT_SYNC_SOURCE): one sync run, a batch of its own, for each new set "
    "of files added, changed or removed there.",
)
def sync_sensor(context: dg.SensorEvaluationContext, store: StoreResource, inbox: InboxResource) -> dg.SensorResult:
    """Files added, changed or removed at the source: one sync run, a batch of its own, for each
    new set of changes (its key a digest of the changes and the hour)."""
    uri = inbox.sync_source_uri()
    if not uri:
        return dg.SensorResult(skip_reason=dg.SkipReason("no source to follow: LIGHTFOOT_SYNC_SOURCE is not set"))
    if legacy_layout(context.instance):
        return dg.SensorResult(skip_reason=dg.SkipReason(LEGACY_HINT))
    lightfoot = store.open()
    look = look_at_source(lightfoot, uri)
    again = unextracted_files(lightfoot, look)  # passages stored without an extraction are asked again
    if look.in_sync and not again:
        return dg.SensorResult(skip_reason=dg.SkipReason(
            f"{look.root} is in sync: {len(look.files)} files as the store records them"))
    context.log.info(f"{look.root}: {len(look.to_read)} files to read, {len(look.gone)} removed, {len(again)} "
                     "with passages to extract again")
    hour = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H")
    signature = look.signature() + (f"-again{len(again)}" if again else "")
    batch = sync_batch(signature, hour)
    new = [] if context.instance.has_dynamic_partition(BATCHES.name, batch) else [batch]
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"sync-{signature}-{hour}", partition_key=batch,
                                    tags={TRIGGER_TAG: "source"})],
        dynamic_partitions_requests=[BATCHES.build_add_request(new)] if new else [],
    )
