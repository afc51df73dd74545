"""The graph: name vectors, name links, entities, synonym edges and facts, updated incrementally.

One engine call (``reconcile_graph`` of ``lightfoot_pipeline/index/reconcile.py``, whose name the
multi-asset and its step take) brings all five in line with the live forms and fact
assertions in one store commit, so they are one multi-asset: they are never materialized apart,
and a reader never sees entities of one state beside facts of another. Only what the queued
names and facts touch is recomputed — after a deletion, only the affected components — and a
deletion needs no embedder (the model is loaded only when new names need vectors).
"""

import hashlib
import json

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
from assets.provenance import STORE_POOL, store_metadata, table_metadata, vector_cache_metadata
from assets.resources import EmbedderResource, StoreResource
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.operations.graph import GRAPH_TABLES, GraphUpdate, update_graph
from lightfoot_pipeline.progress import name_progress
from lightfoot_pipeline.settings import ENTITY_THRESHOLD, LSH_BANDS, LSH_ROWS, SYNONYM_THRESHOLD

_EAGER = dg.AutomationCondition.eager()


def _specs() -> list[dg.AssetSpec]:
    """The five graph assets (built here, not at module level, where the loader would take them
    for assets of their own). Each depends on the store log too: a commit Dagster does not account
    for (store_log.py) may change any of their tables, and staleness does not pass from one to the next."""
    return [
        dg.AssetSpec(
            NAME_VECTORS, code_version=code_version(__name__, "reconcile_graph"), owners=OWNERS, metadata=vector_cache_metadata("name"), deps=[FORMS, TOMBSTONES, STORE_LOG], group_name=GRAPH_GROUP, kinds={"lancedb"}, automation_condition=_EAGER,
            description="One embedding per live (name, type), cached per model and name: a name's vector never "
            "depends on which other names are indexed.",
        ),
        dg.AssetSpec(
            NAME_LINKS, code_version=code_version(__name__, "reconcile_graph"), owners=OWNERS, metadata=table_metadata(*GRAPH_TABLES["name_links"]), deps=[NAME_VECTORS, STORE_LOG], group_name=GRAPH_GROUP, kinds={"deltalake"}, automation_condition=_EAGER,
            description=f"Pairs of live names of one type that carry the same numbers and whose cosine similarity, "
            f"computed exactly in float64, is at or above the synonym threshold ({SYNONYM_THRESHOLD:.2f}). The pairs "
            f"compared are those that share a key in one of {LSH_BANDS} seeded random-hyperplane LSH bands "
            f"({LSH_ROWS} sign bits each) and whose sign sketches are close enough for the threshold: a link is a "
            "function of its two names alone.",
        ),
        dg.AssetSpec(
            ENTITIES, code_version=code_version(__name__, "reconcile_graph"), owners=OWNERS, metadata=table_metadata(*GRAPH_TABLES["entities"]), deps=[NAME_LINKS, STORE_LOG], group_name=GRAPH_GROUP, kinds={"deltalake"}, automation_condition=_EAGER,
            description=f"Connected components of names linked at the entity threshold ({ENTITY_THRESHOLD:.2f}), with their aliases "
            "and the passages that mention them.",
        ),
        dg.AssetSpec(
            SYNONYM_EDGES, code_version=code_version(__name__, "reconcile_graph"), owners=OWNERS, metadata=table_metadata(*GRAPH_TABLES["synonym_edges"]), deps=[ENTITIES, NAME_LINKS, STORE_LOG], group_name=GRAPH_GROUP, kinds={"deltalake"},
            automation_condition=_EAGER,
            description=f"Same-type entity pairs with a member-name pair at cosine at or above {SYNONYM_THRESHOLD:.2f} "
            "(no top-k).",
        ),
        dg.AssetSpec(
            FACTS, code_version=code_version(__name__, "reconcile_graph"), owners=OWNERS, metadata=table_metadata(*GRAPH_TABLES["facts"]), deps=[FORMS, TOMBSTONES, STORE_LOG], group_name=GRAPH_GROUP, kinds={"deltalake"}, automation_condition=_EAGER,
            description="(subject, predicate, object) facts that at least one live passage asserts, with the set "
            "of asserting passages.",
        ),
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
    details = _details(update)
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
        metadata.update(details[key])
        version = hashlib.sha256(json.dumps(state.versions, sort_keys=True).encode())
        yield dg.MaterializeResult(asset_key=key, metadata=metadata, data_version=dg.DataVersion(version.hexdigest()[:16]))


def _details(update: GraphUpdate) -> dict[dg.AssetKey, dict]:
    md, change = dg.MetadataValue, update.change
    return {
        NAME_VECTORS: {"vectors_computed": md.int(change.vectors_computed), "names_added": md.int(change.names_added),
                       "names_removed": md.int(change.names_removed), "embedder": md.text(update.embedder or "")},
        NAME_LINKS: {"links_added": md.int(change.links_added), "links_removed": md.int(change.links_removed)},
        ENTITIES: {"entities_recomputed": md.int(change.entities_recomputed),
                   "names_repartitioned": md.int(change.names_repartitioned),
                   "entities_before": md.int(change.entities_before), "entities_after": md.int(change.entities_after)},
        SYNONYM_EDGES: {"synonym_edges_before": md.int(change.synonym_edges_before),
                        "synonym_edges_after": md.int(change.synonym_edges_after)},
        FACTS: {"facts_before": md.int(change.facts_before), "facts_after": md.int(change.facts_after)},
    }
