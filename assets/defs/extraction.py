"""Extraction: the ``extraction_cache``, ``extractions`` and ``forms`` assets (per batch),
and the sensor that sizes the extraction pool.

One extraction per passage: recorded output replayed where the document came with one, else one
language-model call. The calls are a step of their own (``extraction_cache``) that writes only
the extraction cache, in the wide ``lightfoot_extraction`` pool, so runs in parallel pods extract
at once; ``extractions`` then reads the answers from the cache and commits them inside
``lightfoot_store``, one commit at a time. A passage whose extraction fails is stored with its
reason, never dropped. Forms and fact assertions are then derived from the stored extractions.
"""

import functools

import dagster as dg

from assets.batches import dagster_batch
from assets.code_versions import code_version
from assets.keys import EXTRACTION_CACHE, EXTRACTIONS, OWNERS, PASSAGES
from assets.partitions import PER_BATCH
from assets.provenance import (
    EXTRACTION_POOL,
    STORE_POOL,
    add_run_cost,
    batch_metadata,
    metadata_value,
    report_metadata,
    store_metadata,
    table_metadata,
)
from assets.resources import ExtractorResource, StoreResource
from lightfoot_pipeline.ingest.extraction.batch_extractor import AWAITING
from lightfoot_pipeline.ingest.extraction.claims import ExtractionClaims
from lightfoot_pipeline.ingest.extraction.outcome import reason_kind
from lightfoot_pipeline.operations.batches import (
    STAGE_TABLES,
    answer_batch_passages,
    derive_batch_forms,
    record_batch_extractions,
)
from lightfoot_pipeline.settings import extraction_slots


@dg.asset(**{**PER_BATCH, "pool": EXTRACTION_POOL}, deps=[PASSAGES], kinds={"deltalake", "openai"}, owners=OWNERS,
          code_version=code_version(__name__, "extraction_cache"),
          metadata=table_metadata(*STAGE_TABLES["extraction_cache"]))
def extraction_cache(
    context: dg.AssetExecutionContext, store: StoreResource, extractor: ExtractorResource
) -> dg.MaterializeResult:
    """The model's answer for every passage of a batch's documents that has no extraction yet, in the
    extraction cache: the only thing this step writes (no store commit), so it runs beside other
    runs' extraction, in the ``lightfoot_extraction`` pool (LIGHTFOOT_EXTRACTION_SLOTS at once).

    A passage text the cache answers is not asked again, and one another run is asking is waited
    for rather than asked twice (lightfoot_pipeline/ingest/extraction/claims.py). Documents with
    recorded extractions are left to replay. When a call gets no answer (the endpoint fails, after
    the client's retries) the step fails once every other answer is cached, so the run fails and
    the drop's next attempt asks again for those passages only; an answer the model gave but that
    is unusable keeps its reason with the released claim, and ``extractions`` stores the passage
    as failed with it. The materialization counts the batch's model calls, retries (requests sent
    again, not further calls), tokens and cost.
    """
    batch, choice = context.partition_key, extractor.choice()
    lightfoot = store.open()
    found = answer_batch_passages(
        lightfoot, batch, lambda: choice.model_extractor(lightfoot, store.settings(), context.run.run_id),
        choice.asks_model, ExtractionClaims(lightfoot, context.run.run_id),
        with_recorded=choice.mode == "auto",  # only the automatic mode asks by whether a document came with a recording
        finished=functools.partial(_run_finished, context.instance), progress=_progress(context),
        echo=context.log.info)
    report, cost = found.answers, found.cost()
    metadata: dict[str, dg.RawMetadataValue] = {
        **batch_metadata(batch),
        **report_metadata(found, ["documents", "documents_asked", "passages", "unusable"],
                          names={"unusable": "model_unusable"}),
        "dagster/row_count": dg.MetadataValue.int(found.passages),
        **report_metadata(report, ["texts", "cached", "asked", "answered_elsewhere"],
                          names={"texts": "passage_texts", "cached": "already_cached",
                                 "answered_elsewhere": "answered_by_other_runs"}),
        "failed": dg.MetadataValue.int(len(report.failed)),
        **{name: metadata_value(value) for name, value in cost.items()},
    }
    if report.failed:
        metadata["failures"] = _failure_table(report.failed)
    add_run_cost(context, model_calls=int(cost["model_calls"]), tokens_in=int(cost["tokens_in"]),
                 tokens_out=int(cost["tokens_out"]), cost_usd=float(cost["cost_usd"]))
    # Passages submitted in a provider's batch await it (extraction_batches.py collects them): no failure.
    awaiting = [o for o in report.unanswered if o.reason.startswith(AWAITING)]
    unanswered = [o for o in report.unanswered if not o.reason.startswith(AWAITING)]
    if awaiting:
        metadata["awaiting_batch"] = dg.MetadataValue.int(len(awaiting))
    if unanswered:  # the calls made are paid for and on the run's tags
        first = reason_kind(unanswered[0].reason)
        raise dg.Failure(
            description=f"{len(unanswered)} of {report.texts} passage texts got no answer from the model "
            f"(e.g. {first}: a passage of document {unanswered[0].doc_id}); the answers taken are in the extraction "
            "cache, and the next attempt asks only for the rest",
            metadata=metadata,
        )
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(**PER_BATCH, deps=[EXTRACTION_CACHE], kinds={"deltalake", "python"}, owners=OWNERS,
          code_version=code_version(__name__, "extractions"), metadata=table_metadata(*STAGE_TABLES["extractions"]))
def extractions(
    context: dg.AssetExecutionContext, store: StoreResource, extractor: ExtractorResource
) -> dg.MaterializeResult:
    """The validated entities and facts of every passage of a batch's documents, or why its
    extraction failed.

    Recorded extractions are replayed; every other passage's answer is read from the extraction
    cache, where the ``extraction_cache`` step put it: this step makes no model call, so it holds
    the store's writer pool only to read and commit (operations/batches.py:
    ``record_batch_extractions``). The materialization counts the batch's passages, extractions
    and failures, and its documents by status.
    """
    batch, choice = context.partition_key, extractor.choice()
    lightfoot = store.open()

    def chosen(recorded):
        return choice.extractor(lightfoot, store.settings(), recorded, context.run.run_id, from_cache=True)

    with dagster_batch(context):
        report = record_batch_extractions(lightfoot, batch, chosen, fingerprint=store.report_fingerprint)
    assert report.state is not None
    failures = report.failures
    metadata = {
        **batch_metadata(batch, report.counts),
        **store_metadata(report.state, lightfoot.uri),
        "dagster/row_count": dg.MetadataValue.int(report.rows),
        "passages_already_extracted": dg.MetadataValue.int(report.already_extracted),
        "extracted": dg.MetadataValue.int(len(report.outcomes) - len(failures)),
        "replayed": dg.MetadataValue.int(report.replayed),
        "from_cache": dg.MetadataValue.int(report.from_cache),
        "failed": dg.MetadataValue.int(len(failures)),
        "validation": dg.MetadataValue.json(report.validation),
        **{f"documents_{status}": dg.MetadataValue.int(n) for status, n in report.documents.items()},
    }
    if failures:
        metadata["failures"] = _failure_table(failures)
    return dg.MaterializeResult(metadata=metadata)


def _run_finished(instance: dg.DagsterInstance, run_id: str) -> bool:
    """Whether a claimant run has ended (or is unknown to the instance): its claims are void."""
    run = instance.get_run_by_id(run_id)
    return run is None or run.is_finished


def _failure_table(failures) -> dg.MetadataValue:
    """The first failures by passage, document and kind of reason (the full reason may quote the
    passage: it stays with the extraction in the store, where ``lightfoot explain doc ID`` shows it)."""
    return dg.MetadataValue.md(
        "| passage | document | reason |\n|---|---|---|\n"
        + "\n".join(f"| {o.chunk_id} | {o.doc_id} | {reason_kind(o.reason).replace('|', '/')} |" for o in failures[:25])
    )


def _progress(context: dg.AssetExecutionContext):
    step = {"next": 0.0}

    def report(done: int, total: int) -> None:
        if total and (done / total >= step["next"] or done == total):
            context.log.info(f"extracted {done}/{total} passages")
            step["next"] = done / total + 0.1

    return report


@dg.asset(**PER_BATCH, deps=[EXTRACTIONS], kinds={"deltalake", "python"}, owners=OWNERS,
          code_version=code_version(__name__, "forms"), metadata=table_metadata(*STAGE_TABLES["forms"]))
def forms(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    """Every normalised entity name, fact subject and fact object of a batch's passages, and
    which passage asserted which fact: the batch's input to the graph (operations/batches.py:
    ``derive_batch_forms``). The materialization counts the batch's forms, distinct names and
    fact assertions."""
    batch = context.partition_key
    lightfoot = store.open()
    with dagster_batch(context):
        report = derive_batch_forms(lightfoot, batch, fingerprint=store.report_fingerprint)
    assert report.state is not None
    return dg.MaterializeResult(metadata={
        **batch_metadata(batch, report.counts),
        **store_metadata(report.state, lightfoot.uri),
        "dagster/row_count": dg.MetadataValue.int(report.forms),
        "forms_derived": dg.MetadataValue.int(report.forms),
        "fact_assertions_derived": dg.MetadataValue.int(report.fact_assertions),
        "names": dg.MetadataValue.int(report.names),
        "facts": dg.MetadataValue.int(report.facts),
    })


@dg.sensor(
    minimum_interval_seconds=300, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Keeps the pools' limits in the instance's storage: lightfoot_store at one slot, "
    "lightfoot_extraction at LIGHTFOOT_EXTRACTION_SLOTS. Never asks for a run.",
)
def pool_limits_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    """Keeps the pools' limits in the instance's storage: ``lightfoot_store`` at one slot,
    ``lightfoot_extraction`` at LIGHTFOOT_EXTRACTION_SLOTS.

    A pool's own limit lives in the instance's storage (``dagster instance concurrency set`` sets
    it there). The configuration's default (dagster.yaml, the Helm values: one slot) is applied
    only when a step first claims a pool, and two runs whose store steps first claim it at the same
    moment could each apply it and each get a slot: two store writers at once. So this sensor sets
    the store pool too, before runs claim it, and whenever either limit differs from its setting.
    (On SQLite the one slot stays best effort even then, as dagster.yaml says: its slot claim has
    no row lock.) It never asks for a run.
    """
    storage = context.instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return dg.SkipReason("this instance's storage keeps no pool limits")
    said = []
    for pool, slots in ((STORE_POOL, 1), (EXTRACTION_POOL, extraction_slots())):
        current = storage.get_concurrency_info(pool).slot_count
        if current == slots:
            said.append(f"pool {pool} has {slots} slots")
        else:
            storage.set_concurrency_slots(pool, slots)
            said.append(f"pool {pool} set from {current} to {slots} slots")
    return dg.SkipReason("; ".join(said))
