"""The vector caches: one vector per (model, text), kept across writers."""

from __future__ import annotations

import numpy as np

from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.vectors import VectorCache


def test_vectors_are_embedded_once_and_then_read(tmp_path, hashing_embedder):
    store = Store(str(tmp_path / "store"))
    first = VectorCache(store, "name", hashing_embedder)
    computed = first.vectors(["alpha", "beta", "alpha"])
    assert first.computed == 2
    again = VectorCache(Store(store.uri), "name", hashing_embedder)
    np.testing.assert_array_equal(again.vectors(["beta", "alpha"]), computed[[1, 0]])
    assert again.computed == 0


def test_a_creation_that_replaced_another_writers_table_brings_its_vectors_back(tmp_path, hashing_embedder):
    """Two writers on an object store can both create the cache; the later creation lands as an
    empty version over the earlier writer's vectors. The creator must add those vectors back."""
    store = Store(str(tmp_path / "store"))
    earlier = VectorCache(store, "name", hashing_embedder)
    expected = earlier.vectors(["alpha", "beta"])
    later = VectorCache(Store(store.uri), "name", hashing_embedder)
    # The later writer's creation, as LanceDB commits it when it loses the race: a new version
    # holding an empty table on top of the earlier writer's.
    replacing = later.store.lance().create_table(later.table_name, schema=later._schema, mode="overwrite")
    assert replacing.count_rows() == 0 and replacing.version > 1

    later._restore_replaced(replacing)

    stored = VectorCache(Store(store.uri), "name", hashing_embedder).stored_vectors(["alpha", "beta"])
    np.testing.assert_array_equal(np.stack(stored), expected)


def test_a_creation_on_an_empty_store_restores_nothing(tmp_path, hashing_embedder):
    store = Store(str(tmp_path / "store"))
    cache = VectorCache(store, "name", hashing_embedder)
    table = cache._table(create=True)
    assert table.version == 1 and table.count_rows() == 0
