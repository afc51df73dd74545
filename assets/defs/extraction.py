"""Extraction: the ``extraction_cache``, ``extractions`` and ``forms`` assets (per document),
and the sensor that sizes the extraction pool.

One extraction per passage: recorded output replayed where the document came with one, else one
language-model call. The calls are a step of their own (``extraction_cache``) that writes only
the extraction cache, in the wide ``lightfoot_extraction`` pool, so runs in parallel pods extract
at once; ``extractions`` then reads the answers from the cache and commits them inside
``lightfoot_store``, one commit at a time. A passage whose extraction fails is stored with its
reason, never dropped. Forms and fact assertions are then derived from the stored extractions.
"""

import functools
from collections import Counter

import dagster as dg
import polars as pl

from assets.keys import EXTRACTION_CACHE, EXTRACTIONS, PASSAGES
from assets.partitions import PER_DOCUMENT
from assets.provenance import EXTRACTION_POOL, commit_if_changed, store_metadata
from assets.resources import ExtractorResource, StoreResource
from lightfoot_pipeline.index.documents import derive_forms, record_extractions
from lightfoot_pipeline.ingest.extraction.answers import AnswerReport, answer_passages
from lightfoot_pipeline.ingest.extraction.claims import ExtractionClaims
from lightfoot_pipeline.ingest.extraction.outcome import OK
from lightfoot_pipeline.ingest.landing import Landing
from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.settings import extraction_slots
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import EXTRACTIONS as EXTRACTIONS_TABLE
from lightfoot_pipeline.store.tables import FACT_SOURCES, FORMS
from lightfoot_pipeline.store.tables import PASSAGES as PASSAGES_TABLE


@dg.asset(**{**PER_DOCUMENT, "pool": EXTRACTION_POOL}, deps=[PASSAGES], kinds={"deltalake", "openai"})
def extraction_cache(
    context: dg.AssetExecutionContext, store: StoreResource, extractor: ExtractorResource
) -> dg.MaterializeResult:
    """The model's answer for every passage of a document that has no extraction yet, in the
    extraction cache: the only thing this step writes (no store commit), so it runs beside other
    runs' extraction, in the ``lightfoot_extraction`` pool (LIGHTFOOT_EXTRACTION_SLOTS at once).

    A passage text the cache answers is not asked again, and one another run is asking is waited
    for rather than asked twice (lightfoot_pipeline/ingest/extraction/claims.py). Documents with
    recorded extractions are left to replay. When a call gets no answer (the endpoint fails, after
    the client's retries) the step fails once every other answer is cached, so the run fails and
    the drop's next attempt asks again for those passages only; an answer the model gave but that
    is unusable keeps its reason with the released claim, and ``extractions`` stores the passage
    as failed with it. Model calls, retries, tokens and cost are in the metadata.
    """
    keys = sorted(context.partition_keys)
    lightfoot = store.open()
    needed = _unextracted(lightfoot, keys)
    recorded = _recorded(lightfoot, needed)
    asked = [p for p in needed if extractor.asks_model(p.doc_id, recorded)]
    report, unusable = AnswerReport(), ""
    if asked:
        try:
            model = extractor.model_extractor(lightfoot, store.settings(), context.run.run_id)
        except Exception as err:  # the extractions step fails each passage with this reason
            unusable = f"the language model is not usable: {err}"
            context.log.warning(unusable)
        else:
            context.log.info(f"answering {len(asked)} passages with {model.name}")
            claims = ExtractionClaims(lightfoot, context.run.run_id)
            report = answer_passages(model, claims, asked, progress=_progress(context),
                                     finished=functools.partial(_run_finished, context.instance))
    calls = report.outcomes
    metadata: dict[str, dg.RawMetadataValue] = {
        "passages_in_run": dg.MetadataValue.int(len(needed)),
        "passage_texts": dg.MetadataValue.int(report.texts),
        "already_cached": dg.MetadataValue.int(report.cached),
        "asked": dg.MetadataValue.int(report.asked),
        "answered_by_other_runs": dg.MetadataValue.int(report.answered_elsewhere),
        "failed": dg.MetadataValue.int(len(report.failed)),
        "model_calls": dg.MetadataValue.int(sum(o.model_calls for o in calls)),
        "retries": dg.MetadataValue.int(sum(o.retries for o in calls)),
        "tokens_in": dg.MetadataValue.int(sum(o.tokens_in for o in calls)),
        "tokens_out": dg.MetadataValue.int(sum(o.tokens_out for o in calls)),
        "cost_usd": dg.MetadataValue.float(round(float(sum(o.cost_usd for o in calls)), 6)),
    }
    if unusable:
        metadata["model_unusable"] = dg.MetadataValue.text(unusable)
    if report.failed:
        metadata["failures"] = _failure_table(report.failed)
    if report.unanswered:
        first = report.unanswered[0].reason
        raise dg.Failure(
            description=f"{len(report.unanswered)} of {report.texts} passage texts got no answer from the model "
            f"(e.g. {first}); the answers taken are in the extraction cache, and the next attempt asks only "
            "for the rest",
            metadata=metadata,
        )
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(**PER_DOCUMENT, deps=[EXTRACTION_CACHE], kinds={"deltalake", "python"})
def extractions(
    context: dg.AssetExecutionContext, store: StoreResource, extractor: ExtractorResource
) -> dg.MaterializeResult:
    """The validated entities and facts of every passage of a document, or why its extraction failed.

    Recorded extractions are replayed; every other passage's answer is read from the extraction
    cache, where the ``extraction_cache`` step put it: this step makes no model call, so it holds
    the store's writer pool only to read and commit. A passage with no usable answer is stored as
    failed with the reason; passages extracted before are left as they are.
    """
    keys = sorted(context.partition_keys)
    lightfoot = store.open()
    needed = _unextracted(lightfoot, keys)
    recorded = _recorded(lightfoot, needed)
    outcomes = []
    if needed:
        chosen = extractor.get(lightfoot, store.settings(), recorded, context.run.run_id, from_cache=True)
        context.log.info(f"recording {len(needed)} extractions with {chosen.name}")
        outcomes = chosen.extract(needed)
    with lightfoot.transaction() as tx:
        live = set(tx.table(PASSAGES_TABLE.name).filter(pl.col("doc_id").is_in(keys)).get_column("chunk_id").to_list())
        kept = [o for o in outcomes if o.chunk_id in live]  # a document deleted meanwhile stays deleted
        record_extractions(tx, kept)
        manifest, changed = commit_if_changed(tx, "extractions", {"passages": len(kept), "run_id": context.run.run_id})
    failures = [o for o in kept if o.status != OK]
    validation: Counter = Counter()
    for o in kept:
        if o.record is not None:
            validation.update(o.record.counts())
    metadata = store_metadata(
        lightfoot, manifest, [EXTRACTIONS_TABLE.name], fingerprint=store.report_fingerprint, changed=changed,
    )
    in_run = lightfoot.read(PASSAGES_TABLE.name, manifest, columns=["doc_id"]).filter(pl.col("doc_id").is_in(keys))
    metadata.update({
        "passages_in_run": dg.MetadataValue.int(in_run.height),
        "already_extracted": dg.MetadataValue.int(in_run.height - len(needed)),
        "extracted": dg.MetadataValue.int(len(kept) - len(failures)),
        "replayed": dg.MetadataValue.int(sum(1 for o in kept if o.status == OK and o.doc_id in recorded and not o.cached)),
        "from_cache": dg.MetadataValue.int(sum(1 for o in kept if o.status == OK and o.cached)),
        "failed": dg.MetadataValue.int(len(failures)),
        "validation": dg.MetadataValue.json(dict(sorted(validation.items()))),
    })
    if failures:
        metadata["failures"] = _failure_table(failures)
    return dg.MaterializeResult(metadata=metadata)


def _unextracted(lightfoot: Store, keys: list[str]) -> list[Passage]:
    """The documents' passages with no successful extraction stored, in document order."""
    stored = lightfoot.read(PASSAGES_TABLE.name).filter(pl.col("doc_id").is_in(keys))
    done = set(
        lightfoot.read(EXTRACTIONS_TABLE.name, columns=["chunk_id", "status"])
        .filter(pl.col("status") == OK).get_column("chunk_id").to_list()
    )
    return [
        Passage(r["chunk_id"], r["doc_id"], r["ordinal"], r["title"], r["text"])
        for r in stored.sort("doc_id", "ordinal").iter_rows(named=True)
        if r["chunk_id"] not in done
    ]


def _recorded(lightfoot: Store, passages: list[Passage]) -> dict[str, dict | list]:
    """The recorded extractions the passages' documents arrived with."""
    return {
        doc_id: landed.extraction
        for doc_id, landed in Landing(lightfoot).documents({p.doc_id for p in passages}).items()
        if landed.extraction is not None
    }


def _run_finished(instance: dg.DagsterInstance, run_id: str) -> bool:
    """Whether a claimant run has ended (or is unknown to the instance): its claims are void."""
    run = instance.get_run_by_id(run_id)
    return run is None or run.is_finished


def _failure_table(failures) -> dg.MetadataValue:
    return dg.MetadataValue.md(
        "| passage | document | reason |\n|---|---|---|\n"
        + "\n".join(f"| {o.chunk_id} | {o.doc_id} | {o.reason.replace('|', '/')} |" for o in failures[:25])
    )


def _progress(context: dg.AssetExecutionContext):
    step = {"next": 0.0}

    def report(done: int, total: int) -> None:
        if total and (done / total >= step["next"] or done == total):
            context.log.info(f"extracted {done}/{total} passages")
            step["next"] = done / total + 0.1

    return report


@dg.asset(**PER_DOCUMENT, deps=[EXTRACTIONS], kinds={"deltalake", "python"})
def forms(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    """Every normalised entity name, fact subject and fact object of a document's passages, and
    which passage asserted which fact: the per-document input of the graph."""
    keys = sorted(context.partition_keys)
    lightfoot = store.open()
    with lightfoot.transaction() as tx:
        n_forms, n_assertions = derive_forms(tx, keys)
        manifest, changed = commit_if_changed(tx, "forms", {"documents": len(keys), "run_id": context.run.run_id})
    metadata = store_metadata(
        lightfoot, manifest, [FORMS.name, FACT_SOURCES.name], fingerprint=store.report_fingerprint, changed=changed
    )
    metadata.update({
        "forms_in_run": dg.MetadataValue.int(n_forms),
        "fact_assertions_in_run": dg.MetadataValue.int(n_assertions),
    })
    return dg.MaterializeResult(metadata=metadata)


@dg.sensor(minimum_interval_seconds=300, default_status=dg.DefaultSensorStatus.RUNNING)
def extraction_pool(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    """Keeps the ``lightfoot_extraction`` pool at LIGHTFOOT_EXTRACTION_SLOTS slots.

    The instance's configuration (dagster.yaml, the Helm values) gives every pool one slot by
    default, which keeps ``lightfoot_store`` to one writer; a wider pool's limit lives in the
    instance's storage, so this sensor sets it there (as ``dagster instance concurrency set``
    does) whenever it differs from the setting. It never asks for a run.
    """
    slots = extraction_slots()
    storage = context.instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return dg.SkipReason("this instance's storage keeps no pool limits")
    current = storage.get_concurrency_info(EXTRACTION_POOL).slot_count
    if current == slots:
        return dg.SkipReason(f"pool {EXTRACTION_POOL} has {slots} slots")
    storage.set_concurrency_slots(EXTRACTION_POOL, slots)
    return dg.SkipReason(f"pool {EXTRACTION_POOL} set from {current} to {slots} slots")
