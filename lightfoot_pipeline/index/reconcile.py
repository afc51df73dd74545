"""The graph stage: bring the global tables in line with the live forms and fact assertions.

Level-triggered rather than event-driven: the stage compares what the forms say (each live
name's passages) with what the aliases table recorded last time, and recomputes only what that
difference touches. Adding documents and deleting them are the same operation here, and a run
that crashed half-way is healed by the next one.

1. **Names.** Per (name, type): passage count, passage-set digest and display spelling from the
   forms. Names new to the aliases table are *added*, names gone from the forms are *removed*,
   names whose passages changed are *changed*.
2. **Vectors and links.** Added names get vectors (cached per model and name) and are linked
   against every live name of their type (exact, blocked; see links.py). Links of removed names
   are dropped. No other link is recomputed: a link depends on its two names only.
3. **Components.** The affected entities are those of removed and changed names, and of old
   names that an added name links to at the entity threshold. Their surviving members plus the
   added names are re-partitioned into connected components; every other entity is untouched
   (a component is closed under links, so no untouched entity can gain or lose a member).
4. **Entities, aliases, mentions, synonym edges** of the affected entities are replaced; synonym
   edges are recomputed from the links that touch a re-partitioned name.
5. **Facts** are regrouped from the live fact assertions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

from lightfoot_pipeline.index.components import components, entity_rows, mention_rows
from lightfoot_pipeline.index.digests import set_digest
from lightfoot_pipeline.index.facts import fact_rows
from lightfoot_pipeline.index.links import LINK_SCHEMA, LinkRule, links_between
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.transaction import Transaction
from lightfoot_pipeline.index.synonyms import synonym_edges
from lightfoot_pipeline.store.tables import (
    ALIASES, ENTITIES, FACT_SOURCES, FACTS, FORMS, GRAPH_QUEUE, MENTIONS, NAME_LINKS, SYNONYM_EDGES, TableSpec,
    with_buckets,
)
from lightfoot_pipeline.store.vectors import VectorCache
from lightfoot_pipeline.errors import LightfootError

NAME_KEY = ["name", "type"]


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


def _keys(frame: pl.DataFrame, name_col: str = "name") -> pl.Series:
    return frame.select(pl.concat_str("type", pl.lit("\x00"), name_col).alias("k")).get_column("k")


def _in_names(frame: pl.DataFrame, names: pl.DataFrame, name_col: str = "name") -> pl.Series:
    """Mask of the rows of frame whose (type, name_col) is one of names' (type, name)."""
    return _keys(frame, name_col).is_in(_keys(names).implode())


def reconcile_graph(
    tx: Transaction, settings: IndexSettings, name_vectors: VectorCache | None, *, full: bool = False
) -> GraphChange:
    """Update the global tables for the names and facts queued by the document stage.

    With ``full=True`` every live and stored name and fact is compared instead of the queued
    ones (the level-triggered repair path: it finds and fixes any difference, whatever caused it).
    """
    change = GraphChange()
    n = tx.n_buckets
    queue = tx.table(GRAPH_QUEUE.name)
    forms = tx.table(FORMS.name)
    aliases = tx.table(ALIASES.name)
    links = tx.table(NAME_LINKS.name)
    entities = tx.table(ENTITIES.name)
    edges = tx.table(SYNONYM_EDGES.name)
    change.entities_before, change.synonym_edges_before = entities.height, edges.height

    # 1. Which of the candidate names were added, removed or changed.
    if full:
        candidates = pl.concat([forms.select(NAME_KEY), aliases.select(NAME_KEY)]).unique()
    else:
        candidates = queue.filter(pl.col("kind") == "name").select("type", pl.col("key").alias("name")).unique()
    candidate_forms = forms.filter(_in_names(forms, candidates))
    stats = name_statistics(candidate_forms)
    compared = stats.join(
        aliases.filter(_in_names(aliases, candidates)).select(
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
        gone = _in_names(links, removed, "name_a") | _in_names(links, removed, "name_b")
        change.links_removed = int(gone.sum())
        tx.update(NAME_LINKS.name, remove=gone)
    new_links = pl.DataFrame(schema=LINK_SCHEMA)
    if added.height:
        if name_vectors is None:
            raise EmbedderRequired(f"{added.height} new names need vectors, and no embedder was given")
        live_names = forms.select(NAME_KEY).unique()
        new_links = _link_added_names(added, live_names, name_vectors, settings)
        change.vectors_computed = name_vectors.computed
        change.links_added = new_links.height
        tx.update(NAME_LINKS.name, add=_fresh(new_links, NAME_LINKS, n))
    links = tx.table(NAME_LINKS.name)

    # 3. Affected entities, and the names to re-partition.
    strong_new = new_links.filter(pl.col("similarity") >= settings.entity_threshold)
    neighbours = pl.concat([
        strong_new.select("type", pl.col("name_a").alias("name")),
        strong_new.select("type", pl.col("name_b").alias("name")),
    ]).select(NAME_KEY).unique()
    touched = pl.concat([removed, changed, neighbours]).unique()
    affected_ids = aliases.filter(_in_names(aliases, touched)).get_column("entity_id").unique()
    change.entities_recomputed = affected_ids.len()
    members = aliases.filter(aliases.get_column("entity_id").is_in(affected_ids.implode())).select(NAME_KEY)
    region = pl.concat([members.join(removed, on=NAME_KEY, how="anti"), added]).unique()
    change.names_repartitioned = region.height
    region_forms = forms.filter(_in_names(forms, region))
    region_stats = name_statistics(region_forms)
    region_links = links.filter(_in_names(links, region, "name_a") & _in_names(links, region, "name_b"))
    labels = components(region, region_links, settings.entity_threshold)

    # 4. Replace aliases, entities, mentions and synonym edges of the affected region.
    region_aliases = region_stats.join(labels, on=NAME_KEY).select(ALIASES.columns)
    tx.update(ALIASES.name, remove=aliases.get_column("entity_id").is_in(affected_ids.implode()),
              add=_fresh(region_aliases, ALIASES, n))
    tx.update(ENTITIES.name, remove=entities.get_column("entity_id").is_in(affected_ids.implode()),
              add=_fresh(entity_rows(region_aliases, region_forms).select(ENTITIES.columns), ENTITIES, n))
    change.entities_after = tx.table(ENTITIES.name).height
    mentions = tx.table(MENTIONS.name)
    tx.update(MENTIONS.name, remove=mentions.get_column("entity_id").is_in(affected_ids.implode()),
              add=_fresh(mention_rows(region_aliases, region_forms), MENTIONS, n))

    touching = links.filter(_in_names(links, region, "name_a") | _in_names(links, region, "name_b"))
    fresh_edges = synonym_edges(
        touching, tx.table(ALIASES.name), settings.synonym_threshold, settings.numbers_must_agree
    )
    stale_edges = edges.get_column("entity_a").is_in(affected_ids.implode()) | edges.get_column("entity_b").is_in(
        affected_ids.implode()
    )
    tx.update(SYNONYM_EDGES.name, remove=stale_edges, add=_fresh(fresh_edges, SYNONYM_EDGES, n))
    change.synonym_edges_after = tx.table(SYNONYM_EDGES.name).height

    # 5. Facts whose assertions changed, regrouped from their live assertions.
    facts = tx.table(FACTS.name)
    sources = tx.table(FACT_SOURCES.name)
    change.facts_before = facts.height
    if full:
        fact_ids = pl.concat([facts.get_column("fact_id"), sources.get_column("fact_id")]).unique()
    else:
        fact_ids = queue.filter(pl.col("kind") == "fact").get_column("key").unique()
    regrouped = fact_rows(sources.filter(sources.get_column("fact_id").is_in(fact_ids.implode())))
    tx.update(FACTS.name, remove=facts.get_column("fact_id").is_in(fact_ids.implode()),
              add=_fresh(regrouped.select(FACTS.columns), FACTS, n))
    change.facts_after = tx.table(FACTS.name).height

    # 6. The queue is done.
    if queue.height:
        tx.update(GRAPH_QUEUE.name, remove=pl.Series([True] * queue.height))
    return change


def _link_added_names(
    added: pl.DataFrame, live_names: pl.DataFrame, name_vectors: VectorCache, settings: IndexSettings
) -> pl.DataFrame:
    """Links of every added name against every live name of its type."""
    added_by_type = added.partition_by("type", as_dict=True)
    live = live_names.join(added, on=NAME_KEY, how="anti")
    live_by_type = live.partition_by("type", as_dict=True)
    frames = []
    for (type_,), group in sorted(added_by_type.items()):
        new_names = sorted(group.get_column("name").to_list())
        old_frame = live_by_type.get((type_,))
        old_names = sorted(old_frame.get_column("name").to_list()) if old_frame is not None else []
        vectors = name_vectors.vectors(new_names + old_names)
        new_vecs, old_vecs = vectors[: len(new_names)], vectors[len(new_names):]
        frames.append(
            links_between(
                type_, new_names, np.ascontiguousarray(new_vecs), old_names, np.ascontiguousarray(old_vecs),
                LinkRule.of(settings),
            )
        )
    return pl.concat(frames) if frames else pl.DataFrame(schema=LINK_SCHEMA)
