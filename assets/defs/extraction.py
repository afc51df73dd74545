"""Extraction: the ``extractions`` and ``forms`` assets (per document).

One extraction per passage: recorded output replayed where the document came with one, else one
language-model call (cached, so a re-run or a rebuild pays nothing). A passage whose extraction
fails is stored with its reason, never dropped. Forms and fact assertions are then derived from
the stored extractions.
"""

from collections import Counter

import dagster as dg
import polars as pl

from assets.keys import EXTRACTIONS, PASSAGES
from assets.partitions import PER_DOCUMENT
from assets.provenance import commit_if_changed, store_metadata
from assets.resources import ExtractorResource, StoreResource
from lightfoot_pipeline.index.documents import derive_forms, record_extractions
from lightfoot_pipeline.ingest.extraction.outcome import OK
from lightfoot_pipeline.ingest.landing import Landing
from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.store.tables import EXTRACTIONS as EXTRACTIONS_TABLE
from lightfoot_pipeline.store.tables import FACT_SOURCES, FORMS
from lightfoot_pipeline.store.tables import PASSAGES as PASSAGES_TABLE


@dg.asset(**PER_DOCUMENT, deps=[PASSAGES], kinds={"deltalake", "openai"})
def extractions(
    context: dg.AssetExecutionContext, store: StoreResource, extractor: ExtractorResource
) -> dg.MaterializeResult:
    """The validated entities and facts of every passage of a document, or why its extraction failed.

    Passages extracted before are not asked again, nor are those the extraction cache answers
    (a run that crashed paid for them). Model calls, their retries (requests sent again, not
    further calls), tokens and cost are in the metadata.
    """
    keys = sorted(context.partition_keys)
    lightfoot = store.open()
    settings = store.settings()
    stored = lightfoot.read(PASSAGES_TABLE.name).filter(pl.col("doc_id").is_in(keys))
    done = set(
        lightfoot.read(EXTRACTIONS_TABLE.name, columns=["chunk_id", "status"])
        .filter(pl.col("status") == OK).get_column("chunk_id").to_list()
    )
    needed = [
        Passage(r["chunk_id"], r["doc_id"], r["ordinal"], r["title"], r["text"])
        for r in stored.sort("doc_id", "ordinal").iter_rows(named=True)
        if r["chunk_id"] not in done
    ]
    recorded = {
        doc_id: landed.extraction
        for doc_id, landed in Landing(lightfoot).documents({p.doc_id for p in needed}).items()
        if landed.extraction is not None
    }
    outcomes = []
    if needed:
        chosen = extractor.get(lightfoot, settings, recorded, context.run.run_id)
        context.log.info(f"extracting {len(needed)} passages with {chosen.name}")
        outcomes = chosen.extract(needed, _progress(context))
    with lightfoot.transaction() as tx:
        live = set(tx.table(PASSAGES_TABLE.name).filter(pl.col("doc_id").is_in(keys)).get_column("chunk_id").to_list())
        kept = [o for o in outcomes if o.chunk_id in live]  # a document deleted meanwhile stays deleted
        record_extractions(tx, kept)
        manifest, changed = commit_if_changed(tx, "extractions", {
            "passages": len(kept), "model_calls": sum(o.model_calls for o in kept),
            "retries": sum(o.retries for o in kept), "run_id": context.run.run_id,
        })
    failures = [o for o in kept if o.status != OK]
    validation: Counter = Counter()
    for o in kept:
        if o.record is not None:
            validation.update(o.record.counts())
    metadata = store_metadata(
        lightfoot, manifest, [EXTRACTIONS_TABLE.name], fingerprint=store.report_fingerprint, changed=changed,
        model_calls=sum(o.model_calls for o in outcomes), cost_usd=sum(o.cost_usd for o in outcomes),
    )
    from_cache = sum(1 for o in kept if o.status == OK and o.cached)
    metadata.update({
        "passages_in_run": dg.MetadataValue.int(stored.height),
        "extracted": dg.MetadataValue.int(len(kept) - len(failures) - from_cache),
        "already_extracted": dg.MetadataValue.int(stored.height - len(needed) + from_cache),
        "from_cache": dg.MetadataValue.int(from_cache),
        "retries": dg.MetadataValue.int(sum(o.retries for o in outcomes)),
        "failed": dg.MetadataValue.int(len(failures)),
        "tokens_in": dg.MetadataValue.int(sum(o.tokens_in for o in outcomes)),
        "tokens_out": dg.MetadataValue.int(sum(o.tokens_out for o in outcomes)),
        "validation": dg.MetadataValue.json(dict(sorted(validation.items()))),
    })
    if failures:
        metadata["failures"] = dg.MetadataValue.md(
            "| passage | document | reason |\n|---|---|---|\n"
            + "\n".join(f"| {o.chunk_id} | {o.doc_id} | {o.reason.replace('|', '/')} |" for o in failures[:25])
        )
    return dg.MaterializeResult(metadata=metadata)


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
