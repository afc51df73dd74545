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
from collections.abc import Callable

import dagster as dg
import polars as pl

from assets.batches import dagster_batch
from assets.code_versions import code_version
from assets.keys import (
    ENTITIES,
    FACTS,
    FORMS,
    GRAPH_GROUP,
    NAME_LINKS,
    NAME_VECTORS,
    OWNERS,
    STORE_LOG,
    SYNONYM_EDGES,
    TOMBSTONES,
)
from assets.provenance import (
    STORE_POOL,
    commit_if_changed,
    store_metadata,
    table_metadata,
    table_rows,
    vector_cache_metadata,
)
from assets.resources import EmbedderResource, StoreResource
from lightfoot_pipeline import operations
from lightfoot_pipeline.index import reconcile
from lightfoot_pipeline.index.reconcile import GraphChange
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.progress import name_progress
from lightfoot_pipeline.provenance.documents import table_differences
from lightfoot_pipeline.settings import ENTITY_THRESHOLD, LSH_BANDS, LSH_ROWS, SYNONYM_THRESHOLD
from lightfoot_pipeline.store.fingerprint import fingerprint as store_fingerprint
from lightfoot_pipeline.store.tables import ALIASES, BUCKET, MENTIONS, TableSpec
from lightfoot_pipeline.store.tables import ENTITIES as ENTITIES_TABLE
from lightfoot_pipeline.store.tables import FACT_SOURCES as FACT_SOURCES_TABLE
from lightfoot_pipeline.store.tables import FACTS as FACTS_TABLE
from lightfoot_pipeline.store.tables import NAME_LINKS as NAME_LINKS_TABLE
from lightfoot_pipeline.store.tables import SYNONYM_EDGES as SYNONYM_EDGES_TABLE
from lightfoot_pipeline.store.vectors import VectorCache, cache_table_name, name_vector_cache, vector_cache_uri

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
            NAME_LINKS, code_version=code_version(__name__, "reconcile_graph"), owners=OWNERS, metadata=table_metadata(NAME_LINKS_TABLE), deps=[NAME_VECTORS, STORE_LOG], group_name=GRAPH_GROUP, kinds={"deltalake"}, automation_condition=_EAGER,
            description=f"Pairs of live names of one type that carry the same numbers and whose cosine similarity, "
            f"computed exactly in float64, is at or above the synonym threshold ({SYNONYM_THRESHOLD:.2f}). The pairs "
            f"compared are those that share a key in one of {LSH_BANDS} seeded random-hyperplane LSH bands "
            f"({LSH_ROWS} sign bits each) and whose sign sketches are close enough for the threshold: a link is a "
            "function of its two names alone.",
        ),
        dg.AssetSpec(
            ENTITIES, code_version=code_version(__name__, "reconcile_graph"), owners=OWNERS, metadata=table_metadata(ENTITIES_TABLE, ALIASES, MENTIONS), deps=[NAME_LINKS, STORE_LOG], group_name=GRAPH_GROUP, kinds={"deltalake"}, automation_condition=_EAGER,
            description=f"Connected components of names linked at the entity threshold ({ENTITY_THRESHOLD:.2f}), with their aliases "
            "and the passages that mention them.",
        ),
        dg.AssetSpec(
            SYNONYM_EDGES, code_version=code_version(__name__, "reconcile_graph"), owners=OWNERS, metadata=table_metadata(SYNONYM_EDGES_TABLE), deps=[ENTITIES, NAME_LINKS, STORE_LOG], group_name=GRAPH_GROUP, kinds={"deltalake"},
            automation_condition=_EAGER,
            description=f"Same-type entity pairs with a member-name pair at cosine at or above {SYNONYM_THRESHOLD:.2f} "
            "(no top-k).",
        ),
        dg.AssetSpec(
            FACTS, code_version=code_version(__name__, "reconcile_graph"), owners=OWNERS, metadata=table_metadata(FACTS_TABLE, FACT_SOURCES_TABLE), deps=[FORMS, TOMBSTONES, STORE_LOG], group_name=GRAPH_GROUP, kinds={"deltalake"}, automation_condition=_EAGER,
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


@dg.multi_asset(specs=_specs(), can_subset=False, pool=STORE_POOL)
def reconcile_graph(context: dg.AssetExecutionContext, store: StoreResource, embedder: EmbedderResource):
    """Bring the global tables in line with the live forms and fact assertions (one commit).

    Each materialization says how many documents the graph gained and lost and how many entities
    and facts were removed, added and changed (counts, never names: Dagster's storage keeps what
    it is given after an erasure; ``lightfoot explain doc ID`` reads a document's entities and
    facts from the store); its data version is the version of its tables, so an unchanged table
    leaves what reads it fresh.
    """
    lightfoot = store.open()
    settings = store.settings()

    def model() -> Embedder:  # loaded only once new names need vectors
        loaded = embedder.get()
        context.log.info(f"new names need vectors: embedding with {loaded.model_id}")
        return loaded

    with dagster_batch(context):
        change, manifest, changed, diff = _reconcile(lightfoot, settings, model, name_progress(context.log.info))
    context.log.info(
        f"names +{change.names_added} -{change.names_removed} ~{change.names_changed}; "
        f"{change.entities_recomputed} entities recomputed; documents +{diff['documents_added']} "
        f"-{diff['documents_removed']}; store commit {manifest.seq} (changed: {changed})"
    )
    fingerprint = store_fingerprint(lightfoot, manifest) if store.report_fingerprint and manifest.seq else None
    details = _details(change, manifest.config.get("embedder"))
    for key, specs in GRAPH_TABLES.items():
        names = [s.name for s in specs]
        metadata = store_metadata(
            lightfoot, manifest, names, fingerprint=False, changed=changed, rows=table_rows(lightfoot, manifest, names)
        )
        if fingerprint is not None:
            metadata["store_fingerprint"] = dg.MetadataValue.text(fingerprint.digest)
            own = "name_vectors" if key == NAME_VECTORS else names[0]
            metadata["tables_digest"] = dg.MetadataValue.text(fingerprint.tables[own].digest)
        metadata["documents_added"] = dg.MetadataValue.int(diff["documents_added"])
        metadata["documents_removed"] = dg.MetadataValue.int(diff["documents_removed"])
        if key in (ENTITIES, FACTS):
            kind = "entities" if key == ENTITIES else "facts"
            metadata.update({f"{kind}_{what}": dg.MetadataValue.int(n) for what, n in diff[kind].items()})
        if key == NAME_VECTORS:  # its table is the model's LanceDB vector cache, not a Delta table
            embedder_id = manifest.config.get("embedder")
            metadata.pop("dagster/uri", None)
            if embedder_id:
                metadata["dagster/uri"] = dg.MetadataValue.path(vector_cache_uri(lightfoot, "name", embedder_id))
                metadata["dagster/table_name"] = f"lightfoot.vectors.{cache_table_name('name', embedder_id)}"
        metadata.update(details[key])
        version = hashlib.sha256(json.dumps({n: manifest.versions.get(n) for n in names}, sort_keys=True).encode())
        yield dg.MaterializeResult(asset_key=key, metadata=metadata, data_version=dg.DataVersion(version.hexdigest()[:16]))


def _reconcile(lightfoot, settings, model: Callable[[], Embedder], progress) -> tuple[GraphChange, object, bool, dict]:
    with lightfoot.transaction() as tx:
        operations.check_config(tx, settings, None)

        def vectors() -> VectorCache:
            loaded = model()
            operations.check_config(tx, settings, loaded)
            return name_vector_cache(lightfoot, loaded, progress)

        change = reconcile.reconcile_graph(tx, settings, vectors)
        # What changed is read from the buckets the transaction changed, never from whole tables:
        # an entity's mentions and a fact's sources share its bucket, so those buckets hold all of them.
        touched = {name: tx.touched_rows(name) for name in WATCHED}
        before, after = ({name: rows[k] for name, rows in touched.items()} for k in (0, 1))
        mentioned = lightfoot.read_columns(MENTIONS.name, tx.manifest, ["doc_id", BUCKET])
        elsewhere = mentioned.filter(~pl.col(BUCKET).is_in(before[MENTIONS.name].get_column(BUCKET).unique().implode()))
        diff = _changes(before, after, set(mentioned.get_column("doc_id").unique().to_list()),
                        set(elsewhere.get_column("doc_id").unique().to_list()))
        manifest, changed = commit_if_changed(tx, "graph", {"graph": change.as_dict()})
    return change, manifest, changed, diff


WATCHED = (ENTITIES_TABLE.name, MENTIONS.name, FACTS_TABLE.name, FACT_SOURCES_TABLE.name)


def _changes(before: dict[str, pl.DataFrame], after: dict[str, pl.DataFrame], mentioned: set[str],
             untouched: set[str]) -> dict:
    """Documents the graph gained and lost, and how many entities and facts were removed, added
    and changed.

    ``before``/``after``: the rows of the buckets the change touched; ``mentioned``: the documents
    with a mention before it; ``untouched``: those with a mention in a bucket it did not touch.
    Every name of a passage has a mention, so a document is in the graph when it has one."""
    old = mentioned
    new = untouched | set(after[MENTIONS.name].get_column("doc_id").unique().to_list())

    def counted(frame_name: str, key: str, label: list[str]) -> dict[str, int]:
        columns = [key, *label, "n_sources" if key == "fact_id" else "n_chunks"]
        removed, added, changed = table_differences(before[frame_name].select(columns), after[frame_name].select(columns), [key])
        return {"removed": len(removed), "added": len(added), "changed": len(changed)}

    return {
        "documents_added": len(new - old), "documents_removed": len(old - new),
        "entities": counted(ENTITIES_TABLE.name, "entity_id", ["display_name"]),
        "facts": counted(FACTS_TABLE.name, "fact_id", ["subject", "predicate", "object"]),
    }


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
