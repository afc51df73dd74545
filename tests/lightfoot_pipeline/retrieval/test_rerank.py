"""The cross-encoder reranker (a tiny model built here) and reciprocal rank fusion."""

from __future__ import annotations

import numpy as np
import pytest

from lightfoot_pipeline.retrieval.rerank import (
    CrossEncoderReranker,
    RerankerUnavailable,
    load_reranker,
    ranking_from_scores,
    reciprocal_rank_fusion,
)


def test_rrf_scores_are_the_sum_of_reciprocal_ranks():
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "a", "b"]], k=60)
    expected = {"a": 1 / 61 + 1 / 62, "b": 1 / 62 + 1 / 63, "c": 1 / 63 + 1 / 61}
    assert [item for item, _ in fused] == ["a", "c", "b"]
    for item, score in fused:
        assert score == pytest.approx(expected[item])


def test_rrf_breaks_ties_by_the_first_ranking_and_counts_missing_items_as_absent():
    # a and b swap places: equal scores, so the first ranking's order decides.
    assert [i for i, _ in reciprocal_rank_fusion([["a", "b"], ["b", "a"]])] == ["a", "b"]
    fused = dict(reciprocal_rank_fusion([["a", "b"], ["c"]], k=0))
    assert fused == {"a": 1.0, "b": 0.5, "c": 1.0}
    with pytest.raises(ValueError, match="twice"):
        reciprocal_rank_fusion([["a", "a"]])
    with pytest.raises(ValueError, match="negative"):
        reciprocal_rank_fusion([["a"]], k=-1)


def test_a_strong_second_opinion_moves_an_item_up_but_not_past_a_consensus():
    pagerank = [f"p{i}" for i in range(30)]
    reranker = ["p29", *pagerank[:29]]  # the reranker loves the last PageRank passage
    order = [i for i, _ in reciprocal_rank_fusion([pagerank, reranker])]
    assert order.index("p29") < 29
    assert order[0] == "p0"  # ranked 1st and 2nd beats ranked 30th and 1st


def test_ranking_from_scores_is_stable():
    assert ranking_from_scores(["a", "b", "c", "d"], np.array([0.1, 0.5, 0.5, 0.9])) == ["d", "b", "c", "a"]


@pytest.mark.slow
def test_a_tiny_cross_encoder_loads_through_sentence_transformers_and_scores_pairs(tmp_path, tiny_cross_encoder):
    import torch

    model, tokenizer = tiny_cross_encoder(tmp_path / "tiny-reranker")
    reranker = CrossEncoderReranker(str(tmp_path / "tiny-reranker"))
    assert reranker.model_id == "tiny-reranker"
    question = "who founded the company that makes the zephyr phone"
    passages = ["orbital corp was founded by mira kalden in tallinn", "riga capital of latvia",
                "zephyr phone handset made by orbital corp", ""]
    scores = reranker.score(question, passages)
    assert scores.shape == (4,) and scores.dtype == np.float32
    # The same pairs through the plain model: a CrossEncoder with one label applies a sigmoid.
    with torch.no_grad():
        features = tokenizer([question] * 4, passages, padding=True, truncation=True, return_tensors="pt")
        logits = model(**features).logits.reshape(-1).numpy()
    np.testing.assert_allclose(scores, 1 / (1 + np.exp(-logits)), atol=1e-5)
    assert reranker.score(question, []).shape == (0,)


@pytest.mark.slow
def test_load_reranker_reports_why_there_is_none(tmp_path, monkeypatch, tiny_cross_encoder):
    monkeypatch.delenv("LIGHTFOOT_RERANKER", raising=False)
    reranker, status = load_reranker(str(tmp_path / "no-such-model"))
    assert reranker is None and status.state == "unavailable" and "no-such-model" in status.reason
    reranker, status = load_reranker("none")
    assert reranker is None and status.state == "disabled"
    tiny_cross_encoder(tmp_path / "two-labels", num_labels=2)
    reranker, status = load_reranker(str(tmp_path / "two-labels"))
    assert reranker is None and "2 output labels" in status.reason
    tiny_cross_encoder(tmp_path / "configured")
    monkeypatch.setenv("LIGHTFOOT_RERANKER", str(tmp_path / "configured"))
    reranker, status = load_reranker()
    assert reranker is not None and status.available and status.model == "configured"
    with pytest.raises(RerankerUnavailable):
        CrossEncoderReranker(str(tmp_path / "two-labels"))
