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
from assets.provenance import CODE_VERSION, add_document_metadata, column_schema, commit_if_changed, store_metadata
from assets.resources import ExtractorResource, StoreResource
from lightfoot_pipeline.index.documents import derive_forms, record_extractions
from lightfoot_pipeline.ingest.extraction.outcome import OK
from lightfoot_pipeline.ingest.landing import Landing
from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.store.tables import EXTRACTIONS as EXTRACTIONS_TABLE
from lightfoot_pipeline.store.tables import FACT_SOURCES, FORMS
from lightfoot_pipeline.store.tables import PASSAGES as PASSAGES_TABLE


@dg.asset(**PER_DOCUMENT, deps=[PASSAGES], kinds={"deltalake", "openai"}, code_version=CODE_VERSION,
          metadata=column_schema(EXTRACTIONS_TABLE))
def extractions(
    context: dg.AssetExecutionContext, store: StoreResource, extractor: ExtractorResource
) -> dg.MaterializeResult:
    """The validated entities and facts of every passage of a document, or why its extraction failed.

    Passages extracted before are not asked again, nor are those the extraction cache answers
    (a run that crashed paid for them). Each document's partition has its own passages, status,
    entities and facts, model calls, retries (requests sent again, not further calls), tokens and
    cost; the run's totals are under ``run_`` keys.
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
    add_document_metadata(context, _per_document(lightfoot, manifest, keys, outcomes))
    metadata = store_metadata(
        lightfoot, manifest, [EXTRACTIONS_TABLE.name], fingerprint=store.report_fingerprint, changed=changed,
        model_calls=sum(o.model_calls for o in outcomes), cost_usd=sum(o.cost_usd for o in outcomes),
        per_document=True,
    )
    from_cache = sum(1 for o in kept if o.status == OK and o.cached)
    metadata.update({
        "run_passages": dg.MetadataValue.int(stored.height),
        "run_extracted": dg.MetadataValue.int(len(kept) - len(failures) - from_cache),
        "run_already_extracted": dg.MetadataValue.int(stored.height - len(needed) + from_cache),
        "run_from_cache": dg.MetadataValue.int(from_cache),
        "run_retries": dg.MetadataValue.int(sum(o.retries for o in outcomes)),
        "run_failed": dg.MetadataValue.int(len(failures)),
        "run_tokens_in": dg.MetadataValue.int(sum(o.tokens_in for o in outcomes)),
        "run_tokens_out": dg.MetadataValue.int(sum(o.tokens_out for o in outcomes)),
        "run_validation": dg.MetadataValue.json(dict(sorted(validation.items()))),
    })
    if failures:
        metadata["failures"] = dg.MetadataValue.md(
            "| passage | document | reason |\n|---|---|---|\n"
            + "\n".join(f"| {o.chunk_id} | {o.doc_id} | {o.reason.replace('|', '/')} |" for o in failures[:25])
        )
    return dg.MaterializeResult(metadata=metadata)


def _per_document(lightfoot, manifest, keys: list[str], outcomes) -> dict[str, dict]:
    """Each document's extraction: its stored rows, and what this run's calls for it cost."""
    rows = lightfoot.read(EXTRACTIONS_TABLE.name, manifest, columns=["doc_id", "status", "n_entities", "n_facts"])
    rows = rows.filter(pl.col("doc_id").is_in(keys))
    out: dict[str, dict] = {}
    for key in keys:
        mine = rows.filter(pl.col("doc_id") == key)
        failed = mine.filter(pl.col("status") != OK).height
        out[key] = {
            "dagster/row_count": mine.height, "failed": failed,
            "status": "no passages" if mine.height == 0 else "failed" if failed == mine.height
            else "partly failed" if failed else "extracted",
            "entities": int(mine.get_column("n_entities").sum()), "facts": int(mine.get_column("n_facts").sum()),
            "model_calls": 0, "retries": 0, "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0, "from_cache": 0,
        }
    for o in outcomes:
        entry = out.get(o.doc_id)
        if entry is None:
            continue
        for name in ("model_calls", "retries", "tokens_in", "tokens_out", "cost_usd"):
            entry[name] += getattr(o, name)
        entry["from_cache"] += int(o.status == OK and o.cached)
    for entry in out.values():
        entry["cost_usd"] = dg.MetadataValue.float(round(float(entry["cost_usd"]), 9))
    return out


def _progress(context: dg.AssetExecutionContext):
    step = {"next": 0.0}

    def report(done: int, total: int) -> None:
        if total and (done / total >= step["next"] or done == total):
            context.log.info(f"extracted {done}/{total} passages")
            step["next"] = done / total + 0.1

    return report


@dg.asset(**PER_DOCUMENT, deps=[EXTRACTIONS], kinds={"deltalake", "python"}, code_version=CODE_VERSION,
          metadata=column_schema(FORMS, FACT_SOURCES))
def forms(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    """Every normalised entity name, fact subject and fact object of a document's passages, and
    which passage asserted which fact: the per-document input of the graph."""
    keys = sorted(context.partition_keys)
    lightfoot = store.open()
    with lightfoot.transaction() as tx:
        n_forms, n_assertions = derive_forms(tx, keys)
        manifest, changed = commit_if_changed(tx, "forms", {"documents": len(keys), "run_id": context.run.run_id})
    stored = lightfoot.read(FORMS.name, manifest, columns=["doc_id", "name", "type"]).filter(pl.col("doc_id").is_in(keys))
    asserted = lightfoot.read(FACT_SOURCES.name, manifest, columns=["doc_id"]).filter(pl.col("doc_id").is_in(keys))
    names = stored.group_by("doc_id").agg(pl.len().alias("forms"), pl.struct("name", "type").n_unique().alias("names"))
    facts = asserted.group_by("doc_id").len()
    by_doc = {r["doc_id"]: r for r in names.iter_rows(named=True)}
    facts_by_doc = dict(facts.iter_rows())
    add_document_metadata(context, {
        key: {"dagster/row_count": by_doc.get(key, {}).get("forms", 0), "names": by_doc.get(key, {}).get("names", 0),
              "fact_assertions": facts_by_doc.get(key, 0)}
        for key in keys
    })
    metadata = store_metadata(
        lightfoot, manifest, [FORMS.name, FACT_SOURCES.name], fingerprint=store.report_fingerprint, changed=changed,
        per_document=True,
    )
    metadata.update({
        "run_forms": dg.MetadataValue.int(n_forms),
        "run_fact_assertions": dg.MetadataValue.int(n_assertions),
    })
    return dg.MaterializeResult(metadata=metadata)
