"""Sync: a folder or object-store prefix of document files, followed by a sensor, beside the inbox.

The ``source_sync`` sensor lists the source (``LIGHTFOOT_SYNC_SOURCE``, or the inbox resource's
``sync_source``) on every tick and compares it with what the store records of its files; when
files were added, changed or removed, or passages of its files are stored without an extraction, it asks for one run of ``source_sync_job``, whose ``source_files`` asset mirrors the source into the store
(lightfoot_pipeline/sync.py: new and changed files ingested, removed ones deleted, unreadable ones
recorded with their reason). The run key is a hash of the pending changes and the hour, so the
same changes are asked for once an hour at most: a failed run is asked again the next hour, or at
once when the source changes again. Nothing depends on the cursor: the store's records say what
is in sync.
"""

import datetime as dt

import dagster as dg

from assets.code_versions import code_version
from assets.keys import OWNERS, TRIGGER_TAG
from assets.provenance import STORE_POOL, add_run_cost, store_metadata, table_metadata
from assets.resources import EmbedderResource, ExtractorResource, InboxResource, StoreResource
from lightfoot_pipeline.ingest.sources import SOURCE_FILES
from lightfoot_pipeline.operations.sync import look_at_source, sync, unextracted_files
from lightfoot_pipeline.store.tables import DOCUMENTS, PASSAGE_SOURCES, PASSAGES

SOURCES_GROUP = "sources"
SOURCE_SYNC_JOB = "source_sync_job"


@dg.asset(group_name=SOURCES_GROUP, kinds={"deltalake", "python"}, pool=STORE_POOL, owners=OWNERS,
          code_version=code_version(__name__, "source_files"), metadata=table_metadata(SOURCE_FILES, PASSAGE_SOURCES))
def source_files(
    context: dg.AssetExecutionContext, store: StoreResource, embedder: EmbedderResource,
    extractor: ExtractorResource, inbox: InboxResource,
) -> dg.MaterializeResult:
    """The source's files mirrored into the store: one document per file, its passages cut by
    section with their page or heading path; files that cannot be read are listed with why."""
    uri = inbox.sync_source_uri()
    if not uri:
        raise dg.Failure(description="no source to sync: set LIGHTFOOT_SYNC_SOURCE (or the inbox resource's sync_source)")
    lightfoot = store.open()
    settings = store.settings()
    report = sync(lightfoot, uri, extractor.get(lightfoot, settings, {}, context.run.run_id), embedder.get(),
                  settings, erase=inbox.sync_erase)
    context.log.info(f"{report.source}: {len(report.new)} new, {len(report.changed)} changed, {report.unchanged} "
                     f"unchanged, {len(report.removed)} removed, {len(report.failed)} failed; "
                     f"{report.model_calls} model calls")
    add_run_cost(context, model_calls=report.model_calls, tokens_in=report.tokens_in, tokens_out=report.tokens_out,
                 cost_usd=report.cost_usd)
    manifest = lightfoot.manifest()
    metadata = store_metadata(
        lightfoot, manifest, [DOCUMENTS.name, PASSAGES.name, SOURCE_FILES.name], fingerprint=store.report_fingerprint,
        changed=bool(report.commits), model_calls=report.model_calls, cost_usd=report.cost_usd,
    )
    metadata.update({
        "source": dg.MetadataValue.path(report.source),
        "files": dg.MetadataValue.int(report.files),
        "new": dg.MetadataValue.json(report.new[:100]),
        "changed": dg.MetadataValue.json(report.changed[:100]),
        "removed": dg.MetadataValue.json(report.removed[:100]),
        "unchanged": dg.MetadataValue.int(report.unchanged),
        "failed": dg.MetadataValue.json(report.failed[:100]),
        "failed_files": dg.MetadataValue.int(len(report.failed)),
        "passages_read": dg.MetadataValue.int(report.passages),
        "from_cache": dg.MetadataValue.int(report.from_cache),
        "unextracted": dg.MetadataValue.int(report.unextracted),
        "excluded": dg.MetadataValue.json(report.excluded[:100]),
    })
    return dg.MaterializeResult(metadata=metadata)


source_sync_job = dg.define_asset_job(
    SOURCE_SYNC_JOB, selection=dg.AssetSelection.assets(source_files),
    description="Mirror the source's files into the store.", executor_def=dg.in_process_executor,
)


@dg.sensor(
    job=source_sync_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Follows the sync source (LIGHTFOOT_SYNC_SOURCE): one sync run for each new set of files added, "
    "changed or removed there.",
)
def source_sync(context: dg.SensorEvaluationContext, store: StoreResource, inbox: InboxResource) -> dg.SensorResult:
    """Files added, changed or removed at the source: one sync run for each new set of changes."""
    uri = inbox.sync_source_uri()
    if not uri:
        return dg.SensorResult(skip_reason=dg.SkipReason("no source to follow: LIGHTFOOT_SYNC_SOURCE is not set"))
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
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"sync-{signature}-{hour}",
                                                       tags={TRIGGER_TAG: "source"})])
