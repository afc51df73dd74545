"""The graph: name vectors, name links, entities, synonym edges and facts, updated incrementally.

One engine call (``reconcile_graph``) brings all five in line with the live forms and fact
assertions in one store commit, so they are one multi-asset: they are never materialized apart,
and a reader never sees entities of one state beside facts of another. Only what the queued
names and facts touch is recomputed — after a deletion, only the affected components — and a
deletion needs no embedder (the model is loaded only when new names need vectors).
"""

import dagster as dg

from assets.keys import (
    ENTITIES, FACTS, FORMS, GRAPH_GROUP, NAME_LINKS, NAME_VECTORS, SYNONYM_EDGES, TOMBSTONES,
)
from assets.provenance import STORE_POOL, commit_if_changed, store_metadata, table_rows
from assets.resources import EmbedderResource, StoreResource
from lightfoot_pipeline import pipeline
from lightfoot_pipeline.index.reconcile import EmbedderRequired, GraphChange, reconcile_graph
from lightfoot_pipeline.store.tables import ALIASES, MENTIONS, TableSpec
from lightfoot_pipeline.store.tables import ENTITIES as ENTITIES_TABLE
from lightfoot_pipeline.store.tables import FACT_SOURCES as FACT_SOURCES_TABLE
from lightfoot_pipeline.store.tables import FACTS as FACTS_TABLE
from lightfoot_pipeline.store.tables import NAME_LINKS as NAME_LINKS_TABLE
from lightfoot_pipeline.store.tables import SYNONYM_EDGES as SYNONYM_EDGES_TABLE

_EAGER = dg.AutomationCondition.eager()


def _specs() -> list[dg.AssetSpec]:
    """The five graph assets (built here, not at module level, where the loader would take them
    for assets of their own)."""
    return [
        dg.AssetSpec(
            NAME_VECTORS, deps=[FORMS, TOMBSTONES], group_name=GRAPH_GROUP, kinds={"lancedb"}, automation_condition=_EAGER,
            description="One embedding per live (name, type), cached per model and name: a name's vector never "
            "depends on which other names are indexed.",
        ),
        dg.AssetSpec(
            NAME_LINKS, deps=[NAME_VECTORS], group_name=GRAPH_GROUP, kinds={"deltalake"}, automation_condition=_EAGER,
            description="Pairs of live names of one type with cosine similarity at or above the synonym threshold "
            "(0.80), computed exactly with blocked matrix products.",
        ),
        dg.AssetSpec(
            ENTITIES, deps=[NAME_LINKS], group_name=GRAPH_GROUP, kinds={"deltalake"}, automation_condition=_EAGER,
            description="Connected components of names linked at the entity threshold (0.92), with their aliases "
            "and the passages that mention them.",
        ),
        dg.AssetSpec(
            SYNONYM_EDGES, deps=[ENTITIES, NAME_LINKS], group_name=GRAPH_GROUP, kinds={"deltalake"},
            automation_condition=_EAGER,
            description="Same-type entity pairs with a member-name pair at cosine at or above 0.80 (no top-k).",
        ),
        dg.AssetSpec(
            FACTS, deps=[FORMS, TOMBSTONES], group_name=GRAPH_GROUP, kinds={"deltalake"}, automation_condition=_EAGER,
            description="(subject, predicate, object) facts that at least one live passage asserts, with the set "
            "of asserting passages.",
        ),
    ]


# The store tables behind each asset (the first one's rows are the asset's row count).
GRAPH_TABLES: dict[dg.AssetKey, list[TableSpec]] = {
    NAME_VECTORS: [ALIASES],
    NAME_LINKS: [NAME_LINKS_TABLE],
    ENTITIES: [ENTITIES_TABLE, ALIASES, MENTIONS],
    SYNONYM_EDGES: [SYNONYM_EDGES_TABLE],
    FACTS: [FACTS_TABLE, FACT_SOURCES_TABLE],
}


@dg.multi_asset(specs=_specs(), can_subset=False, pool=STORE_POOL, name="graph")
def graph(context: dg.AssetExecutionContext, store: StoreResource, embedder: EmbedderResource):
    """Bring the global tables in line with the live forms and fact assertions (one commit)."""
    lightfoot = store.open()
    settings = store.settings()
    model = None
    try:
        change, manifest, changed = _reconcile(lightfoot, settings, None, context.run.run_id)
    except EmbedderRequired:
        model = embedder.get()
        context.log.info(f"new names need vectors: embedding with {model.model_id}")
        change, manifest, changed = _reconcile(lightfoot, settings, model, context.run.run_id)
    context.log.info(
        f"names +{change.names_added} -{change.names_removed} ~{change.names_changed}; "
        f"{change.entities_recomputed} entities recomputed; store commit {manifest.seq} (changed: {changed})"
    )
    digest = pipeline.fingerprint(lightfoot, manifest).digest if store.report_fingerprint and manifest.seq else None
    details = _details(change, manifest.config.get("embedder"))
    for key, specs in GRAPH_TABLES.items():
        names = [s.name for s in specs]
        metadata = store_metadata(
            lightfoot, manifest, names, fingerprint=False, changed=changed, rows=table_rows(lightfoot, manifest, names)
        )
        if digest:
            metadata["fingerprint"] = dg.MetadataValue.text(digest)
        metadata.update(details[key])
        yield dg.MaterializeResult(asset_key=key, metadata=metadata)


def _reconcile(lightfoot, settings, model, run_id: str) -> tuple[GraphChange, object, bool]:
    with lightfoot.transaction() as tx:
        pipeline.check_config(tx, settings, model)
        vectors = pipeline.name_vector_cache(lightfoot, model) if model is not None else None
        change = reconcile_graph(tx, settings, vectors)
        manifest, changed = commit_if_changed(tx, "graph", {"graph": change.as_dict(), "run_id": run_id})
    return change, manifest, changed


def _details(change: GraphChange, embedder_id: str | None) -> dict[dg.AssetKey, dict]:
    md = dg.MetadataValue
    return {
        NAME_VECTORS: {"vectors_computed": md.int(change.vectors_computed), "names_added": md.int(change.names_added),
                       "names_removed": md.int(change.names_removed), "embedder": md.text(embedder_id or "")},
        NAME_LINKS: {"links_added": md.int(change.links_added), "links_removed": md.int(change.links_removed)},
        ENTITIES: {"entities_recomputed": md.int(change.entities_recomputed),
                   "names_repartitioned": md.int(change.names_repartitioned),
                   "entities_before": md.int(change.entities_before), "entities_after": md.int(change.entities_after)},
        SYNONYM_EDGES: {"synonym_edges_before": md.int(change.synonym_edges_before),
                        "synonym_edges_after": md.int(change.synonym_edges_after)},
        FACTS: {"facts_before": md.int(change.facts_before), "facts_after": md.int(change.facts_after)},
    }
