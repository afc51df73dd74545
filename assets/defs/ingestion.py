"""Ingestion: the document inbox, the ``passages`` asset, and the ingestion job, sensor and schedule.

A drop in the inbox is read, each of its documents is copied to the landing area under the store
root beside a receipt for the drop, the documents are added as partitions, and one run ingests the
drop (a range of partitions: a single-run backfill). The receipt stays pending until a run of the
drop has succeeded, and a drop whose run failed or never came to exist is asked again. The hourly
schedule does the same for anyone who keeps the sensor off, and picks up landed documents that no
run has ingested yet.
"""

from dataclasses import dataclass, field

import dagster as dg
import polars as pl

from assets.code_versions import code_version
from assets.defs.checks import INGESTION_REBUILD_LIMIT
from assets.keys import (
    DOCUMENTS_GROUP,
    GRAPH_GROUP,
    INGESTION_JOB,
    OWNERS,
    SERVING_GROUP,
    TRIGGER_TAG,
)
from assets.partitions import DOCUMENTS, PER_DOCUMENT, key_ranges, range_tags
from assets.provenance import (
    add_document_metadata,
    commit_if_changed,
    explain_hint,
    store_metadata,
    table_metadata,
)
from assets.receipts import receipt_run_key, receipt_runs, receipt_tags
from assets.resources import InboxResource, StoreResource
from lightfoot_pipeline.index.documents import upsert_documents
from lightfoot_pipeline.ingest.inbox import take_documents
from lightfoot_pipeline.ingest.landing import Landing
from lightfoot_pipeline.ingest.receipts import INGESTION, Receipt, Receipts
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENTS as DOCUMENTS_TABLE
from lightfoot_pipeline.store.tables import PASSAGES as PASSAGES_TABLE
from lightfoot_pipeline.store.tables import TOMBSTONES as TOMBSTONES_TABLE


@dg.asset(**PER_DOCUMENT, kinds={"deltalake", "python"}, owners=OWNERS, code_version=code_version(__name__, "passages"),
          metadata=table_metadata(PASSAGES_TABLE, DOCUMENTS_TABLE))
def passages(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    """A document's row (title, source, retention date) and its passages, from its landed copy.

    One partition per document, each with its own passages as its row count and its status
    (``stored``, ``awaiting deletion`` or ``deleted``). A document whose deletion is pending is
    left to the deletion run; a partition with neither a landed copy nor a stored document fails
    the run, saying which.
    """
    keys = sorted(context.partition_keys)
    lightfoot = store.open()
    landing = Landing(lightfoot)
    landed = landing.documents(keys)
    awaiting_deletion = sorted({r.doc_id for r in landing.deletion_requests()} & set(keys))
    live = live_doc_ids(lightfoot, among=keys)
    deleted = _doc_ids(lightfoot, TOMBSTONES_TABLE.name, keys) - live
    documents = [landed[k].document for k in keys if k in landed and k not in awaiting_deletion]
    unknown = [k for k in keys if k not in landed and k not in live and k not in deleted and k not in awaiting_deletion]
    if unknown:
        raise dg.Failure(
            description=f"{len(unknown)} partitions have no landed copy and no stored document "
            f"(e.g. {', '.join(unknown[:5])}); drop the documents into the inbox again",
            metadata={"missing": dg.MetadataValue.json(unknown[:100])},
        )
    with lightfoot.transaction() as tx:
        upsert_documents(tx, documents, store.settings())
        manifest, changed = commit_if_changed(
            tx, "passages", {"documents": len(documents), "run_id": context.run.run_id}
        )
    context.log.info(f"{len(documents)} documents staged; store commit {manifest.seq} (changed: {changed})")
    stored = lightfoot.read(PASSAGES_TABLE.name, manifest, columns=["doc_id"]).filter(pl.col("doc_id").is_in(keys))
    counts = dict(stored.group_by("doc_id").len().iter_rows())
    # Ids and counts only: Dagster's event storage keeps what it is given for good, so the title
    # stays in the store (which an erasure reaches) and the partition says where to read it.
    add_document_metadata(context, {
        key: {"dagster/row_count": counts.get(key, 0), "read_with": explain_hint(key),
              "status": "awaiting deletion" if key in awaiting_deletion else "deleted" if key in deleted
              and key not in counts else "stored"}
        for key in keys
    })
    metadata = store_metadata(
        lightfoot, manifest, [PASSAGES_TABLE.name, DOCUMENTS_TABLE.name],
        fingerprint=store.report_fingerprint, changed=changed, per_document=True,
    )
    metadata.update({
        "run_documents": dg.MetadataValue.int(len(keys)),
        "run_documents_staged": dg.MetadataValue.int(len(documents)),
        "run_awaiting_deletion": dg.MetadataValue.json(awaiting_deletion[:100]),
        "run_already_deleted": dg.MetadataValue.json(sorted(deleted)[:100]),
        "run_passages": dg.MetadataValue.int(stored.height),
    })
    return dg.MaterializeResult(metadata=metadata)


def _doc_ids(store: Store, table: str, keys: list[str]) -> set[str]:
    frame = store.read(table, columns=["doc_id"])
    return set(frame.filter(pl.col("doc_id").is_in(keys)).get_column("doc_id").to_list())


document_ingestion = dg.define_asset_job(
    INGESTION_JOB,
    selection=(
        dg.AssetSelection.groups(DOCUMENTS_GROUP, GRAPH_GROUP, SERVING_GROUP)
    ),
    description="Ingest a range of document partitions, then bring the graph and the serving snapshot up to date; "
    "every blocking check runs before the export (the comparison with a fresh rebuild while the store holds at "
    f"most {INGESTION_REBUILD_LIMIT:,} documents: the check's ingestion_limit).",
    executor_def=dg.in_process_executor,
)


# -- the inbox --------------------------------------------------------------------------------


def ingestion_requests(order: list[str], doc_ids: list[str], run_key: str, tags: dict[str, str]) -> list[dg.RunRequest]:
    """The runs over these documents: as few ranges of the partition ``order`` as it allows."""
    ranges = key_ranges(order, doc_ids)
    return [
        dg.RunRequest(
            run_key=f"{run_key}-{i}" if len(ranges) > 1 else run_key,
            job_name=INGESTION_JOB,
            tags={**range_tags(first, last), **tags},
        )
        for i, (first, last) in enumerate(ranges)
    ]


@dataclass
class DropRuns:
    """What the pending drops of the document inbox need: partitions to add and runs to ask for."""

    new_partitions: list[str] = field(default_factory=list)
    requests: list[dg.RunRequest] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)  # one line per drop given runs, saying why
    settled: list[Receipt] = field(default_factory=list)
    waiting: list[Receipt] = field(default_factory=list)
    pending_ids: set[str] = field(default_factory=set)  # documents of drops still pending


def drop_runs(instance: dg.DagsterInstance, receipts: Receipts, trigger: str) -> DropRuns:
    """Settle each pending drop whose runs succeeded, and ask for runs for each one whose runs
    failed, were canceled or never came to exist.

    A drop is done when every run of its latest attempt has succeeded (a run that ingests a range
    of partitions stores, extracts and links its documents and exports the snapshot), or when none
    of its documents has a landed copy any more (all deleted since). A retry ingests the drop's
    documents that still have a landed copy, re-adding any partition the instance lacks.
    """
    out = DropRuns()
    order: list[str] = []  # the instance's partition keys, listed once a drop needs runs
    known: set[str] | None = None
    for receipt in receipts.pending(INGESTION):
        runs = receipt_runs(instance, receipt)
        if runs.succeeded:
            out.settled.append(receipts.settle(receipt, f"run {runs.succeeded} succeeded"))
            continue
        out.pending_ids.update(receipt.doc_ids)
        if runs.in_flight or runs.backing_off():
            out.waiting.append(receipt)
            continue
        wanted = sorted(receipts.landing.landed(receipt.doc_ids))
        if not wanted:
            out.settled.append(receipts.settle(receipt, "none of its documents has a landed copy (deleted since)"))
            continue
        if known is None:
            order = list(instance.get_dynamic_partitions(DOCUMENTS.name))
            known = set(order)
        new = [d for d in wanted if d not in known]
        order.extend(new)
        known.update(new)
        out.new_partitions.extend(new)
        out.requests.extend(ingestion_requests(
            order, wanted, receipt_run_key("inbox", receipt, runs.attempt),
            {TRIGGER_TAG: trigger, **receipt_tags(receipt, runs.attempt)},
        ))
        out.asked.append(
            f"drop {receipt.receipt_id} ({receipt.origin}, {len(wanted)} documents): attempt {runs.attempt}"
            + (f" after failed or canceled runs {', '.join(runs.failed)}" if runs.failed else "")
        )
    return out


@dg.sensor(
    job_name=INGESTION_JOB, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Lands the documents dropped in the inbox with a receipt, adds them as partitions, and asks for "
    "ingestion runs until a run of each drop has succeeded.",
)
def document_inbox(
    context: dg.SensorEvaluationContext, store: StoreResource, inbox: InboxResource
) -> dg.SensorResult:
    """Documents dropped in the inbox: landed with a receipt, added as partitions, and ingested
    until a run of each drop has succeeded.

    A drop's documents are landed and a pending receipt recorded (its id hashes the drop's name,
    size, modification time and document ids); then the drop is removed. On every tick each
    pending drop is looked up in the instance by its tag: done when its runs succeeded, waiting
    while one is queued or running, and otherwise asked again — after a failed or canceled run, or
    when its run never came to exist — under a run key made of its receipt id and attempt number.
    Nothing depends on the cursor: resetting it, restarting the daemon or wiping the instance
    neither loses a drop nor lands one twice.
    """
    lightfoot = store.open()
    landing = Landing(lightfoot)
    box = inbox.document_inbox(lightfoot)
    intake = take_documents(box, landing, context.log)
    runs = drop_runs(context.instance, Receipts(lightfoot), "inbox")
    news = [f"landed {len(intake.doc_ids)} documents from {len(intake.receipts)} drops"] if intake.receipts \
        else [f"nothing new in {box.uri}"]
    if intake.rejected:
        news.append(f"rejected {', '.join(sorted(intake.rejected))}")
    if runs.settled:
        news.append(f"{len(runs.settled)} drops ingested")
    if runs.waiting:
        news.append(f"{len(runs.waiting)} drops waiting for their runs or, after repeated failures, for their next attempt")
    if not runs.requests:
        return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(news)))
    context.log.info(f"{'; '.join(news)}; {len(runs.new_partitions)} new partitions; "
                     f"{len(runs.requests)} run(s) for " + "; ".join(runs.asked))
    return dg.SensorResult(
        run_requests=runs.requests,
        dynamic_partitions_requests=[DOCUMENTS.build_add_request(runs.new_partitions)] if runs.new_partitions else [],
    )


@dg.schedule(
    cron_schedule="15 * * * *",
    job_name=INGESTION_JOB,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Every hour at :15 UTC: lands what is in the inbox, asks for the runs its pending drops need, and "
    "ingests every other landed document the store lacks; skipped while an ingestion run is queued or running.",
)
def hourly_ingestion(
    context: dg.ScheduleEvaluationContext, store: StoreResource, inbox: InboxResource
) -> list[dg.RunRequest] | dg.SkipReason:
    """Every hour: land what is in the inbox, ask for the runs its pending drops need (as the
    sensor does), and ingest every other landed document the store lacks.

    Catches what the sensor leaves (the sensor turned off, a run that failed before it stored
    its documents). Skipped while an ingestion run is queued or running.
    """
    busy = context.instance.get_run_records(
        dg.RunsFilter(job_name=INGESTION_JOB, statuses=[
            dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
            dg.DagsterRunStatus.STARTED,
        ]),
        limit=1,
    )
    if busy:
        return dg.SkipReason(f"an ingestion run ({busy[0].dagster_run.run_id}) is queued or running")
    lightfoot = store.open()
    landing = Landing(lightfoot)
    take_documents(inbox.document_inbox(lightfoot), landing, context.log)
    drops = drop_runs(context.instance, Receipts(lightfoot), "schedule")
    live = live_doc_ids(lightfoot)
    awaiting_deletion = {r.doc_id for r in landing.deletion_requests()}
    wanted = sorted(set(landing.landed_ids()) - live - awaiting_deletion - drops.pending_ids)
    if not wanted and not drops.requests:
        return dg.SkipReason("every landed document is in the store or waits for its drop's run")
    order = [*context.instance.get_dynamic_partitions(DOCUMENTS.name), *drops.new_partitions]
    known = set(order)
    new = [d for d in wanted if d not in known]
    stamp = context.scheduled_execution_time.strftime("%Y%m%dT%H%M")
    requests = ingestion_requests([*order, *new], wanted, f"hourly-{stamp}", {TRIGGER_TAG: "schedule"})
    if drops.new_partitions or new:
        context.instance.add_dynamic_partitions(DOCUMENTS.name, [*drops.new_partitions, *new])
    return [*drops.requests, *requests]
