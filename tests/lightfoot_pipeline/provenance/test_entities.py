"""explain entity: an entity found by id or any of its names, with its aliases, passages, synonyms and facts."""

from __future__ import annotations

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.provenance import ExplainError
from lightfoot_pipeline.provenance.entities import explain_entity


@pytest.fixture(scope="module")
def built(tmp_path_factory, sample_documents, sample_records):
    from lightfoot_pipeline.store.store import Store

    store = Store(str(tmp_path_factory.mktemp("entities") / "store"))
    operations.ingest(store, sample_documents[:200], ReplayExtractor(sample_records), HashingEmbedder(dim=32))
    return store


def test_an_entity_with_several_aliases_and_a_synonym(built):
    store = built
    edges = store.read("synonym_edges")
    entities = store.read("entities")
    target = (entities.filter(pl.col("entity_id").is_in(edges.get_column("entity_a").implode()))
              .sort(["n_aliases", "entity_id"], descending=[True, False]).row(0, named=True))
    [e] = explain_entity(store, target["entity_id"])
    aliases = store.read("aliases").filter(pl.col("entity_id") == target["entity_id"])
    assert sorted(a["name"] for a in e.aliases) == sorted(aliases.get_column("name").to_list())
    mentions = store.read("mentions").filter(pl.col("entity_id") == target["entity_id"])
    assert e.n_passages == mentions.height == target["n_chunks"]
    assert e.documents == sorted(mentions.get_column("doc_id").unique().to_list())
    for alias in e.aliases:
        assert len(alias["passages"]) == min(alias["n_passages"], 50)
    assert {s["entity_id"] for s in e.synonyms} >= set(
        edges.filter(pl.col("entity_a") == target["entity_id"]).get_column("entity_b").to_list())
    for fact in e.facts:
        assert target["entity_id"] in (fact["subject_entity"], fact["object_entity"])
        assert len(fact["evidence"]) == fact["n_sources"]


def test_found_by_a_name_as_written(built):
    store = built
    alias = store.read("aliases").sort("n_chunks", "name", descending=[True, False]).row(0, named=True)
    found = explain_entity(store, "  " + alias["surface"].upper() + " ")
    assert alias["entity_id"] in [e.entity_id for e in found]


def test_an_unknown_name_says_what_is_near(built):
    store = built
    name = store.read("aliases").sort("name").row(0, named=True)["name"]
    with pytest.raises(ExplainError, match="no entity"):
        explain_entity(store, "no such name anywhere")
    with pytest.raises(ExplainError) as err:
        explain_entity(store, name[:-1] + "\u00a7")
    assert "no entity" in err.value.line()
    with pytest.raises(ExplainError, match="empty"):
        explain_entity(store, "   ")
