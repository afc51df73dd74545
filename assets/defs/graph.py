"""The graph: name vectors, name links, entities, synonym edges and facts, updated incrementally.

One engine call (``reconcile_graph`` of ``lightfoot_pipeline/index/reconcile.py``, whose name the
multi-asset and its step take) brings all five in line with the live forms and fact
assertions in one store commit, so they are one multi-asset: they are never materialized apart,
and a reader never sees entities of one state beside facts of another. Only what the queued
names and facts touch is recomputed — after a deletion, only the affected components — and a
deletion needs no embedder (the model is loaded only when new names need vectors).
"""

import dagster as dg

from assets.batches import dagster_batch
from assets.code_versions import code_version
from assets.keys import (
    ENTITIES,
    FACTS,
    FORMS,
    GRAPH_ASSETS,
    GRAPH_GROUP,
    NAME_LINKS,
    NAME_VECTORS,
    OWNERS,
    STORE_LOG,
    SYNONYM_EDGES,
    TOMBSTONES,
)
from assets.provenance import STORE_POOL, report_metadata, store_metadata, table_metadata, vector_cache_metadata
from assets.resources import EmbedderResource, StoreResource
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.operations.graph import GRAPH_TABLES, update_graph
from lightfoot_pipeline.progress import name_progress
from lightfoot_pipeline.settings import ENTITY_THRESHOLD, LSH_BANDS, LSH_ROWS, SYNONYM_THRESHOLD

_EAGER = dg.AutomationCondition.eager()
# What each graph asset reports of the graph change (index/reconcile.py: GraphChange).
DETAILS: dict[dg.AssetKey, list[str]] = {
    NAME_VECTORS: ["vectors_computed", "names_added", "names_removed"],
    NAME_LINKS: ["links_added", "links_removed"],
    ENTITIES: ["entities_recomputed", "names_repartitioned", "entities_before", "entities_after"],
    SYNONYM_EDGES: ["synonym_edges_before", "synonym_edges_after"],
    FACTS: ["facts_before", "facts_after"],
}


def _spec(key: dg.AssetKey, deps: list[dg.AssetKey], metadata: dict, description: str,
          kinds: frozenset[str] = frozenset({"deltalake"})) -> dg.AssetSpec:
    """One graph asset: computed by ``reconcile_graph`` (whose code version it shares), eager, and
    dependent on the store log too: a commit Dagster does not account for (store_log.py) may change
    any graph table, and staleness does not pass from one to the next."""
    return dg.AssetSpec(key, code_version=code_version(__name__, "reconcile_graph"), owners=OWNERS,
                        metadata=metadata, deps=[*deps, STORE_LOG], group_name=GRAPH_GROUP, kinds=set(kinds),
                        automation_condition=_EAGER, description=description)


def _specs() -> list[dg.AssetSpec]:
    """The five graph assets (built here, not at module level, where the loader would take them
    for assets of their own)."""
    return [
        _spec(NAME_VECTORS, [FORMS, TOMBSTONES], vector_cache_metadata("name"), kinds=frozenset({"lancedb"}),
              description="One embedding per live (name, type), cached per model and name: a name's vector never "
              "depends on which other names are indexed."),
        _spec(NAME_LINKS, [NAME_VECTORS], table_metadata(*GRAPH_TABLES["name_links"]),
              description=f"Pairs of live names of one type that carry the same numbers and whose cosine "
              f"similarity, computed exactly in float64, is at or above the synonym threshold "
              f"({SYNONYM_THRESHOLD:.2f}). The pairs compared are those that share a key in one of {LSH_BANDS} "
              f"seeded random-hyperplane LSH bands ({LSH_ROWS} sign bits each) and whose sign sketches are close "
              "enough for the threshold: a link is a function of its two names alone."),
        _spec(ENTITIES, [NAME_LINKS], table_metadata(*GRAPH_TABLES["entities"]),
              description=f"Connected components of names linked at the entity threshold ({ENTITY_THRESHOLD:.2f}), "
              "with their aliases and the passages that mention them."),
        _spec(SYNONYM_EDGES, [ENTITIES, NAME_LINKS], table_metadata(*GRAPH_TABLES["synonym_edges"]),
              description=f"Same-type entity pairs with a member-name pair at cosine at or above "
              f"{SYNONYM_THRESHOLD:.2f} (no top-k)."),
        _spec(FACTS, [FORMS, TOMBSTONES], table_metadata(*GRAPH_TABLES["facts"]),
              description="(subject, predicate, object) facts that at least one live passage asserts, with the set "
              "of asserting passages."),
    ]


@dg.multi_asset(specs=_specs(), can_subset=False, pool=STORE_POOL)
def reconcile_graph(context: dg.AssetExecutionContext, store: StoreResource, embedder: EmbedderResource):
    """Bring the global tables in line with the live forms and fact assertions (one commit:
    operations/graph.py, ``update_graph``).

    Each materialization says how many documents the graph gained and lost and how many entities
    and facts were removed, added and changed (counts, never names: Dagster's storage keeps what
    it is given after an erasure; ``lightfoot explain doc ID`` reads a document's entities and
    facts from the store); its data version is the version of its tables, so an unchanged table
    leaves what reads it fresh.
    """
    lightfoot = store.open()

    def model() -> Embedder:  # loaded only once new names need vectors
        loaded = embedder.get()
        context.log.info(f"new names need vectors: embedding with {loaded.model_id}")
        return loaded

    with dagster_batch(context):
        update = update_graph(lightfoot, store.settings(), model, name_progress(context.log.info),
                              fingerprint=store.report_fingerprint)
    change, state = update.change, update.states["facts"]
    context.log.info(
        f"names +{change.names_added} -{change.names_removed} ~{change.names_changed}; "
        f"{change.entities_recomputed} entities recomputed; documents +{update.documents_added} "
        f"-{update.documents_removed}; store commit {state.seq} (changed: {state.changed})"
    )
    for key in GRAPH_ASSETS:
        name = key.to_user_string()
        state = update.states[name]
        metadata = store_metadata(state, lightfoot.uri)
        if update.fingerprint is not None:
            metadata["store_fingerprint"] = dg.MetadataValue.text(update.fingerprint)
            metadata["tables_digest"] = dg.MetadataValue.text(update.digests[name])
        metadata["documents_added"] = dg.MetadataValue.int(update.documents_added)
        metadata["documents_removed"] = dg.MetadataValue.int(update.documents_removed)
        if key in (ENTITIES, FACTS):
            kind = "entities" if key == ENTITIES else "facts"
            metadata.update({f"{kind}_{what}": dg.MetadataValue.int(n) for what, n in getattr(update, kind).items()})
        if key == NAME_VECTORS:  # its table is the model's LanceDB vector cache, not a Delta table
            metadata.pop("dagster/uri", None)
            if update.vector_uri:
                metadata["dagster/uri"] = dg.MetadataValue.path(update.vector_uri)
                metadata["dagster/table_name"] = f"lightfoot.vectors.{update.vector_table}"
        metadata.update(report_metadata(update.change, DETAILS[key]))
        if key == NAME_VECTORS:
            metadata["embedder"] = dg.MetadataValue.text(update.embedder or "")
        yield dg.MaterializeResult(asset_key=key, metadata=metadata, data_version=dg.DataVersion(state.versions_digest()))
