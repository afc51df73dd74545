"""Ingestion: the document inbox, the ``passages`` asset, and the ingestion job, sensor and schedule.

A drop in the inbox is read, each of its documents is copied to the landing area under the store
root beside a receipt for the drop, the drop's batch is added as a partition (``drop-<receipt
id>``, assets/partitions.py), and one run ingests it. The receipt stays pending until a run of
the batch has succeeded, and a drop whose run failed or never came to exist is asked again. The
hourly schedule does the same for anyone who keeps the sensor off, and gives landed documents that
no drop still waits for a receipt and a batch of their own.
"""

from dataclasses import dataclass, field

import dagster as dg

from assets.batches import dagster_batch
from assets.code_versions import code_version
from assets.keys import BATCH_GROUP, GRAPH_GROUP, INGESTION_JOB, OWNERS, SERVING_GROUP, SOURCE_FILES, TRIGGER_TAG
from assets.partitions import BATCHES, LEGACY_HINT, PER_BATCH, legacy_layout, receipt_batch, receipt_of
from assets.provenance import batch_metadata, store_metadata, table_metadata
from assets.receipts import BUSY, receipt_run_key, receipt_runs, receipt_tags, runs_in_flight
from assets.resources import InboxResource, StoreResource
from lightfoot_pipeline.ingest.inbox import take_documents
from lightfoot_pipeline.ingest.landing import Landing
from lightfoot_pipeline.ingest.receipts import INGESTION, Receipt, Receipts
from lightfoot_pipeline.operations.batches import (
    STAGE_TABLES,
    BatchError,
    receipt_for_landed,
    store_batch_documents,
    triage_drops,
)
from lightfoot_pipeline.operations.checks import FULL_REBUILD_LIMIT
from lightfoot_pipeline.store.store import Store


@dg.asset(**PER_BATCH, deps=[SOURCE_FILES], kinds={"deltalake", "python"}, owners=OWNERS,
          code_version=code_version(__name__, "passages"), metadata=table_metadata(*STAGE_TABLES["passages"]))
def passages(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    """A batch's documents (title, source, retention date) and their passages.

    For a drop, its documents are stored from their landed copies (operations/batches.py:
    ``store_batch_documents``); a sync's were stored by ``source_files``, which cut their passages
    by section. The materialization counts the batch's documents and passages, and links to the
    batch's page first.
    """
    batch = context.partition_key
    lightfoot = store.open()
    try:
        with dagster_batch(context):
            report = store_batch_documents(lightfoot, batch, _receipt(lightfoot, batch), store.settings(),
                                           fingerprint=store.report_fingerprint)
    except BatchError as err:
        raise dg.Failure(description=f"{err}; {err.hint}") from None
    assert report.state is not None
    context.log.info(f"batch {batch}: {report.staged} documents staged; store commit {report.state.seq} "
                     f"(changed: {report.state.changed})")
    return dg.MaterializeResult(metadata={
        **batch_metadata(batch, report.counts),
        **store_metadata(report.state, lightfoot.uri),
        "dagster/row_count": dg.MetadataValue.int(report.passages),
        "passages": dg.MetadataValue.int(report.passages),
        "awaiting_deletion": dg.MetadataValue.int(report.awaiting_deletion),
    })


def _receipt(lightfoot, batch: str) -> Receipt | None:
    """The receipt a drop's batch names (None for a batch with none: a sync, a migrated batch)."""
    named = receipt_of(batch)
    if named is None or named[0] != INGESTION:
        return None
    receipt = Receipts(lightfoot).receipt(INGESTION, named[1])
    if receipt is None:
        raise dg.Failure(description=f"batch {batch} names receipt {named[1]}, which the landing area does not hold; "
                         "drop the documents into the inbox again")
    return receipt


ingestion_job = dg.define_asset_job(
    INGESTION_JOB,
    selection=(
        dg.AssetSelection.groups(BATCH_GROUP, GRAPH_GROUP, SERVING_GROUP)
    ),
    partitions_def=BATCHES,
    description="Ingest one batch (a drop), then bring the graph and the serving snapshot up to date; "
    "every blocking check runs before the export (the comparison with a fresh build: of the whole store while it "
    f"holds at most {FULL_REBUILD_LIMIT:,} documents, the check's full_limit, of the run's changes above).",
    executor_def=dg.in_process_executor,
)


# -- the inbox --------------------------------------------------------------------------------


@dataclass
class DropRuns:
    """What the pending drops of the document inbox need: batches to add and runs to ask for."""

    new_partitions: list[str] = field(default_factory=list)
    requests: list[dg.RunRequest] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)  # one line per drop given a run, saying why
    news: list[str] = field(default_factory=list)  # what the triage found (counts)


def drop_runs(instance: dg.DagsterInstance, store: Store, trigger: str) -> DropRuns:
    """Settle each pending drop that needs nothing more (operations/batches.py: ``triage_drops``),
    and ask for a run for each one whose run failed, was canceled or never came to exist. A retry
    is a run of the same batch, re-adding its partition if the instance lacks it.
    """
    out = DropRuns()
    triage = triage_drops(store, lambda receipt: receipt_runs(instance, receipt))
    out.news = triage.news()
    for receipt, runs in triage.needed:
        batch = receipt_batch(receipt)
        if not instance.has_dynamic_partition(BATCHES.name, batch) and batch not in out.new_partitions:
            out.new_partitions.append(batch)
        out.requests.append(dg.RunRequest(
            run_key=receipt_run_key("inbox", receipt, runs.attempt), job_name=INGESTION_JOB, partition_key=batch,
            tags={TRIGGER_TAG: trigger, **receipt_tags(receipt, runs.attempt)},
        ))
        out.asked.append(
            f"batch {batch} ({len(receipt.doc_ids)} documents): attempt {runs.attempt}"
            + (f" after failed or canceled runs {', '.join(runs.failed)}" if runs.failed else "")
        )
    return out


@dg.sensor(
    job_name=INGESTION_JOB, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Lands the documents dropped in the inbox with a receipt, adds the drop's batch as a partition, and "
    "asks for an ingestion run until a run of each batch has succeeded.",
)
def inbox_sensor(
    context: dg.SensorEvaluationContext, store: StoreResource, inbox: InboxResource
) -> dg.SensorResult:
    """Documents dropped in the inbox: landed with a receipt, their batch added as a partition,
    and ingested until a run of the batch has succeeded.

    A drop's documents are landed and a pending receipt recorded (its id hashes the drop's name,
    size, modification time and document ids, and names the batch); then the drop is removed. On
    every tick each pending drop is looked up in the instance by its tag: done when its run
    succeeded, waiting while one is queued or running, and otherwise asked again — after a failed
    or canceled run, or when its run never came to exist — under a run key made of its receipt id
    and attempt number. Nothing depends on the cursor: resetting it, restarting the daemon or
    wiping the instance neither loses a drop nor lands one twice.
    """
    if legacy_layout(context.instance):
        return dg.SensorResult(skip_reason=dg.SkipReason(LEGACY_HINT))
    lightfoot = store.open()
    intake = take_documents(inbox.document_inbox(lightfoot), Landing(lightfoot), context.log)
    runs = drop_runs(context.instance, lightfoot, "inbox")
    news = intake.news() + runs.news
    if not runs.requests:
        return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(news)))
    context.log.info(f"{'; '.join(news)}; {len(runs.new_partitions)} new batches; "
                     f"{len(runs.requests)} run(s) for " + "; ".join(runs.asked))
    return dg.SensorResult(
        run_requests=runs.requests,
        dynamic_partitions_requests=[BATCHES.build_add_request(runs.new_partitions)] if runs.new_partitions else [],
    )


@dg.schedule(
    cron_schedule="15 * * * *",
    job_name=INGESTION_JOB,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Every hour at :15 UTC: lands what is in the inbox, asks for the runs its pending drops need, and "
    "gives every other landed document the store lacks a batch of its own; skipped while an ingestion run is queued "
    "or running.",
)
def ingestion_schedule(
    context: dg.ScheduleEvaluationContext, store: StoreResource, inbox: InboxResource
) -> list[dg.RunRequest] | dg.SkipReason:
    """Every hour: land what is in the inbox, ask for the runs its pending drops need (as the
    sensor does), and give every other landed document the store lacks a receipt and a batch.

    Catches what the sensor leaves (the sensor turned off, a run that failed before it stored
    its documents). Skipped while an ingestion run is queued or running.
    """
    if legacy_layout(context.instance):
        return dg.SkipReason(LEGACY_HINT)
    busy = runs_in_flight(context.instance, [INGESTION_JOB], BUSY, limit=1)
    if busy:
        return dg.SkipReason(f"an ingestion run ({busy[0]}) is queued or running")
    lightfoot = store.open()
    take_documents(inbox.document_inbox(lightfoot), Landing(lightfoot), context.log)
    receipt_for_landed(lightfoot, context.scheduled_execution_time.strftime("%Y%m%dT%H%M"))
    drops = drop_runs(context.instance, lightfoot, "schedule")
    if not drops.requests:
        return dg.SkipReason("every landed document is in the store or waits for its drop's run")
    if drops.new_partitions:
        context.instance.add_dynamic_partitions(BATCHES.name, drops.new_partitions)
    return drops.requests
