"""Deletion and retention: tombstones, hard erasure, the erasure-request inbox, the retention
schedule, and the tombstones of deleted documents that the command line made.

A deletion request — a file in the erasure inbox, the retention schedule, or ``lightfoot delete``
on the command line — becomes a tombstone: one store commit removes the documents' rows. An
erasure request or a day's retention run is a deletion run, its key under the
``lightfoot/deletion`` tag (assets/partitions.py); its ``tombstones`` step records the deletion as
a tombstone within the batches that held each document (an observation of their per-batch assets
that counts their deleted documents), and a batch whose documents are all deleted is tombstoned as a whole: its partition goes at once, so
nothing deleted shows as materialized (assets/batches.py). The graph then recomputes only the
components the deleted names touched, and every blocking check runs again; erasure removes the
documents' text from history.
"""

import dagster as dg

from assets.batches import apply_deletion_events, dagster_batch, deletion_events, run_batch_id
from assets.code_versions import code_version
from assets.defs.serving import AUDIT_DOCUMENT_LIMIT
from assets.keys import (
    DELETION_JOB,
    DELETION_TAG,
    ERASURES,
    GRAPH_ASSETS,
    OWNERS,
    RETENTION_GROUP,
    SERVING_SNAPSHOT,
    TOMBSTONES,
    TRIGGER_TAG,
)
from assets.partitions import BATCHES, LEGACY_HINT, RETENTION, legacy_layout, receipt_batch
from assets.provenance import STORE_POOL, store_metadata, table_metadata
from assets.receipts import receipt_run_key, receipt_runs, receipt_tags, runs_in_flight
from assets.resources import EmbedderResource, ExtractorResource, InboxResource, StoreResource
from lightfoot_pipeline.evaluation.permission_audit import permission_check
from lightfoot_pipeline.ingest.inbox import take_requests
from lightfoot_pipeline.ingest.landing import Landing
from lightfoot_pipeline.ingest.retention import load_policy
from lightfoot_pipeline.operations.batches import STAGE_TABLES, store_state
from lightfoot_pipeline.operations.deletion_requests import (
    apply_deletion_requests,
    deletions_outside,
    request_retention_deletions,
    triage_erasure_requests,
)
from lightfoot_pipeline.operations.erase import erase_history, pending_erasures


@dg.asset(group_name=RETENTION_GROUP, kinds={"deltalake"}, pool=STORE_POOL, owners=OWNERS,
          code_version=code_version(__name__, "tombstones"), metadata=table_metadata(*STAGE_TABLES["tombstones"]))
def tombstones(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    """The deletion log: pending deletion requests applied, one tombstone per deleted document.

    One commit removes the documents' rows from every per-document table; their landed copies go
    too (operations/deletion_requests.py: ``apply_deletion_requests``). Each batch that held a
    deleted document gets a tombstone observation that counts its deleted and live documents, and
    a batch left with none is removed. No model call.

    Not partitioned: each materialization names its deletion run (``batch``: ``erase-…`` or
    ``retention-…``, the run's ``lightfoot/deletion`` tag). A partition per deletion run showed
    "All" in every status column of the UI until the first deletion run (no partition at all).
    """
    lightfoot = store.open()
    with dagster_batch(context):
        done = apply_deletion_requests(lightfoot, fingerprint=store.report_fingerprint)
    applied = done.applied
    events = deletion_events(lightfoot, context.instance, list(applied.deleted), done.state.seq)
    apply_deletion_events(context, events)
    context.log.info(f"tombstoned {len(applied.deleted)} documents ({applied.passages_removed} passages); not in the "
                     f"store: {len(applied.not_found)}; store commit {done.state.seq}")
    return dg.MaterializeResult(metadata={
        "batch": dg.MetadataValue.text(run_batch_id(context.run)),
        **store_metadata(done.state, lightfoot.uri),
        "requests": dg.MetadataValue.int(done.requests),
        "dagster/row_count": dg.MetadataValue.int(len(applied.deleted)),
        "documents_deleted": dg.MetadataValue.int(len(applied.deleted)),
        "passages_removed": dg.MetadataValue.int(applied.passages_removed),
        "not_found": dg.MetadataValue.int(len(applied.not_found)),
        "erase_requested": dg.MetadataValue.int(sum(1 for _, erase in applied.deleted.values() if erase)),
        "batches_tombstoned": dg.MetadataValue.int(len(events.emptied)),
        "batches_partly_deleted": dg.MetadataValue.int(len(events.touched)),
    })


@dg.asset(
    deps=[TOMBSTONES, *GRAPH_ASSETS],
    group_name=RETENTION_GROUP,
    kinds={"deltalake", "lancedb"},
    pool=STORE_POOL,
    owners=OWNERS,
    code_version=code_version(__name__, "erasures"),
)
def erasures(
    context: dg.AssetExecutionContext, store: StoreResource, embedder: EmbedderResource, extractor: ExtractorResource
) -> dg.MaterializeResult:
    """Hard erasure: the text of deleted documents that asked for it, removed from everything the
    store keeps — old table versions and log entries, extraction-cache entries, cached vectors,
    landed copies, serving snapshots and the files of extraction batches at the provider (the
    erasure stays pending while one may hold the text). Runs after the graph no longer holds their names (and,
    like the serving export, waits while a blocking check on the graph fails); a published
    snapshot that still holds them is replaced by a fresh export first, published only if it
    passes the permission check (with the serving snapshot's defaults; serving.py). The materialization holds
    counts and a digest of the erased ids, never the ids: it stays in Dagster's storage for good."""
    lightfoot = store.open()
    pending = pending_erasures(lightfoot)
    summary = {"erased_count": 0}
    if pending:
        with dagster_batch(context):
            audit = permission_check(embedder.get, store.settings(), document_limit=AUDIT_DOCUMENT_LIMIT,
                                     echo=context.log.info)
            # The files of extraction batches that hold the text are deleted at the extractor's provider.
            summary = erase_history(lightfoot, pending, snapshot_checks=[audit],
                                    batch_api=extractor.endpoint().batch_api()).summary()
        context.log.info(f"erased the history of {len(pending)} documents")
    state = store_state(lightfoot, lightfoot.manifest(), [t.name for t in STAGE_TABLES["tombstones"]],
                        changed=bool(pending), fingerprint=bool(pending) and store.report_fingerprint)
    return dg.MaterializeResult(metadata={
        **store_metadata(state, lightfoot.uri),
        **{name: dg.MetadataValue.int(n) for name, n in summary.items() if isinstance(n, int)},
        **{name: dg.MetadataValue.text(v) for name, v in summary.items() if isinstance(v, str)},
    })


deletion_job = dg.define_asset_job(
    DELETION_JOB,
    selection=dg.AssetSelection.assets(TOMBSTONES, *GRAPH_ASSETS, SERVING_SNAPSHOT, ERASURES),
    description="Apply pending deletion requests as tombstones (one run per request or retention day, its key "
    "under the lightfoot/deletion tag), recompute the affected graph, run every blocking "
    "check (a fresh rebuild among them), re-export the serving snapshot and erase history where asked.",
    executor_def=dg.in_process_executor,
)


# -- requests ---------------------------------------------------------------------------------


@dg.sensor(
    job_name=DELETION_JOB, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Records the erasure requests dropped in the erasure inbox and asks for deletion runs, one at a "
    "time, until a run that includes each request has succeeded.",
)
def erasure_sensor(
    context: dg.SensorEvaluationContext, store: StoreResource, inbox: InboxResource
) -> dg.SensorResult:
    """Erasure requests dropped in the erasure inbox: each recorded with a receipt, and applied by
    deletion runs until one that includes it has succeeded.

    A request file becomes deletion requests in the landing area and a pending receipt whose id
    hashes the file and what it asks; then the file is removed. On every tick each pending receipt
    is looked up in the instance by its tag (assets/receipts.py) and settled, left waiting or
    given a run (operations/deletion_requests.py: ``triage_erasure_requests``). The sensor settles
    a receipt, not a job step, so a re-execution from the UI (which keeps the run's tags) counts
    like the run itself; a run is keyed by its receipt id and attempt number.

    One deletion run at a time: while any is queued or running, receipts wait for it, and then the
    oldest receipt that still needs one gets it — the run applies every pending request, so the
    others are usually settled by the next tick. Nothing depends on the cursor: resetting it,
    restarting the daemon or wiping the instance loses no request and applies none twice.
    """
    if legacy_layout(context.instance):
        return dg.SensorResult(skip_reason=dg.SkipReason(LEGACY_HINT))
    lightfoot = store.open()
    intake = take_requests(inbox.erasure_inbox(lightfoot), Landing(lightfoot), context.log)
    triage = triage_erasure_requests(lightfoot, lambda receipt: receipt_runs(context.instance, receipt))
    for receipt in triage.settled:
        context.log.info(f"request {receipt.receipt_id} from {receipt.origin} is done")
    news, needed = intake.news() + triage.news(), triage.needed
    if not needed:
        return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(news)))
    busy = runs_in_flight(context.instance, [DELETION_JOB])
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
        tags={TRIGGER_TAG: "erasure-inbox", DELETION_TAG: receipt_batch(receipt), **receipt_tags(receipt, runs.attempt)},
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
    that the ``erasure_sensor`` asks again for a run that failed or never came to exist."""
    if legacy_layout(context.instance):
        return dg.SkipReason(LEGACY_HINT)
    today = context.scheduled_execution_time.date()
    lightfoot = store.open()
    receipt = request_retention_deletions(lightfoot, load_policy(inbox.policy_path(), lightfoot.storage_options), today)
    if receipt is None:
        return dg.SkipReason(f"no document is past its retention date on {today}")
    context.log.info(f"{len(receipt.doc_ids)} documents past their retention date (request {receipt.receipt_id})")
    return dg.RunRequest(run_key=f"retention-{today.isoformat()}", tags={
        TRIGGER_TAG: "retention", DELETION_TAG: receipt_batch(receipt, RETENTION), **receipt_tags(receipt, 0)})


# -- deletions made outside Dagster ----------------------------------------------------------


@dg.sensor(
    minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Records the deletions that the command line (lightfoot delete, sync) made as tombstones within the "
    "batches that held the documents, and removes the batches left with none. Never asks for a run.",
)
def outside_deletions_sensor(context: dg.SensorEvaluationContext, store: StoreResource) -> dg.SensorResult:
    """Deletions committed outside a Dagster run (``lightfoot delete``, ``lightfoot sync``): each
    becomes a tombstone within the batches that held the documents, as a deletion run's does, and
    a batch left with no live document is removed. A deletion made by a Dagster run was recorded
    by that run's step.

    The cursor is the last store commit looked at, and only spares reading older ones again: what
    is recorded is read from the instance. Without a cursor (a new or renamed sensor, a reset one)
    every deletion of the store's batch log is looked at, and a batch whose latest tombstone
    observation already counts its deleted documents is left as it is, so no deletion is recorded
    twice. The landed copies older than a deletion go in either case."""
    lightfoot = store.open()
    seq = lightfoot.manifest().seq
    since = int(context.cursor) if (context.cursor or "").isdigit() else 0
    if seq == since:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"no store commit since {since}"), cursor=str(seq))
    deleted = deletions_outside(lightfoot, since, lambda run_id: context.instance.get_run_by_id(run_id) is not None)
    events = deletion_events(lightfoot, context.instance, deleted, seq, unrecorded_only=True) if deleted else None
    if events is None or not events.observations:
        return dg.SensorResult(skip_reason=dg.SkipReason(
            f"store commits {since + 1}-{seq}: no deletion outside Dagster left to record in a batch this instance "
            "holds"), cursor=str(seq))
    context.log.info(f"{len(deleted)} documents deleted outside Dagster: {len(events.emptied)} batches tombstoned "
                     f"as a whole, {len(events.touched)} keep live documents")
    return dg.SensorResult(
        asset_events=events.observations,
        dynamic_partitions_requests=[BATCHES.build_delete_request(events.emptied)] if events.emptied else [],
        cursor=str(seq),
    )
