"""Synonym edges: same-type entity pairs that have a member-name pair at cosine >= τs.

A pure threshold over the stored name links: no top-k, so an edge depends only on the two
entities' members. Its weight is the highest similarity among their member pairs.
"""

from __future__ import annotations

import polars as pl

EDGE_SCHEMA = {"entity_a": pl.String, "entity_b": pl.String, "similarity": pl.Float64}


def synonym_edges(links: pl.DataFrame, aliases: pl.DataFrame, threshold: float) -> pl.DataFrame:
    """Edges implied by ``links`` (type, name_a, name_b, similarity) under ``aliases`` (name → entity)."""
    members = aliases.select("name", "type", "entity_id")
    pairs = (
        links.filter(pl.col("similarity") >= threshold)
        .join(members.rename({"name": "name_a", "entity_id": "ea"}), on=["type", "name_a"], how="inner")
        .join(members.rename({"name": "name_b", "entity_id": "eb"}), on=["type", "name_b"], how="inner")
        .filter(pl.col("ea") != pl.col("eb"))
    )
    if pairs.height == 0:
        return pl.DataFrame(schema=EDGE_SCHEMA)
    return (
        pairs.select(
            pl.min_horizontal("ea", "eb").alias("entity_a"),
            pl.max_horizontal("ea", "eb").alias("entity_b"),
            "similarity",
        )
        .group_by("entity_a", "entity_b")
        .agg(pl.col("similarity").max())
        .select(list(EDGE_SCHEMA))
    )
