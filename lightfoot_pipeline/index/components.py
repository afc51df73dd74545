"""Entities: connected components of live names linked at the entity threshold.

An entity is a set of same-type names, closed under links with cosine >= τm. Its id is a hash of
its type and its lexicographically smallest member name; its canonical name is the member with
the most provenance (passages that use the name), ties broken alphabetically. All three depend on
the set of live names and their passages alone.
"""

from __future__ import annotations

import hashlib

import numpy as np
import polars as pl
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components


def entity_id_for(type_: str, smallest_name: str) -> str:
    return "ent-" + hashlib.sha256(f"{type_}\x00{smallest_name}".encode()).hexdigest()[:24]


def components(names: pl.DataFrame, links: pl.DataFrame, threshold: float) -> pl.DataFrame:
    """Label each name with its entity.

    names: (name, type) rows, unique. links: (type, name_a, name_b, similarity) among those names
    (links to other names are ignored). Returns (name, type, entity_id).
    """
    if names.height == 0:
        return pl.DataFrame(schema={"name": pl.String, "type": pl.String, "entity_id": pl.String})
    nodes = names.select("name", "type").with_row_index("node")
    strong = links.filter(pl.col("similarity") >= threshold)
    edges = (
        strong.join(nodes, left_on=["type", "name_a"], right_on=["type", "name"], how="inner")
        .rename({"node": "a"})
        .join(nodes, left_on=["type", "name_b"], right_on=["type", "name"], how="inner")
        .rename({"node": "b"})
    )
    n = nodes.height
    a = edges.get_column("a").to_numpy().astype(np.int64)
    b = edges.get_column("b").to_numpy().astype(np.int64)
    graph = coo_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n, n))  # (#names, #names)
    _, labels = connected_components(graph, directed=False)
    labelled = nodes.with_columns(pl.Series("component", labels))
    smallest = labelled.group_by("component").agg(pl.col("name").min().alias("smallest"), pl.col("type").first())
    # One hash per component, in a plain loop: polars' map_elements over a struct builds a dict a
    # row and took about twice as long.
    ids = smallest.select("component", pl.Series("entity_id", [
        entity_id_for(type_, name)
        for type_, name in zip(smallest.get_column("type").to_list(), smallest.get_column("smallest").to_list(),
                               strict=True)
    ], dtype=pl.String))
    return labelled.join(ids, on="component").select("name", "type", "entity_id")


def entity_rows(aliases: pl.DataFrame, forms: pl.DataFrame) -> pl.DataFrame:
    """Entity table rows for the entities that ``aliases`` covers.

    aliases: (name, type, entity_id, surface, n_chunks) for every member of each entity.
    forms: the live forms of those member names (for counting each entity's passages).
    """
    canonical = (
        aliases.sort(["entity_id", "n_chunks", "name"], descending=[False, True, False])
        .group_by("entity_id", maintain_order=True)
        .agg(
            pl.col("type").first(),
            pl.col("name").first().alias("canonical_name"),
            pl.col("surface").first().alias("display_name"),
            pl.len().alias("n_aliases"),
        )
    )
    chunk_counts = (
        forms.join(aliases.select("name", "type", "entity_id"), on=["name", "type"], how="inner")
        .group_by("entity_id")
        .agg(pl.col("chunk_id").n_unique().alias("n_chunks"))
    )
    return canonical.join(chunk_counts, on="entity_id", how="left").with_columns(
        pl.col("n_aliases").cast(pl.Int64), pl.col("n_chunks").fill_null(0).cast(pl.Int64)
    )


def mention_rows(aliases: pl.DataFrame, forms: pl.DataFrame) -> pl.DataFrame:
    """(entity_id, chunk_id, doc_id): which passages mention each entity in ``aliases``."""
    return (
        forms.join(aliases.select("name", "type", "entity_id"), on=["name", "type"], how="inner")
        .select("entity_id", "chunk_id", "doc_id")
        .unique()
    )
