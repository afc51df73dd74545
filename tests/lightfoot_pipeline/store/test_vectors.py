"""The vector caches: one vector per (model, text), kept across writers."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from lightfoot_pipeline.store import vectors
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.vectors import VectorCache, cache_table_name, text_key


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


def test_each_embedding_pass_is_reported_from_its_start(tmp_path, hashing_embedder):
    heard: list[tuple[int, int]] = []
    cache = VectorCache(Store(str(tmp_path / "store")), "name", hashing_embedder, progress=lambda d, t: heard.append((d, t)))
    texts = [f"name {i}" for i in range(1300)]
    cache.vectors(texts)
    assert heard == [(0, 1300), (512, 1300), (1024, 1300), (1300, 1300)]
    heard.clear()
    cache.vectors([*texts[:10], "one more"])
    assert heard == [(0, 1), (1, 1)]  # only what the cache lacks is a pass


def test_texts_of_like_length_share_a_chunk_and_each_gets_its_own_vector(tmp_path, hashing_embedder):
    """Chunks in arrival order would mix lengths, and so part-fill a batch of nearly every length
    bucket of a fixed-shape embedder; ordered by length, each chunk holds one kind of text."""
    calls: list[list[str]] = []

    class Recording:
        dim, model_id = hashing_embedder.dim, hashing_embedder.model_id

        def embed(self, texts):
            calls.append(list(texts))
            return hashing_embedder.embed(texts)

    short, long = [f"n{i}" for i in range(512)], [f"a much longer text, number {i}, of many words" for i in range(512)]
    texts = [text for pair in zip(short, long, strict=True) for text in pair]
    vectors = VectorCache(Store(str(tmp_path / "store")), "name", Recording()).vectors(texts)

    assert sorted(map(sorted, calls)) == sorted([sorted(long), sorted(short)])
    np.testing.assert_array_equal(vectors, hashing_embedder.embed(texts))


def test_an_embedder_with_chunks_of_its_own_is_given_those_chunks(tmp_path, hashing_embedder):
    """A fixed-shape embedder plans a pass (texts grouped by length bucket): the cache embeds
    exactly its chunks, in its order, and reports each one done."""
    calls: list[list[str]] = []

    class Planning:
        dim, model_id = hashing_embedder.dim, hashing_embedder.model_id

        def chunks(self, texts):  # odd indices first, then even ones, three at a time
            order = [*range(1, len(texts), 2), *range(0, len(texts), 2)]
            return [order[start : start + 3] for start in range(0, len(order), 3)]

        def embed(self, texts):
            calls.append(list(texts))
            return hashing_embedder.embed(texts)

    texts = [f"text {i}" for i in range(8)]
    heard: list[tuple[int, int]] = []
    vectors = VectorCache(Store(str(tmp_path / "store")), "name", Planning(),
                          progress=lambda d, t: heard.append((d, t))).vectors(texts)

    assert calls == [["text 1", "text 3", "text 5"], ["text 7", "text 0", "text 2"], ["text 4", "text 6"]]
    assert heard == [(0, 8), (3, 8), (6, 8), (8, 8)]
    np.testing.assert_array_equal(vectors, hashing_embedder.embed(texts))


def test_chunks_that_miss_a_text_are_refused_before_anything_is_stored(tmp_path, hashing_embedder):
    class Skipping:
        dim, model_id = hashing_embedder.dim, hashing_embedder.model_id

        def chunks(self, texts):
            return [list(range(1, len(texts)))]

        def embed(self, texts):
            return hashing_embedder.embed(texts)

    store = Store(str(tmp_path / "store"))
    with pytest.raises(ValueError, match="exactly once"):
        VectorCache(store, "name", Skipping()).vectors(["alpha", "beta", "gamma"])
    assert VectorCache(store, "name", hashing_embedder).stored_vectors(["alpha", "beta", "gamma"]) == [None] * 3


def test_an_ingest_reports_the_names_it_embeds(tmp_path, hashing_embedder):
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.ingest.dataset import Document
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor

    documents = [Document(doc_id=f"d{i}", title=f"T{i}", text=f"Alpha {i} met Beta {i}.") for i in range(30)]
    records = {d.doc_id: {"doc_id": d.doc_id, "entities": [{"name": f"Alpha {i}", "type": "person"},
                                                           {"name": f"Beta {i}", "type": "person"}], "facts": []}
               for i, d in enumerate(documents)}
    heard: list[tuple[int, int]] = []
    report = operations.ingest(Store(str(tmp_path / "store")), documents, ReplayExtractor(records), hashing_embedder,
                             embed_progress=lambda d, t: heard.append((d, t)))
    passes = [total for done, total in heard if done == 0]
    assert sum(passes) == report.graph.vectors_computed == 60
    assert heard[-1] == (passes[-1], passes[-1])


def test_an_append_by_the_only_writer_does_not_read_the_keys_again(tmp_path, hashing_embedder):
    """The key column grows with the cache, an append with the change: once the column is read,
    appending this writer's vectors extends it instead of reading it again."""
    cache = VectorCache(Store(str(tmp_path / "store")), "name", hashing_embedder)
    cache.vectors(["alpha", "beta"])  # creates the table
    reads = cache.key_reads
    cache.vectors(["gamma", "alpha", "delta"])
    assert cache.key_reads == reads  # the lookup finds the column as the last append left it
    assert cache.computed == 4
    table = cache._table(create=False)
    assert sorted(cache._key_column(table).to_pylist()) == sorted(table.to_arrow().column("key").to_pylist())
    assert cache.key_reads == reads


def test_an_append_after_another_writers_reads_the_keys_and_finds_its_own(tmp_path, hashing_embedder):
    store = Store(str(tmp_path / "store"))
    mine = VectorCache(store, "name", hashing_embedder)
    mine.vectors(["alpha"])
    other = VectorCache(Store(store.uri), "name", hashing_embedder)
    mine._stored({"x"})  # this writer's key column, at the current version
    reads = mine.key_reads
    other.vectors(["beta"])  # a commit this writer has not seen
    mine.vectors(["gamma"])
    assert mine.key_reads > reads
    fresh = VectorCache(Store(store.uri), "name", hashing_embedder)
    assert [v is not None for v in fresh.stored_vectors(["alpha", "beta", "gamma"])] == [True, True, True]
    assert sorted(mine._key_column(mine._table(create=False)).to_pylist()) == \
        sorted(fresh._key_column(fresh._table(create=False)).to_pylist())


def test_keys_are_hashed_a_chunk_of_rows_at_a_time_as_each_row_makes_its_text(monkeypatch):
    frame = pl.DataFrame({"title": ["T", None, ""] * 3, "text": [f"text {i}" for i in range(9)]})
    monkeypatch.setattr(vectors, "KEY_CHUNK", 4)
    keys = vectors.keys_of(frame, lambda title, text: f"{title}\n{text}" if title else text)
    assert keys.to_pylist() == [text_key(f"{t}\n{x}" if t else x) for t, x in frame.iter_rows()]
    assert vectors.keys_of(frame.clear(), lambda title, text: text).to_pylist() == []


def test_a_purge_keeps_the_live_keys_reads_no_vector_and_deletes_the_rest_a_bounded_number_at_a_time(
        tmp_path, hashing_embedder, monkeypatch):
    store = Store(str(tmp_path / "store"))
    names = [f"name {i}" for i in range(23)]
    VectorCache(store, "name", hashing_embedder).vectors(names)
    VectorCache(store, "fact", hashing_embedder).vectors(["a fact"])
    name_table = store.lance().open_table(cache_table_name("name", hashing_embedder.model_id))
    # a row no writer here makes: its key is quoted in the delete's predicate, not spliced into it
    name_table.add(pa.table({"key": ["it's not hex"], "vector": [np.zeros(hashing_embedder.dim, np.float32)]},
                            schema=name_table.schema))
    version = name_table.version
    monkeypatch.setattr(vectors, "KEYS_PER_PREDICATE", 4)

    def no_vectors(*args, **kwargs):
        raise AssertionError("a purge read the vectors")

    monkeypatch.setattr(type(name_table), "to_arrow", no_vectors)
    live = names[::3]
    purged = vectors.purge_vector_caches(store, {"name": vectors.keys_of(pl.DataFrame({"n": live}), lambda n: n)})
    monkeypatch.undo()

    assert purged == {cache_table_name("name", hashing_embedder.model_id): 16,
                      cache_table_name("fact", hashing_embedder.model_id): 1}
    name_table = store.lance().open_table(cache_table_name("name", hashing_embedder.model_id))
    assert sorted(name_table.to_arrow().column("key").to_pylist()) == sorted(text_key(n) for n in live)
    assert name_table.version - version == 4  # 16 stale keys, 4 to a delete
    # a kind without live texts is emptied; the kept vectors are those the cache computed
    assert store.lance().open_table(cache_table_name("fact", hashing_embedder.model_id)).count_rows() == 0
    again = VectorCache(Store(store.uri), "name", hashing_embedder)
    np.testing.assert_array_equal(again.vectors(live), hashing_embedder.embed(live))
    assert again.computed == 0


def test_a_lookup_whose_offsets_a_change_moved_reads_the_rows_of_its_keys_not_the_table(
        tmp_path, hashing_embedder, monkeypatch):
    """The key column is read once per table version and the vectors are taken by offset; a
    table that changed between the two reads is looked up by key, a bounded number to a query."""
    store = Store(str(tmp_path / "store"))
    texts = [f"name {i}" for i in range(9)]
    cache = VectorCache(store, "name", hashing_embedder)
    cache.vectors(texts)
    table = cache._table(create=False)
    moved = pa.chunked_array([list(reversed(cache._key_column(table).to_pylist()))])  # offsets that point elsewhere
    monkeypatch.setattr(cache, "_key_column", lambda table: moved)
    monkeypatch.setattr(vectors, "KEYS_PER_PREDICATE", 2)

    def no_whole_read(*args, **kwargs):
        raise AssertionError("the lookup read the whole table")

    monkeypatch.setattr(type(table), "to_arrow", no_whole_read)
    wanted = texts[1:6]
    found = cache._stored({text_key(t) for t in wanted})
    monkeypatch.undo()
    assert sorted(found) == sorted(text_key(t) for t in wanted)
    np.testing.assert_array_equal(np.stack([found[text_key(t)] for t in wanted]), hashing_embedder.embed(wanted))
