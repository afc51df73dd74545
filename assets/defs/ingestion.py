"""Ingestion: the document inbox, the ``passages`` asset, and the ingestion job, sensor and schedule.

A drop in the inbox is read, each of its documents is copied to the landing area under the store
root, the documents are added as partitions, and one run ingests them all (a range of partitions:
a single-run backfill). The hourly schedule does the same for anyone who keeps the sensor off, and
picks up landed documents that no run has ingested yet.
"""

import json
from dataclasses import dataclass, field

import dagster as dg
import polars as pl

from assets.keys import (
    DOCUMENTS_GROUP, GRAPH_GROUP, INGESTION_JOB, REBUILD_CHECKS, SERVING_GROUP, TRIGGER_TAG,
)
from assets.partitions import DOCUMENTS, invalid_key_reason, key_ranges, range_tags
from assets.provenance import STORE_POOL, commit_if_changed, store_metadata
from assets.resources import InboxResource, StoreResource
from lightfoot_pipeline.ingest.dataset import DatasetError
from lightfoot_pipeline.index.documents import upsert_documents
from lightfoot_pipeline.ingest.inbox import Inbox
from lightfoot_pipeline.ingest.landing import Landing
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENTS as DOCUMENTS_TABLE
from lightfoot_pipeline.store.tables import PASSAGES as PASSAGES_TABLE
from lightfoot_pipeline.store.tables import TOMBSTONES as TOMBSTONES_TABLE


@dg.asset(
    partitions_def=DOCUMENTS,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name=DOCUMENTS_GROUP,
    kinds={"deltalake", "python"},
    pool=STORE_POOL,
)
def passages(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    """A document's row (title, source, retention date) and its passages, from its landed copy.

    One partition per document. A document whose deletion is pending is left to the deletion
    run; a document that was deleted is reported as such; a partition with neither a landed copy
    nor a stored document fails the run, saying which.
    """
    keys = sorted(context.partition_keys)
    lightfoot = store.open()
    landing = Landing(lightfoot)
    landed = landing.documents(keys)
    awaiting_deletion = sorted({r.doc_id for r in landing.deletion_requests()} & set(keys))
    live = _doc_ids(lightfoot, DOCUMENTS_TABLE.name, keys)
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
    metadata = store_metadata(
        lightfoot, manifest, [PASSAGES_TABLE.name, DOCUMENTS_TABLE.name],
        fingerprint=store.report_fingerprint, changed=changed,
    )
    metadata.update({
        "documents_in_run": dg.MetadataValue.int(len(keys)),
        "documents_staged": dg.MetadataValue.int(len(documents)),
        "awaiting_deletion": dg.MetadataValue.json(awaiting_deletion[:100]),
        "already_deleted": dg.MetadataValue.json(sorted(deleted)[:100]),
        "passages_in_run": dg.MetadataValue.int(
            lightfoot.read(PASSAGES_TABLE.name, manifest, columns=["doc_id"]).filter(pl.col("doc_id").is_in(keys)).height
        ),
    })
    return dg.MaterializeResult(metadata=metadata)


def _doc_ids(store: Store, table: str, keys: list[str]) -> set[str]:
    frame = store.read(table, columns=["doc_id"])
    return set(frame.filter(pl.col("doc_id").is_in(keys)).get_column("doc_id").to_list())


document_ingestion = dg.define_asset_job(
    INGESTION_JOB,
    selection=(
        dg.AssetSelection.groups(DOCUMENTS_GROUP, GRAPH_GROUP, SERVING_GROUP)
        - dg.AssetSelection.checks(*REBUILD_CHECKS)
    ),
    description="Ingest a range of document partitions, then bring the graph and the serving snapshot up to date.",
    executor_def=dg.in_process_executor,
)


# -- the inbox --------------------------------------------------------------------------------


@dataclass
class Intake:
    """What one look at the inbox did."""

    doc_ids: list[str] = field(default_factory=list)
    drops: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)  # landed, but could not be removed from the inbox


def take_in(inbox: Inbox, landing: Landing, skip: dict[str, str], log) -> Intake:
    """Land every ready drop of the inbox (except those in ``skip``, by signature) and remove it."""
    intake = Intake()
    for item in inbox.items():
        if skip.get(item.name) == item.signature:
            continue
        try:
            documents = inbox.read_documents(item)
            bad = [reason for d in documents if (reason := invalid_key_reason(d.doc_id))]
            if bad:
                raise DatasetError(f"{item.path}: {bad[0]}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
        except (DatasetError, UnicodeDecodeError, OSError) as err:
            reason = str(err)
            try:
                where = inbox.reject(item, reason)
                log.warning(f"rejected {item.name}: {reason} (moved to {where})")
            except OSError as move_error:
                log.error(f"rejected {item.name}: {reason}; could not move it aside: {move_error}")
                intake.kept[item.name] = item.signature
            intake.rejected[item.name] = reason
            continue
        landing.put_documents(documents)
        intake.doc_ids.extend(d.doc_id for d in documents)
        intake.drops.append(item.name)
        try:
            inbox.remove(item)
        except OSError as err:
            log.warning(f"landed {item.name} but could not remove it from the inbox ({err}); it will not be read again")
            intake.kept[item.name] = item.signature
        log.info(f"landed {len(documents)} documents from {item.name}")
    intake.doc_ids = sorted(set(intake.doc_ids))
    return intake


def ingestion_requests(
    instance: dg.DagsterInstance, doc_ids: list[str], run_key: str, trigger: str
) -> tuple[list[str], list[dg.RunRequest]]:
    """Partition keys to add, and the runs (as few ranges as the partition order allows) to request."""
    existing = instance.get_dynamic_partitions(DOCUMENTS.name)
    known = set(existing)
    new = [d for d in doc_ids if d not in known]
    ranges = key_ranges([*existing, *new], doc_ids)
    requests = [
        dg.RunRequest(
            run_key=f"{run_key}-{i}" if len(ranges) > 1 else run_key,
            job_name=INGESTION_JOB,
            tags={**range_tags(first, last), TRIGGER_TAG: trigger},
        )
        for i, (first, last) in enumerate(ranges)
    ]
    return new, requests


@dg.sensor(job_name=INGESTION_JOB, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def document_inbox(
    context: dg.SensorEvaluationContext, store: StoreResource, inbox: InboxResource
) -> dg.SensorResult | dg.SkipReason:
    """Documents dropped in the inbox: landed, added as partitions, and ingested in one run per batch.

    The cursor counts batches and remembers drops that were landed but could not be removed from
    the inbox, so that they are not ingested twice.
    """
    cursor = json.loads(context.cursor) if context.cursor else {"batch": 0, "kept": {}}
    lightfoot = store.open()
    box = inbox.document_inbox(lightfoot)
    intake = take_in(box, Landing(lightfoot), cursor["kept"], context.log)
    present = {item.name for item in box.items()}
    kept = {name: sig for name, sig in {**cursor["kept"], **intake.kept}.items() if name in present}
    if not intake.doc_ids:
        next_cursor = json.dumps({"batch": cursor["batch"], "kept": kept}, sort_keys=True)
        message = f"nothing new in {box.uri}" + (f"; rejected {', '.join(intake.rejected)}" if intake.rejected else "")
        return dg.SensorResult(skip_reason=dg.SkipReason(message), cursor=next_cursor)
    batch = cursor["batch"] + 1
    new, requests = ingestion_requests(context.instance, intake.doc_ids, f"inbox-{batch}", "inbox")
    context.log.info(f"batch {batch}: {len(intake.doc_ids)} documents from {', '.join(intake.drops)}; "
                     f"{len(new)} new partitions; {len(requests)} run(s)")
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[DOCUMENTS.build_add_request(new)] if new else [],
        cursor=json.dumps({"batch": batch, "kept": kept}, sort_keys=True),
    )


@dg.schedule(
    cron_schedule="15 * * * *",
    job_name=INGESTION_JOB,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
def hourly_ingestion(
    context: dg.ScheduleEvaluationContext, store: StoreResource, inbox: InboxResource
) -> list[dg.RunRequest] | dg.SkipReason:
    """Every hour: land what is in the inbox, and ingest every landed document the store lacks.

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
    take_in(inbox.document_inbox(lightfoot), landing, {}, context.log)
    live = set(lightfoot.read(DOCUMENTS_TABLE.name, columns=["doc_id"]).get_column("doc_id").to_list())
    awaiting_deletion = {r.doc_id for r in landing.deletion_requests()}
    wanted = sorted(set(landing.landed_ids()) - live - awaiting_deletion)
    if not wanted:
        return dg.SkipReason("every landed document is in the store")
    stamp = context.scheduled_execution_time.strftime("%Y%m%dT%H%M")
    new, requests = ingestion_requests(context.instance, wanted, f"hourly-{stamp}", "schedule")
    if new:
        context.instance.add_dynamic_partitions(DOCUMENTS.name, new)
    return requests
