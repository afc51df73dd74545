"""Synonym edges: same-type entity pairs that have a member-name pair at cosine >= τs whose names
carry the same numbers.

A pure threshold over the stored name links: no top-k, so an edge depends only on the two
entities' members. Its weight is the highest similarity among their qualifying member pairs.
The number rule (numbers.py) is a function of the pair too: 'november 1' and '26 november' are
never synonyms, whatever their cosine.
"""

from __future__ import annotations

import polars as pl

from lightfoot_pipeline.index.numbers import number_signature

EDGE_SCHEMA = {"entity_a": pl.String, "entity_b": pl.String, "similarity": pl.Float64}


def _numbers_agree(frame: pl.DataFrame) -> pl.Series:
    """Mask of the rows of a links frame whose two names carry the same numbers."""
    signature = {n: number_signature(n) for n in pl.concat([frame.get_column("name_a"), frame.get_column("name_b")])
                 .unique().to_list()}
    a = frame.get_column("name_a").replace_strict(signature, return_dtype=pl.String)
    b = frame.get_column("name_b").replace_strict(signature, return_dtype=pl.String)
    return a == b


def synonym_edges(
    links: pl.DataFrame, aliases: pl.DataFrame, threshold: float, numbers_must_agree: bool = True
) -> pl.DataFrame:
    """Edges implied by ``links`` (type, name_a, name_b, similarity) under ``aliases`` (name → entity)."""
    members = aliases.select("name", "type", "entity_id")
    strong = links.filter(pl.col("similarity") >= threshold)
    if numbers_must_agree and strong.height:
        strong = strong.filter(_numbers_agree(strong))
    pairs = (
        strong
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
