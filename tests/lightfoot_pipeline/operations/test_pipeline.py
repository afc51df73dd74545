"""The engine's operations: the index config a store is built with, adopted once and then kept."""

from __future__ import annotations

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.settings import IndexSettings


def test_a_new_store_adopts_the_config_only_with_an_embedder(store):
    settings = IndexSettings()
    with store.transaction() as tx:
        operations.check_config(tx, settings)
        assert tx.config == {}, "a graph update that embeds nothing adopts nothing"
        operations.check_config(tx, settings, HashingEmbedder(dim=32))
        assert tx.config == operations.index_config(HashingEmbedder(dim=32).model_id, 32, settings)


def test_a_store_refuses_other_settings_with_or_without_an_embedder_and_another_embedder(store):
    built = HashingEmbedder(dim=32)
    with store.transaction() as tx:
        operations.check_config(tx, IndexSettings(), built)
        tx.commit("config", {})
    other = IndexSettings(entity_threshold=0.95)
    with store.transaction() as tx:
        operations.check_config(tx, IndexSettings())
        operations.check_config(tx, IndexSettings(), built)
        with pytest.raises(operations.IndexConfigError, match="built with settings"):
            operations.check_config(tx, other)
        with pytest.raises(operations.IndexConfigError, match="built with settings"):
            operations.check_config(tx, other, built)
        with pytest.raises(operations.IndexConfigError, match="name vectors come from"):
            operations.check_config(tx, IndexSettings(), HashingEmbedder(dim=64))


def test_an_ingest_reports_the_seconds_of_each_stage(store, sample_documents, sample_records):
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor

    report = operations.ingest(store, sample_documents[:40], ReplayExtractor(sample_records), HashingEmbedder(dim=32))
    stages = report.stage_seconds
    assert set(stages) == {"extract", "documents", "graph", "links", "commit"}
    assert all(v >= 0 for v in stages.values())
    assert stages["links"] <= stages["graph"]
    assert sum(v for k, v in stages.items() if k != "links") <= report.seconds + 0.01
    assert report.as_dict()["stage_seconds"] == stages
