"""The engine's operations: the index config a store is built with, adopted once and then kept."""

from __future__ import annotations

import pytest

from lightfoot_pipeline import pipeline
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.settings import IndexSettings


def test_a_new_store_adopts_the_config_only_with_an_embedder(store):
    settings = IndexSettings()
    with store.transaction() as tx:
        pipeline.check_config(tx, settings)
        assert tx.config == {}, "a graph update that embeds nothing adopts nothing"
        pipeline.check_config(tx, settings, HashingEmbedder(dim=32))
        assert tx.config == pipeline.index_config(HashingEmbedder(dim=32).model_id, 32, settings)


def test_a_store_refuses_other_settings_with_or_without_an_embedder_and_another_embedder(store):
    built = HashingEmbedder(dim=32)
    with store.transaction() as tx:
        pipeline.check_config(tx, IndexSettings(), built)
        tx.commit("config", {})
    other = IndexSettings(entity_threshold=0.95)
    with store.transaction() as tx:
        pipeline.check_config(tx, IndexSettings())
        pipeline.check_config(tx, IndexSettings(), built)
        with pytest.raises(pipeline.IndexConfigError, match="built with settings"):
            pipeline.check_config(tx, other)
        with pytest.raises(pipeline.IndexConfigError, match="built with settings"):
            pipeline.check_config(tx, other, built)
        with pytest.raises(pipeline.IndexConfigError, match="name vectors come from"):
            pipeline.check_config(tx, IndexSettings(), HashingEmbedder(dim=64))
