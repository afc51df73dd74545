"""References between the index's tables: none dangles in a sound store, and each kind is counted."""

from __future__ import annotations

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.index.references import dangling_references
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.store.tables import ALIASES, DOCUMENTS, MENTIONS, with_buckets


@pytest.fixture
def indexed(store, sample_documents, sample_records, hashing_embedder):
    operations.ingest(store, sample_documents[:6], ReplayExtractor(sample_records), hashing_embedder)
    return store


def test_a_sound_store_has_no_dangling_reference(indexed, sample_documents):
    assert set(dangling_references(indexed).values()) == {0}
    operations.delete(indexed, [sample_documents[0].doc_id])
    assert set(dangling_references(indexed).values()) == {0}


def test_each_kind_of_dangling_reference_is_counted(indexed):
    sound = indexed.manifest()
    with indexed.transaction() as tx:
        mentions = tx.table(MENTIONS.name)
        ghost = mentions.head(2).drop("bucket").with_columns(pl.lit("chunk-deleted-long-ago").alias("chunk_id"))
        tx.put(MENTIONS.name, pl.concat([mentions, with_buckets(ghost, MENTIONS, tx.n_buckets).cast(mentions.schema)]))
        documents = tx.table(DOCUMENTS.name)
        tx.put(DOCUMENTS.name, documents.slice(1))
        tx.commit("tamper", {})
    counts = dangling_references(indexed)
    assert dangling_references(indexed, rows_per_piece=3) == counts, "the same, read a few rows at a time"
    assert counts["mentions -> passages"] == 2
    assert counts["passages -> documents"] >= 1
    assert sum(counts.values()) == counts["mentions -> passages"] + counts["passages -> documents"]
    assert set(dangling_references(indexed, sound).values()) == {0}, "read at the commit given"


def test_aliases_must_be_exactly_the_names_of_live_forms(indexed):
    with indexed.transaction() as tx:
        aliases = tx.table(ALIASES.name)
        dropped = aliases.head(1)  # a live name left without its alias
        stray = aliases.slice(1, 1).with_columns(pl.lit("a name no form has").alias("name"))
        tx.put(ALIASES.name, pl.concat([aliases.slice(1), stray]))
        tx.commit("tamper", {})
    counts = dangling_references(indexed)
    assert dangling_references(indexed, rows_per_piece=3) == counts
    assert counts["aliases -> live names"] == 1
    assert counts["live names -> aliases"] == dropped.select("name", "type").unique().height == 1
    assert sum(counts.values()) == 2
