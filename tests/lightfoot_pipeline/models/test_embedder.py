import numpy as np
import pytest

from lightfoot_pipeline.models.embedder import HashingEmbedder, load_embedder


def test_hashing_embedder_is_deterministic_and_unit_length():
    emb = HashingEmbedder(dim=48)
    a = emb.embed(["jan philip solovej", "university of copenhagen"])
    b = HashingEmbedder(dim=48).embed(["university of copenhagen", "jan philip solovej"])
    assert np.array_equal(a[0], b[1]) and np.allclose(np.linalg.norm(a, axis=1), 1.0)
    base, near, far = emb.embed(["hot country songs", "hot country songs chart", "carl rogers"])
    assert float(base @ near) > 0.7 > float(base @ far)


def test_a_question_is_embedded_as_its_row_of_a_batch():
    emb = HashingEmbedder(dim=48)
    texts = ["who founded the university of copenhagen", "hot country songs", ""]
    batch = emb.embed(texts)
    for text, row in zip(texts, batch, strict=True):
        vector = emb.embed_query(text)
        assert vector.shape == (48,) and vector.dtype == np.float32
        assert vector.tobytes() == row.tobytes()


def test_load_embedder_by_name():
    assert load_embedder("hashing:16").dim == 16


@pytest.mark.minilm
def test_minilm_vector_does_not_depend_on_its_batch(minilm):
    """Fixed-shape batches: a name's vector is the same bits alone, first, last, or among others."""
    # 300 short names fill more than one batch, so the name lands in the second batch's last rows.
    names = [f"name number {i}" for i in range(300)] + ["jan philip solovej"]
    together = minilm.embed(names)
    alone = minilm.embed(["jan philip solovej"])
    first = minilm.embed(["jan philip solovej", "carl rogers", "a much longer name that falls into another bucket"])
    assert together[-1].tobytes() == alone[0].tobytes() == first[0].tobytes()
    assert minilm.dim == 384 and abs(float(np.linalg.norm(alone[0])) - 1.0) < 1e-5
    assert "all-MiniLM-L6-v2@" in minilm.model_id


@pytest.mark.minilm
def test_a_pass_is_chunked_by_length_bucket_in_whole_batches(minilm):
    """Each chunk holds texts of one bucket and whole batches, but for its bucket's last, so a pass
    fills every batch but one per bucket; every text is in exactly one chunk."""
    texts = [("word " * (i % 40)).strip() or "x" for i in range(3000)]
    buckets = minilm.buckets_of(texts)
    chunks = minilm.chunks(texts)

    assert sorted(i for chunk in chunks for i in chunk) == list(range(len(texts)))
    last_of_bucket = {buckets[chunk[0]]: n for n, chunk in enumerate(chunks)}
    for n, chunk in enumerate(chunks):
        bucket = buckets[chunk[0]]
        assert {buckets[i] for i in chunk} == {bucket}
        if last_of_bucket[bucket] != n:
            assert len(chunk) % minilm.rows_per_batch(bucket) == 0
    assert len(last_of_bucket) >= 4  # the texts span several buckets
    # A name of six tokens pads to 8, not to 16 as buckets in powers of two would.
    assert minilm.buckets_of(["jan philip solovej"]) == [8] and minilm.model_id.endswith("-t1024-h")


@pytest.mark.minilm
def test_a_recorded_id_loads_the_geometry_it_names(minilm):
    """A store built before the half-step buckets recorded ``…-t4096`` (buckets in powers of two):
    loading that id gives the same vectors as that geometry, and an id of other weights is refused."""
    from lightfoot_pipeline.models.embedder import EmbedderUnavailable, SentenceTransformerEmbedder
    from lightfoot_pipeline.snapshot.format import embedder_for_models

    recorded = f"all-MiniLM-L6-v2@{minilm.weights}-t4096"
    legacy = load_embedder(recorded)
    assert legacy.model_id == recorded and legacy.buckets == (16, 32, 64, 128, 256)
    texts = ["jan philip solovej", "the university of copenhagen was founded in 1479"]
    older = SentenceTransformerEmbedder(batch_tokens=4096, buckets="")
    assert legacy.embed(texts).tobytes() == older.embed(texts).tobytes()
    assert load_embedder(minilm.model_id).embed(texts).tobytes() == minilm.embed(texts).tobytes()
    assert embedder_for_models({"embedder": recorded, "dim": 384}).model_id == recorded

    with pytest.raises(EmbedderUnavailable, match="other weights"):
        load_embedder("all-MiniLM-L6-v2@0123456789ab-t1024-h")
    assert embedder_for_models({"embedder": "all-MiniLM-L6-v2@0123456789ab-t1024-h", "dim": 384}) is None


def test_an_unknown_geometry_is_refused():
    from lightfoot_pipeline.models.embedder import SentenceTransformerEmbedder

    with pytest.raises(ValueError, match="unknown length buckets"):
        SentenceTransformerEmbedder(buckets="-q")
    with pytest.raises(ValueError, match="batch_tokens"):
        SentenceTransformerEmbedder(batch_tokens=0)


@pytest.mark.minilm
def test_minilm_embeds_a_question_alone_as_in_a_batch(minilm):
    """The single-text path runs the question unpadded; the pooled vector matches its batch row."""
    question = "Who founded the university where Jan Philip Solovej works?"
    alone, batched = minilm.embed_query(question), minilm.embed([question])[0]
    assert alone.shape == (minilm.dim,) and abs(float(np.linalg.norm(alone)) - 1.0) < 1e-5
    assert float(alone @ batched) > 0.9999


@pytest.mark.slow
def test_missing_model_is_an_explicit_error(tmp_path):
    from lightfoot_pipeline.models.embedder import EmbedderUnavailable, SentenceTransformerEmbedder

    with pytest.raises(EmbedderUnavailable, match="cannot load embedding model"):
        SentenceTransformerEmbedder("no-such-org/no-such-model")
