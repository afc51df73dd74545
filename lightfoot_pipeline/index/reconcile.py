"""The graph stage: bring the global tables in line with the live forms and fact assertions.

Level-triggered rather than event-driven: the stage compares what the forms say (each live
name's passages) with what the aliases table recorded last time, and recomputes only what that
difference touches. Adding documents and deleting them are the same operation here, and a run
that crashed half-way is healed by the next one.

1. **Names.** Per (name, type): passage count, passage-set digest and display spelling from the
   forms. Names new to the aliases table are *added*, names gone from the forms are *removed*,
   names whose passages changed are *changed*.
2. **Vectors and links.** Added names get vectors (cached per model and name) and are linked
   against every live name of their type that shares an LSH band key (links.py, name_sketches.py). Links of removed names
   are dropped. No other link is recomputed: a link depends on its two names only.
3. **Components.** The affected entities are those of removed and changed names, and of old
   names that an added name links to at the entity threshold. Their surviving members plus the
   added names are re-partitioned into connected components; every other entity is untouched
   (a component is closed under links, so no untouched entity can gain or lose a member).
4. **Entities, aliases, mentions, synonym edges** of the affected entities are replaced; synonym
   edges are recomputed from the links that touch a re-partitioned name.
5. **Facts** are regrouped from the live fact assertions.

Every step reads only the buckets of the names, entities and facts it looks up (see tables.py):
a name's forms and alias, its links from both ends, the members of its entity (found by walking
the committed links at the entity threshold), their mentions and synonym edges. Linking an added
name holds the band keys of the live names of its type and reads the vectors of the names that
share a key with it (name_sketches.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import polars as pl

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.index.components import components, entity_rows, mention_rows
from lightfoot_pipeline.index.facts import fact_rows
from lightfoot_pipeline.index.links import LINK_SCHEMA, LinkRule
from lightfoot_pipeline.index.name_sketches import drop_keys, link_added_names, store_keys
from lightfoot_pipeline.index.set_digest import set_digest
from lightfoot_pipeline.index.synonyms import synonym_edges
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.tables import (
    ALIASES,
    ENTITIES,
    FACT_SOURCES,
    FACTS,
    FORMS,
    GRAPH_QUEUE,
    MENTIONS,
    NAME_LINKS,
    NAME_LINKS_REVERSE,
    SYNONYM_EDGES,
    TableSpec,
    with_buckets,
)
from lightfoot_pipeline.store.transaction import Transaction
from lightfoot_pipeline.store.vectors import VectorCache

NAME_KEY = ["name", "type"]
# Links the added names against the live ones and stages their keys (link_added_names' signature).
Linker = Callable[[Transaction, pl.DataFrame, pl.DataFrame, VectorCache, IndexSettings], pl.DataFrame]


class EmbedderRequired(LightfootError, RuntimeError):
    """New names need vectors, and no embedder was given (deletion never needs one)."""


@dataclass
class GraphChange:
    names_added: int = 0
    names_removed: int = 0
    names_changed: int = 0
    links_added: int = 0
    links_removed: int = 0
    vectors_computed: int = 0
    entities_recomputed: int = 0
    names_repartitioned: int = 0
    entities_before: int = 0
    entities_after: int = 0
    synonym_edges_before: int = 0
    synonym_edges_after: int = 0
    facts_before: int = 0
    facts_after: int = 0

    def as_dict(self) -> dict:
        return asdict(self)

    def then(self, later: GraphChange) -> GraphChange:
        """This change followed by a later one (a deletion committed in pieces): the counts added up,
        the sizes before from this one and after from the later one."""
        ends = {"entities_before": self.entities_before, "entities_after": later.entities_after,
                "synonym_edges_before": self.synonym_edges_before, "synonym_edges_after": later.synonym_edges_after,
                "facts_before": self.facts_before, "facts_after": later.facts_after}
        summed = {key: value + getattr(later, key) for key, value in asdict(self).items() if key not in ends}
        return GraphChange(**summed, **ends)


def name_statistics(forms: pl.DataFrame) -> pl.DataFrame:
    """(name, type, surface, n_chunks, chunk_digest) of every live name."""
    if forms.height == 0:
        return pl.DataFrame(schema={"name": pl.String, "type": pl.String, "surface": pl.String,
                                    "n_chunks": pl.Int64, "chunk_digest": pl.String})
    surfaces = (
        forms.group_by([*NAME_KEY, "surface"]).agg(pl.len().alias("uses"))
        .sort([*NAME_KEY, "uses", "surface"], descending=[False, False, True, False])
        .group_by(NAME_KEY, maintain_order=True).agg(pl.col("surface").first())
    )
    counts = forms.group_by(NAME_KEY).agg(
        pl.col("chunk_id").n_unique().cast(pl.Int64).alias("n_chunks"), set_digest(pl.col("chunk_id")).alias("chunk_digest")
    )
    return counts.join(surfaces, on=NAME_KEY).select("name", "type", "surface", "n_chunks", "chunk_digest")


def _fresh(frame: pl.DataFrame, spec: TableSpec, n_buckets: int) -> pl.DataFrame | None:
    return with_buckets(frame, spec, n_buckets) if frame.height else None


# Reads the rows of the buckets that hold some values of a column: (table, column, values) ->
# rows (a transaction's ``rows`` or ``committed_rows``, a store's ``rows`` at one commit).
RowReader = Callable[[str, str, list[str]], pl.DataFrame]


def name_keys(frame: pl.DataFrame, name_col: str = "name") -> pl.Series:
    """One string per row for its (type, name_col)."""
    return frame.select(pl.concat_str("type", pl.lit("\x00"), name_col).alias("k")).get_column("k")


def in_names(frame: pl.DataFrame, names: pl.DataFrame, name_col: str = "name") -> pl.Series:
    """Mask of the rows of frame whose (type, name_col) is one of names' (type, name)."""
    return name_keys(frame, name_col).is_in(name_keys(names).implode())


def name_rows(read: RowReader, spec: TableSpec, names: pl.DataFrame, name_col: str = "name") -> pl.DataFrame:
    """The rows of a table bucketed by a name column (forms, aliases, links) for some (name, type)
    pairs."""
    rows = read(spec.name, name_col, names.get_column("name").unique().to_list())
    return rows.filter(in_names(rows, names, name_col))


def links_of(read: RowReader, names: pl.DataFrame) -> pl.DataFrame:
    """Every link with at least one end among names: from the buckets of those names in the links
    table (by name_a) and in its mirror (by name_b)."""
    found = pl.concat([name_rows(read, NAME_LINKS, names, "name_a").select(NAME_LINKS.columns),
                       name_rows(read, NAME_LINKS_REVERSE, names, "name_b").select(NAME_LINKS.columns)])
    return found.unique(subset=NAME_LINKS.key)


def _name_rows(tx: Transaction, spec: TableSpec, names: pl.DataFrame, *, committed: bool = False) -> pl.DataFrame:
    return name_rows(tx.committed_rows if committed else tx.rows, spec, names)


def _links_of(tx: Transaction, names: pl.DataFrame, *, committed: bool = False) -> pl.DataFrame:
    return links_of(tx.committed_rows if committed else tx.rows, names)


def _link_key() -> pl.Expr:
    return pl.concat_str(*(pl.col(c) for c in NAME_LINKS.key), separator="\x00")


def _drop_links(tx: Transaction, gone: pl.DataFrame) -> None:
    """Remove links from the links table and its mirror."""
    keys = gone.select(_link_key().alias("k")).get_column("k").implode()
    for spec, by in ((NAME_LINKS, "name_a"), (NAME_LINKS_REVERSE, "name_b")):
        tx.rows(spec.name, by, gone.get_column(by).unique().to_list())
        tx.update(spec.name, remove=_link_key().is_in(keys))


def _old_members(tx: Transaction, touched: pl.DataFrame, threshold: float) -> pl.DataFrame:
    """The names of the entities that the touched names belonged to, as committed: the closure of the
    touched stored names under the committed links at the entity threshold (an entity is a
    connected component of those links)."""
    stored = _name_rows(tx, ALIASES, touched, committed=True).select(NAME_KEY)
    seen = stored
    frontier = stored
    while frontier.height:
        strong = _links_of(tx, frontier, committed=True).filter(pl.col("similarity") >= threshold)
        ends = pl.concat([strong.select(pl.col("name_a").alias("name"), "type"),
                          strong.select(pl.col("name_b").alias("name"), "type")]).unique()
        frontier = ends.join(seen, on=NAME_KEY, how="anti")
        seen = pl.concat([seen, frontier])
    return seen


def _entities_of(tx: Transaction, names: pl.DataFrame, region_aliases: pl.DataFrame) -> pl.DataFrame:
    """(name, type, entity_id) of names: from ``region_aliases`` where given, else as staged."""
    outside = names.join(region_aliases.select(NAME_KEY), on=NAME_KEY, how="anti")
    return pl.concat([region_aliases.select("name", "type", "entity_id"),
                      _name_rows(tx, ALIASES, outside).select("name", "type", "entity_id")])


def reconcile_graph(
    tx: Transaction, settings: IndexSettings, name_vectors: VectorCache | Callable[[], VectorCache] | None, *,
    full: bool = False, timings: dict[str, float] | None = None, linker: Linker | None = None,
) -> GraphChange:
    """Update the global tables for the names and facts queued by the document stage.

    Reads only the buckets of the names, entities and facts the change touches. With
    ``full=True`` every live and stored name and fact is compared instead of the queued ones (the
    level-triggered repair path: it reads every table and finds and fixes any difference,
    whatever caused it). ``timings`` gets the seconds spent linking added names (``links``).
    ``linker`` links the added names and stages their keys in place of
    :func:`name_sketches.link_added_names` (links computed elsewhere: link_pieces.PrecomputedLinks).
    ``name_vectors`` may be a function that returns the cache: it is called only once added names
    need vectors, so a change without one never loads the embedder (the Dagster graph step).
    """
    if full and callable(name_vectors):
        name_vectors = name_vectors()
    change = GraphChange()
    n = tx.n_buckets
    queue = tx.table(GRAPH_QUEUE.name)
    if full:
        for spec in (FORMS, ALIASES, NAME_LINKS, NAME_LINKS_REVERSE, ENTITIES, MENTIONS, SYNONYM_EDGES, FACTS,
                     FACT_SOURCES):
            tx.table(spec.name)
    change.entities_before, change.synonym_edges_before = tx.count(ENTITIES.name), tx.count(SYNONYM_EDGES.name)

    # 1. Which of the candidate names were added, removed or changed.
    if full:
        candidates = pl.concat([tx.table(FORMS.name).select(NAME_KEY), tx.table(ALIASES.name).select(NAME_KEY)]).unique()
    else:
        candidates = queue.filter(pl.col("kind") == "name").select(pl.col("key").alias("name"), "type").unique()
    stats = name_statistics(_name_rows(tx, FORMS, candidates))
    compared = stats.join(
        _name_rows(tx, ALIASES, candidates).select(
            *NAME_KEY, pl.col("surface").alias("old_surface"), pl.col("n_chunks").alias("old_n"),
            pl.col("chunk_digest").alias("old_digest"), "entity_id",
        ),
        on=NAME_KEY, how="full", coalesce=True,
    )
    added = compared.filter(pl.col("entity_id").is_null()).select(NAME_KEY)
    removed = compared.filter(pl.col("n_chunks").is_null()).select(NAME_KEY)
    changed = compared.filter(
        pl.col("entity_id").is_not_null() & pl.col("n_chunks").is_not_null()
        & ((pl.col("n_chunks") != pl.col("old_n")) | (pl.col("chunk_digest") != pl.col("old_digest"))
           | (pl.col("surface") != pl.col("old_surface")))
    ).select(NAME_KEY)
    change.names_added, change.names_removed, change.names_changed = added.height, removed.height, changed.height

    # 2. Links: drop those of removed names, add those of added names.
    if removed.height:
        gone = _links_of(tx, removed)
        change.links_removed = gone.height
        _drop_links(tx, gone)
        drop_keys(tx, removed)
    if full and isinstance(name_vectors, VectorCache):
        store_keys(tx, tx.table(ALIASES.name).select(NAME_KEY).join(removed, on=NAME_KEY, how="anti"),
                   name_vectors, LinkRule.of(settings))
    new_links = pl.DataFrame(schema=LINK_SCHEMA)
    if added.height:
        if name_vectors is None:
            raise EmbedderRequired(f"{added.height} new names need vectors, and no embedder was given")
        if callable(name_vectors):
            name_vectors = name_vectors()
        linking = time.perf_counter()
        new_links = (linker or link_added_names)(tx, added, removed, name_vectors, settings)
        if timings is not None:  # linking the added names: vectors, band keys, candidates, cosines
            timings["links"] = round(time.perf_counter() - linking, 3)
        change.vectors_computed = name_vectors.computed
        change.links_added = new_links.height
        tx.update(NAME_LINKS.name, add=_fresh(new_links, NAME_LINKS, n))
        tx.update(NAME_LINKS_REVERSE.name, add=_fresh(new_links, NAME_LINKS_REVERSE, n))

    # 3. Affected entities, and the names to re-partition.
    strong_new = new_links.filter(pl.col("similarity") >= settings.entity_threshold)
    neighbours = pl.concat([
        strong_new.select("type", pl.col("name_a").alias("name")),
        strong_new.select("type", pl.col("name_b").alias("name")),
    ]).select(NAME_KEY).unique()
    touched = pl.concat([removed, changed, neighbours]).unique()
    members = _old_members(tx, touched, settings.entity_threshold)
    old_aliases = _name_rows(tx, ALIASES, members)
    affected_ids = old_aliases.get_column("entity_id").unique()
    change.entities_recomputed = affected_ids.len()
    region = pl.concat([members.join(removed, on=NAME_KEY, how="anti"), added]).unique()
    change.names_repartitioned = region.height
    region_forms = _name_rows(tx, FORMS, region)
    region_stats = name_statistics(region_forms)
    touching = _links_of(tx, region)
    region_links = touching.filter(in_names(touching, region, "name_a") & in_names(touching, region, "name_b"))
    labels = components(region, region_links, settings.entity_threshold)

    # 4. Replace aliases, entities, mentions and synonym edges of the affected region.
    affected = affected_ids.implode()
    region_aliases = region_stats.join(labels, on=NAME_KEY).select(ALIASES.columns)
    stale_partners = _stale_edge_partners(tx, members, settings.synonym_threshold)
    tx.update(ALIASES.name, remove=pl.col("entity_id").is_in(affected), add=_fresh(region_aliases, ALIASES, n))
    tx.rows(ENTITIES.name, "entity_id", affected_ids.to_list())
    tx.update(ENTITIES.name, remove=pl.col("entity_id").is_in(affected),
              add=_fresh(entity_rows(region_aliases, region_forms).select(ENTITIES.columns), ENTITIES, n))
    change.entities_after = tx.count(ENTITIES.name)
    tx.rows(MENTIONS.name, "entity_id", affected_ids.to_list())
    tx.update(MENTIONS.name, remove=pl.col("entity_id").is_in(affected),
              add=_fresh(mention_rows(region_aliases, region_forms), MENTIONS, n))

    partners = pl.concat([touching.select(pl.col("name_a").alias("name"), "type"),
                          touching.select(pl.col("name_b").alias("name"), "type")]).unique()
    fresh_edges = synonym_edges(touching, _entities_of(tx, partners, region_aliases), settings.synonym_threshold,
                                settings.numbers_must_agree)
    tx.rows(SYNONYM_EDGES.name, "entity_a", [*affected_ids.to_list(), *stale_partners])
    tx.update(SYNONYM_EDGES.name,
              remove=pl.col("entity_a").is_in(affected) | pl.col("entity_b").is_in(affected),
              add=_fresh(fresh_edges, SYNONYM_EDGES, n))
    change.synonym_edges_after = tx.count(SYNONYM_EDGES.name)

    # 5. Facts whose assertions changed, regrouped from their live assertions.
    change.facts_before = tx.count(FACTS.name)
    if full:
        fact_ids = pl.concat([tx.table(FACTS.name).get_column("fact_id"),
                              tx.table(FACT_SOURCES.name).get_column("fact_id")]).unique()
    else:
        fact_ids = queue.filter(pl.col("kind") == "fact").get_column("key").unique()
    sources = tx.rows(FACT_SOURCES.name, "fact_id", fact_ids.to_list())
    regrouped = fact_rows(sources)
    tx.rows(FACTS.name, "fact_id", fact_ids.to_list())
    tx.update(FACTS.name, remove=pl.col("fact_id").is_in(fact_ids.implode()),
              add=_fresh(regrouped.select(FACTS.columns), FACTS, n))
    change.facts_after = tx.count(FACTS.name)

    # 6. The queue is done.
    if queue.height:
        tx.update(GRAPH_QUEUE.name, remove=pl.col("kind").is_not_null())
    return change


def _stale_edge_partners(tx: Transaction, members: pl.DataFrame, threshold: float) -> list[str]:
    """Entities outside the affected ones that share a committed synonym edge with one of them: an
    edge is bucketed by its smaller entity, which may be the partner's."""
    links = _links_of(tx, members, committed=True).filter(pl.col("similarity") >= threshold)
    ends = pl.concat([links.select(pl.col("name_a").alias("name"), "type"),
                      links.select(pl.col("name_b").alias("name"), "type")]).unique()
    outside = ends.join(members, on=NAME_KEY, how="anti")
    return _name_rows(tx, ALIASES, outside, committed=True).get_column("entity_id").unique().to_list()
