"""The graph stage on its own: name vectors, links, entities, synonym edges and facts brought in
line with the live forms and fact assertions in one commit, and what that changed.

:func:`update_graph` is what an orchestrated run does after a batch's forms or a deletion's
tombstones: ``reconcile_graph`` (``index/reconcile.py``, the same stage ``ingest`` and ``delete``
run inside their own transaction), committed when it changed something, with counts of what it
changed read from the buckets it touched (documents the graph gained and lost; entities and
facts removed, added and changed: counts, never names). No model is loaded unless new names need
vectors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.index.reconcile import GraphChange, reconcile_graph
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.operations.batches import StoreState, commit_if_changed, store_state
from lightfoot_pipeline.operations.config import check_config
from lightfoot_pipeline.provenance.documents import table_differences
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.fingerprint import fingerprint as store_fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    ALIASES,
    ENTITIES,
    FACT_SOURCES,
    FACTS,
    MENTIONS,
    NAME_LINKS,
    SYNONYM_EDGES,
    TableSpec,
)
from lightfoot_pipeline.store.vectors import (
    EmbedProgress,
    VectorCache,
    cache_table_name,
    name_vector_cache,
    vector_cache_uri,
)

# The store tables behind each graph table the orchestrator shows (the first one's rows are its size).
GRAPH_TABLES: dict[str, tuple[TableSpec, ...]] = {
    "name_vectors": (ALIASES,),
    "name_links": (NAME_LINKS,),
    "entities": (ENTITIES, ALIASES, MENTIONS),
    "synonym_edges": (SYNONYM_EDGES,),
    "facts": (FACTS, FACT_SOURCES),
}
WATCHED = (ENTITIES.name, MENTIONS.name, FACTS.name, FACT_SOURCES.name)


@dataclass
class GraphUpdate:
    """What one graph update did, and the state of each graph table after it."""

    change: GraphChange
    documents_added: int = 0
    documents_removed: int = 0
    entities: dict[str, int] = field(default_factory=dict)  # removed, added, changed
    facts: dict[str, int] = field(default_factory=dict)
    embedder: str | None = None
    states: dict[str, StoreState] = field(default_factory=dict)  # by graph table
    digests: dict[str, str] = field(default_factory=dict)  # each graph table's fingerprint digest
    fingerprint: str | None = None
    vector_table: str | None = None  # the name vectors' LanceDB table and where it lies
    vector_uri: str | None = None


def update_graph(store: Store, settings: IndexSettings, embedder: Callable[[], Embedder],
                 progress: EmbedProgress | None = None, *, fingerprint: bool = False) -> GraphUpdate:
    """Bring the graph in line with the live forms and fact assertions (one commit, none when
    nothing changed). ``embedder`` is called only when new names need vectors."""
    with store.transaction() as tx:
        check_config(tx, settings, None)

        def vectors() -> VectorCache:
            loaded = embedder()
            check_config(tx, settings, loaded)
            return name_vector_cache(store, loaded, progress)

        change = reconcile_graph(tx, settings, vectors)
        # What changed is read from the rows the transaction changed, never from whole tables: an
        # entity's mentions and a fact's sources are looked up with it, so every one of them is held.
        touched = {name: tx.touched_rows(name) for name in WATCHED}
        before, after = ({name: rows[k] for name, rows in touched.items()} for k in (0, 1))
        mentioned = store.read_columns(MENTIONS.name, tx.manifest, ["doc_id"])
        manifest, changed = commit_if_changed(tx, "graph", {"graph": change.as_dict()})
    old, new = _mentioned_documents(mentioned, before[MENTIONS.name], after[MENTIONS.name])
    update = GraphUpdate(change, len(new - old), len(old - new),
                         entities=_counted(before, after, ENTITIES.name, "entity_id", ["display_name"]),
                         facts=_counted(before, after, FACTS.name, "fact_id", ["subject", "predicate", "object"]),
                         embedder=manifest.config.get("embedder"))
    update.states = {key: store_state(store, manifest, [s.name for s in specs], changed=changed)
                     for key, specs in GRAPH_TABLES.items()}
    if fingerprint and manifest.seq:
        digest = store_fingerprint(store, manifest)
        update.fingerprint = digest.digest
        update.digests = {key: digest.tables[key if key == "name_vectors" else specs[0].name].digest
                          for key, specs in GRAPH_TABLES.items()}
    if update.embedder:
        update.vector_table = cache_table_name("name", update.embedder)
        update.vector_uri = vector_cache_uri(store, "name", update.embedder)
    return update


def _mentioned_documents(committed: pl.DataFrame, before: pl.DataFrame, after: pl.DataFrame) -> tuple[set[str], set[str]]:
    """The documents some mention names, before and after a change: the committed mentions' doc ids,
    with the change's rows (``before``: the rows held as read, ``after``: as staged) counted in."""
    def counted(rows: pl.DataFrame, sign: int) -> pl.DataFrame:
        return rows.group_by("doc_id").agg((pl.len().cast(pl.Int64) * sign).alias("n"))

    counts = pl.concat([counted(committed, 1), counted(before, -1), counted(after, 1)])
    final = counts.group_by("doc_id").agg(pl.col("n").sum())
    old = set(committed.get_column("doc_id").unique().to_list())
    return old, set(final.filter(pl.col("n") > 0).get_column("doc_id").to_list())


def _counted(before: dict[str, pl.DataFrame], after: dict[str, pl.DataFrame], table: str, key: str,
             label: list[str]) -> dict[str, int]:
    """How many rows of the touched buckets were removed, added and changed."""
    columns = [key, *label, "n_sources" if key == "fact_id" else "n_chunks"]
    removed, added, changed = table_differences(before[table].select(columns), after[table].select(columns), [key])
    return {"removed": len(removed), "added": len(added), "changed": len(changed)}
