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
