"""Facts: (subject, predicate, object) triples keyed by their forms, alive while any source is.

A fact's row is a function of its set of live assertions: how many passages assert it and an
order-independent digest of which ones (so that the graph stage can find changed facts by
comparing digests, without a change journal).
"""

from __future__ import annotations

import polars as pl

from lightfoot_pipeline.index.set_digest import set_digest

FACT_KEY = ["fact_id", "subject", "subject_type", "predicate", "object", "object_type"]


def fact_rows(fact_sources: pl.DataFrame) -> pl.DataFrame:
    """Facts table rows for every fact in ``fact_sources``."""
    return (
        fact_sources.group_by(FACT_KEY)
        .agg(pl.col("chunk_id").n_unique().alias("n_sources"), set_digest(pl.col("chunk_id")).alias("source_digest"))
        .with_columns(pl.col("n_sources").cast(pl.Int64))
    )


def fact_text(subject: str, predicate: str, obj: str) -> str:
    """The text a fact is embedded as for retrieval."""
    return f"{subject} {predicate} {obj}"
