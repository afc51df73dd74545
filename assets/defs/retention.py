"""Deletion and retention: tombstones, hard erasure, the erasure-request inbox, the retention
schedule, and the removal of deleted documents' partitions.

A deletion request — a file in the erasure inbox, the retention schedule, or ``lightfoot delete``
on the command line — becomes a tombstone: one store commit removes the documents' rows, and a
observation of each document's partition (passages, extractions, forms) records it as
tombstoned — an observation, not a materialization, so a deleted document is never an asset's
latest materialization. The graph then recomputes only the components the deleted names touched,
and every blocking check runs again; erasure removes the documents' text from history; and only
then, with everything downstream clean, is the partition key removed.
"""

from collections.abc import Callable

import dagster as dg

from assets.code_versions import code_version
from assets.keys import (
    DELETION_JOB,
    ERASURES,
    GRAPH_ASSETS,
    OWNERS,
    PASSAGES_CHECK,
    PER_DOCUMENT_ASSETS,
    RETENTION_GROUP,
    SERVING_SNAPSHOT,
    TOMBSTONES,
    TRIGGER_TAG,
)
from assets.partitions import DOCUMENTS
from assets.provenance import STORE_POOL, commit_if_changed, store_metadata, table_metadata
from assets.receipts import IN_FLIGHT, receipt_run_key, receipt_runs, receipt_tags
from assets.resources import InboxResource, StoreResource
from lightfoot_pipeline.ingest.inbox import take_requests
from lightfoot_pipeline.ingest.landing import DeletionRequest, Landing, utc_now
from lightfoot_pipeline.ingest.receipts import ERASURE, Receipt, Receipts
from lightfoot_pipeline.ingest.retention import load_policy
from lightfoot_pipeline.operations.deletion_requests import (
    documents_past_retention,
    latest_tombstones,
    partition_status,
    tombstone_requests,
)
from lightfoot_pipeline.operations.erase import erase_history, pending_erasures
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.tables import TOMBSTONES as TOMBSTONES_TABLE

TOMBSTONED = "tombstoned"


def tombstone_event(asset_key: dg.AssetKey, doc_id: str, reason: str, erase: bool, seq: int) -> dg.AssetObservation:
    """The observation that records a document's partition of a per-document asset as deleted."""
    return dg.AssetObservation(
        asset_key=asset_key,
        partition=doc_id,
        description=f"tombstone: {reason}" if reason else "tombstone",
        metadata={
            "status": dg.MetadataValue.text(TOMBSTONED),
            "reason": dg.MetadataValue.text(reason),
            "erase": dg.MetadataValue.bool(erase),
            "store_commit": dg.MetadataValue.int(seq),
        },
    )


def restate_latest(instance: dg.DagsterInstance, key: dg.AssetKey, deleted: set[str],
                   live: Callable[[], set[str]], look_back: int = 200) -> str | None:
    """Keep a deleted document from being the asset's latest materialization.

    Dagster's SQL event storage cannot remove one partition's events, so when the latest
    materialization of ``key`` is a deleted document's, the newest materialization of a live
    document is recorded again, unchanged but for ``restated``: that partition's data is what it
    was, and the asset's latest materialization is a live one. Returns the restated partition.
    """
    latest = instance.get_latest_materialization_event(key)
    if latest is None or latest.dagster_event is None or latest.dagster_event.partition not in deleted:
        return None
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=look_back,
                                              ascending=False).records
    live_ids = live()
    for record in records:
        if record.partition_key in live_ids and record.asset_materialization is not None:
            metadata = {**record.asset_materialization.metadata,
                        "restated": dg.MetadataValue.text("recorded again after a deletion: unchanged since "
                                                          f"run {record.run_id}")}
            instance.report_runless_asset_event(dg.AssetMaterialization(
                asset_key=key, partition=record.partition_key, metadata=metadata,
                description=record.asset_materialization.description))
            return record.partition_key
    return None


@dg.asset(group_name=RETENTION_GROUP, kinds={"deltalake"}, pool=STORE_POOL, owners=OWNERS,
          code_version=code_version(__name__, "tombstones"), metadata=table_metadata(TOMBSTONES_TABLE))
def tombstones(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    """The deletion log: pending deletion requests applied, one tombstone per deleted document.

    One commit removes the documents' rows from every per-document table; their landed copies go
    too. Each deleted document's partition gets a tombstone observation. No model call.
    """
    lightfoot = store.open()
    landing = Landing(lightfoot)
    requests = landing.deletion_requests()
    with lightfoot.transaction() as tx:
        applied = tombstone_requests(tx, requests)
        deleted, not_found, passages_removed = applied.deleted, applied.not_found, applied.passages_removed
        manifest, changed = commit_if_changed(
            tx, "delete", {"deleted": len(deleted), "model_calls": 0, "run_id": context.run.run_id}
        )
    requested = [r.doc_id for r in requests]
    landing.forget(requested)  # a landed copy holds the text, and no later run may ingest it again
    landing.resolve_requests(requested)
    partitions = set(context.instance.get_dynamic_partitions(DOCUMENTS.name))
    for doc_id, (reason, erase) in sorted(deleted.items()):
        if doc_id in partitions:
            for key in PER_DOCUMENT_ASSETS:
                context.log_event(tombstone_event(key, doc_id, reason, erase, manifest.seq))
    def live() -> set[str]:
        return live_doc_ids(lightfoot, manifest)

    for key in PER_DOCUMENT_ASSETS:
        restate_latest(context.instance, key, set(deleted), live)
    context.log.info(f"tombstoned {len(deleted)} documents ({passages_removed} passages); not in the store: "
                     f"{len(not_found)}; store commit {manifest.seq}")
    metadata = store_metadata(
        lightfoot, manifest, [TOMBSTONES_TABLE.name], fingerprint=store.report_fingerprint, changed=changed
    )
    metadata.update({
        "requests": dg.MetadataValue.int(len(requests)),
        "deleted": dg.MetadataValue.json(sorted(deleted)[:200]),
        "deleted_count": dg.MetadataValue.int(len(deleted)),
        "passages_removed": dg.MetadataValue.int(passages_removed),
        "not_found": dg.MetadataValue.json(sorted(not_found)[:200]),
        "erase_requested": dg.MetadataValue.int(sum(1 for _, erase in deleted.values() if erase)),
    })
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    deps=[TOMBSTONES, *GRAPH_ASSETS],
    group_name=RETENTION_GROUP,
    kinds={"deltalake", "lancedb"},
    pool=STORE_POOL,
    owners=OWNERS,
    code_version=code_version(__name__, "erasures"),
)
def erasures(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    """Hard erasure: the text of deleted documents that asked for it, removed from everything the
    store keeps — old table versions and log entries, extraction-cache entries, cached vectors,
    landed copies and serving snapshots. Runs after the graph no longer holds their names (and,
    like the serving export, waits while a blocking check on the graph fails); a published
    snapshot that still holds them is replaced by a fresh export first."""
    lightfoot = store.open()
    pending = pending_erasures(lightfoot)
    if not pending:
        manifest = lightfoot.manifest()
        metadata = store_metadata(lightfoot, manifest, [TOMBSTONES_TABLE.name], fingerprint=False, changed=False)
        metadata["erased"] = dg.MetadataValue.json([])
        return dg.MaterializeResult(metadata=metadata)
    report = erase_history(lightfoot, pending)
    manifest = lightfoot.manifest()
    context.log.info(f"erased the history of {len(pending)} documents")
    metadata = store_metadata(lightfoot, manifest, [TOMBSTONES_TABLE.name], fingerprint=store.report_fingerprint)
    metadata.update({
        "erased": dg.MetadataValue.json(pending[:200]),
        "erased_count": dg.MetadataValue.int(len(pending)),
        "snapshots_removed": dg.MetadataValue.int(report.snapshots_removed),
        "landed_copies_removed": dg.MetadataValue.int(report.landed_copies_removed),
        "report": dg.MetadataValue.json(report.as_dict()),
    })
    return dg.MaterializeResult(metadata=metadata)


document_deletion = dg.define_asset_job(
    DELETION_JOB,
    selection=dg.AssetSelection.assets(TOMBSTONES, *GRAPH_ASSETS, SERVING_SNAPSHOT, ERASURES)
    | dg.AssetSelection.checks(PASSAGES_CHECK),
    description="Apply pending deletion requests as tombstones, recompute the affected graph, run every blocking "
    "check (a fresh rebuild among them), re-export the serving snapshot and erase history where asked.",
    executor_def=dg.in_process_executor,
)


# -- requests ---------------------------------------------------------------------------------


def _deletion_runs_in_flight(instance: dg.DagsterInstance) -> list[str]:
    """Deletion runs queued, starting, running or being canceled, whoever asked for them."""
    records = instance.get_run_records(dg.RunsFilter(job_name=DELETION_JOB, statuses=IN_FLIGHT), limit=5)
    return [r.dagster_run.run_id for r in records]


@dg.sensor(
    job_name=DELETION_JOB, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Records the erasure requests dropped in the erasure inbox and asks for deletion runs, one at a "
    "time, until a run that includes each request has succeeded.",
)
def erasure_inbox(
    context: dg.SensorEvaluationContext, store: StoreResource, inbox: InboxResource
) -> dg.SensorResult:
    """Erasure requests dropped in the erasure inbox: each recorded with a receipt, and applied by
    deletion runs until one that includes it has succeeded.

    A request file becomes deletion requests in the landing area and a pending receipt whose id
    hashes the file and what it asks; then the file is removed. On every tick each pending receipt
    is looked up in the instance by its tag (assets/receipts.py):

    - its run succeeded: the receipt is done. The sensor settles it, not a job step: a successful
      deletion run has applied every request landed before it started, so no step needs to know
      which receipts it served, and a re-execution from the UI (which keeps the run's tags)
      counts like the run itself;
    - its run is queued or running: it waits;
    - otherwise, if its documents are already deleted, and erased where asked (by a run asked for
      another receipt, the retention schedule or ``lightfoot delete``), it is done;
    - otherwise its run failed, was canceled or never came to exist (dropped as a duplicate, a
      wiped instance): it gets a run keyed by its receipt id and attempt number.

    One deletion run at a time: while any is queued or running, receipts wait for it, and then the
    oldest receipt that still needs one gets it — the run applies every pending request, so the
    others are usually settled by the next tick. A receipt whose runs keep failing is asked again
    with a growing wait (assets/receipts.py), each failed run left in the instance. Nothing depends on the cursor: resetting it,
    restarting the daemon or wiping the instance loses no request and applies none twice.
    """
    lightfoot = store.open()
    landing = Landing(lightfoot)
    box = inbox.erasure_inbox(lightfoot)
    intake = take_requests(box, landing, context.log)
    receipts = Receipts(lightfoot)
    settled, waiting, backing_off, needed = [], [], [], []
    for receipt in receipts.pending(ERASURE):
        runs = receipt_runs(context.instance, receipt)
        if runs.succeeded:
            receipts.settle(receipt, f"run {runs.succeeded} succeeded")
            settled.append(receipt)
        elif runs.in_flight:
            waiting.append(receipt)
        elif runs.backing_off():
            backing_off.append(receipt)
        elif not (outstanding := receipts.outstanding_deletions(receipt)):
            receipts.settle(receipt, "its documents were already deleted" + (" and erased" if receipt.erase_ids else ""))
            settled.append(receipt)
        else:
            needed.append((receipt, runs, outstanding))
    for receipt in settled:
        context.log.info(f"request {receipt.receipt_id} from {receipt.origin} is done")
    news = [f"took {len(intake.receipts)} request files"] if intake.receipts else [f"no new request file in {box.uri}"]
    if intake.rejected:
        news.append(f"rejected {', '.join(sorted(intake.rejected))}")
    if settled:
        news.append(f"{len(settled)} requests done")
    if backing_off:
        news.append(f"{len(backing_off)} requests whose runs failed repeatedly wait before their next attempt")
    if not needed:
        if waiting:
            news.append(f"{len(waiting)} requests waiting for their runs")
        return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(news)))
    busy = _deletion_runs_in_flight(context.instance)
    if busy:
        news.append(f"{len(needed)} requests wait for deletion run {busy[0]} to finish")
        return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(news)))
    receipt, runs, outstanding = needed[0]
    why = (f"attempt {runs.attempt} after failed or canceled runs {', '.join(runs.failed)}" if runs.failed
           else f"attempt {runs.attempt}: no run of it in the instance")
    example = ", ".join(f"{d} ({reason})" for d, reason in sorted(outstanding.items())[:3])
    more = f"; {len(needed) - 1} more requests pending, applied by the same run" if len(needed) > 1 else ""
    context.log.info(f"{'; '.join(news)}; requesting a deletion run for request {receipt.receipt_id} from "
                     f"{receipt.origin}, {why}; outstanding: {example}{more}")
    return dg.SensorResult(run_requests=[dg.RunRequest(
        run_key=receipt_run_key("erasure", receipt, runs.attempt),
        tags={TRIGGER_TAG: "erasure-inbox", **receipt_tags(receipt, runs.attempt)},
    )])


@dg.schedule(
    cron_schedule="0 3 * * *",
    job_name=DELETION_JOB,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily at 03:00 UTC: the documents past their retention date (retention_until, or the policy "
    "file) are deleted and their history erased.",
)
def retention_schedule(
    context: dg.ScheduleEvaluationContext, store: StoreResource, inbox: InboxResource
) -> dg.RunRequest | dg.SkipReason:
    """Daily: documents past their retention date (``retention_until``, or the policy file) are
    deleted and their history erased.

    The day's deletions get a receipt like an erasure request's, and the run carries its tag, so
    that the ``erasure_inbox`` sensor asks again for a run that failed or never came to exist."""
    lightfoot = store.open()
    landing = Landing(lightfoot)
    policy = load_policy(inbox.policy_path(), lightfoot.storage_options)
    today = context.scheduled_execution_time.date()
    due = documents_past_retention(lightfoot, landing, policy, today)
    if not due:
        return dg.SkipReason(f"no document is past its retention date on {today}")
    now = utc_now()
    requests = [DeletionRequest(d.doc_id, d.reason, True, now, "retention schedule") for d in due]
    receipt = Receipt.for_deletions({"schedule": "retention_schedule", "date": today.isoformat()}, requests,
                                    f"retention schedule {today.isoformat()}")
    landing.request_deletions(requests)
    Receipts(lightfoot).record(receipt)
    context.log.info(f"{len(due)} documents past their retention date (request {receipt.receipt_id})")
    return dg.RunRequest(run_key=f"retention-{today.isoformat()}",
                         tags={TRIGGER_TAG: "retention", **receipt_tags(receipt, 0)})


# -- removing the partitions of deleted documents ---------------------------------------------


@dg.sensor(
    minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Removes a deleted document's partition once the graph has applied its tombstone and its history "
    "is erased where that was asked.",
)
def deleted_partitions(context: dg.SensorEvaluationContext, store: StoreResource) -> dg.SensorResult:
    """Removes the partition of a deleted document once everything downstream of its tombstone is
    clean: the graph has applied it, and its history is erased when that was asked.

    A document deleted outside Dagster (``lightfoot delete``) gets its tombstone observation
    here. The cursor is the store commit and the partition count it last looked at.
    """
    lightfoot = store.open()
    keys = context.instance.get_dynamic_partitions(DOCUMENTS.name)
    cursor = f"{lightfoot.manifest().seq}:{len(keys)}"
    if cursor == context.cursor:
        return dg.SensorResult(skip_reason=dg.SkipReason("no store commit since the last look"), cursor=cursor)
    landing = Landing(lightfoot)
    removable, waiting, stale = partition_status(lightfoot, landing, keys)
    for key, why in sorted(waiting.items())[:20]:
        context.log.info(f"keeping partition {key}: {why}")
    if not removable:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"no partition to remove ({len(waiting)} waiting)"),
                               cursor=cursor)
    landing.forget(stale)
    events = []
    latest = latest_tombstones(lightfoot, removable)
    for key in removable:
        if not _has_tombstone(context.instance, key):
            t = latest[key]
            events.extend(tombstone_event(asset, key, t["reason"] or "", bool(t["erase"]), lightfoot.manifest().seq)
                          for asset in PER_DOCUMENT_ASSETS)
    context.log.info(f"removing {len(removable)} partitions of deleted documents")
    return dg.SensorResult(
        dynamic_partitions_requests=[DOCUMENTS.build_delete_request(removable)],
        asset_events=events,
        cursor=cursor,
    )


def _has_tombstone(instance: dg.DagsterInstance, doc_id: str) -> bool:
    """Whether the partition's latest observation of the first per-document asset is a tombstone
    newer than its latest materialization (a document ingested again after its deletion has none)."""
    asset = PER_DOCUMENT_ASSETS[0]
    observed = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[doc_id]), limit=1)
    if not observed.records:
        return False
    record = observed.records[0]
    status = record.asset_observation.metadata.get("status") if record.asset_observation else None
    if getattr(status, "value", None) != TOMBSTONED:
        return False
    made = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[doc_id]), limit=1)
    return not made.records or made.records[0].storage_id < record.storage_id
