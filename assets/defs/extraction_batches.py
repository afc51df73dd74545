"""Extraction batches: the sensor that looks at a provider's open batches, and the run that
collects them (the extractor resource's mode ``openai-batch``).

An ingestion run in that mode submits its passages to the provider's Batch API (the
``extraction_cache`` step; lightfoot_pipeline/ingest/extraction/batch_extractor.py) and stores
them as awaiting extraction. ``extraction_batches_sensor`` looks at the open batches every
``POLL_S`` seconds and, when one has ended (completed, expired, failed or cancelled), asks for one
run of ``extraction_batches_job``: the ``extraction_batches`` asset takes the answers into the
cache and the cost ledger at the batch price, deletes the batch's files at the provider, asks
again for what it did not answer, and carries its documents through extractions, forms and the
graph in one commit (lightfoot_pipeline/operations/batch_extraction.py: ``collect``); the
serving snapshot is exported after it in the same run. Metadata holds batch ids and counts only.
"""

import hashlib
from typing import Literal

import dagster as dg
from pydantic import Field

from assets.batches import dagster_batch
from assets.code_versions import code_version
from assets.keys import (
    EXTRACTION_BATCHES,
    EXTRACTION_BATCHES_GROUP,
    EXTRACTION_BATCHES_JOB,
    OWNERS,
    SERVING_SNAPSHOT,
    TRIGGER_TAG,
)
from assets.provenance import STORE_POOL, add_run_cost, report_metadata
from assets.receipts import BUSY, runs_in_flight
from assets.resources import EmbedderResource, ExtractorResource, StoreResource
from lightfoot_pipeline.models.batch_api import BatchAPIError
from lightfoot_pipeline.operations.batch_extraction import collect, poll

POLL_S = 300  # how often the sensor looks at the open batches (a provider's batch takes minutes to 24 h)


class CollectConfig(dg.Config):
    """What a collection run does with the passages an ended batch did not answer."""

    ask_again: Literal["batch", "now", "no"] = Field(
        default="batch", description="batch: in a new batch (the default, at the batch price); now: synchronously, "
        "through the endpoint at its list price, in this run; no: left awaiting extraction with their reasons")


@dg.asset(key=EXTRACTION_BATCHES, group_name=EXTRACTION_BATCHES_GROUP, kinds={"openai", "deltalake"},
          pool=STORE_POOL, owners=OWNERS, code_version=code_version(__name__, "extraction_batches"))
def extraction_batches(
    context: dg.AssetExecutionContext, config: CollectConfig, store: StoreResource, embedder: EmbedderResource,
    extractor: ExtractorResource,
) -> dg.MaterializeResult:
    """The answers of the provider's extraction batches that have ended, collected: in the
    extraction cache and the cost ledger (at the batch price), their files deleted at the
    provider, what they did not answer asked again in a new batch (each text twice at most; the run
    config's ``ask_again: now`` asks synchronously instead, ``no`` leaves them awaiting), and
    their documents' extractions, forms and graph committed in one store commit. The
    materialization counts batches, answers, files deleted and cost, never text."""
    lightfoot, choice = store.open(), extractor.choice()
    if not choice.batched:
        return dg.MaterializeResult(metadata={"collected": 0, "mode": choice.mode})
    batch_extractor = choice.batch_extractor(lightfoot, store.settings(), context.run.run_id)
    synchronous = choice.claiming_extractor(lightfoot, store.settings(), context.run.run_id) \
        if config.ask_again == "now" else None
    with dagster_batch(context):
        report = collect(lightfoot, batch_extractor, embedder.get(), store.settings(),
                         ask_again=config.ask_again != "no", synchronous=synchronous)
    calls = report.answered + report.synchronous_calls  # the batches' answers and the calls asking again now
    add_run_cost(context, model_calls=calls, tokens_in=report.tokens_in, tokens_out=report.tokens_out,
                 cost_usd=report.cost_usd)
    again = report.asked_again
    return dg.MaterializeResult(metadata={
        **report_metadata(report, ["looked_at", "answered", "without_answer", "already_taken", "answered_synchronously",
                                   "cost_usd"]),
        "collected": len(report.collected), "collected_batches": dg.MetadataValue.json(report.collected),
        "still_open": len(report.still_open), "files_deleted_at_provider": report.files_deleted,
        "asked_again": again.sent if again is not None else 0, "documents_finished": report.documents,
        "store_commit": report.seq if report.seq is not None else -1, "model_calls": calls,
        "batches_with_problems": len(report.problems),
    })


extraction_batches_job = dg.define_asset_job(
    EXTRACTION_BATCHES_JOB,
    selection=dg.AssetSelection.assets(EXTRACTION_BATCHES, SERVING_SNAPSHOT),
    description="Collect the provider's ended extraction batches, carry their documents through extractions, forms "
    "and the graph in one commit, and export the serving snapshot.",
    executor_def=dg.in_process_executor,
)


@dg.sensor(
    job_name=EXTRACTION_BATCHES_JOB, minimum_interval_seconds=POLL_S, default_status=dg.DefaultSensorStatus.RUNNING,
    description=f"Every {POLL_S // 60} minutes: looks at the provider's open extraction batches and asks for a "
    "collection run when one has ended (the extractor's mode openai-batch).",
)
def extraction_batches_sensor(
    context: dg.SensorEvaluationContext, store: StoreResource, extractor: ExtractorResource
) -> dg.SensorResult:
    """The provider's open extraction batches, looked at: their states are recorded as they change,
    and one run of ``extraction_batches_job`` is asked for when any has ended (or has files still
    at the provider to delete, or was planned and not sent). Skipped while such a run is queued or
    running; the run key names the batches it is for and the tick, and a run that takes an answer
    already taken takes it no second time (its ledger row is the mark), so a restart of the sensor
    or the daemon takes no answer twice."""
    choice = extractor.choice()
    if not choice.batched:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"the extractor's mode is {choice.mode}, not openai-batch"))
    busy = runs_in_flight(context.instance, [EXTRACTION_BATCHES_JOB], BUSY, limit=1)
    if busy:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"a collection run ({busy[0]}) is queued or running"))
    lightfoot = store.open()
    if not lightfoot.exists():
        return dg.SensorResult(skip_reason=dg.SkipReason("no store yet"))
    try:
        due = poll(lightfoot, choice.batch_extractor(lightfoot, store.settings(), "extraction-batches-sensor"))
    except BatchAPIError as err:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"the provider could not be asked: {err}"))
    if not due:
        return dg.SensorResult(skip_reason=dg.SkipReason("no extraction batch has ended"))
    tick = int(context.cursor or 0) + 1
    digest = hashlib.sha256("\n".join(sorted(due)).encode()).hexdigest()[:16]
    context.log.info(f"{len(due)} extraction batches to collect: " + ", ".join(f"{b} ({s})" for b, s in sorted(due.items())))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"collect-{digest}-{tick}", job_name=EXTRACTION_BATCHES_JOB,
                                    tags={TRIGGER_TAG: "extraction_batches_sensor"})],
        cursor=str(tick),
    )
