"""Metrics: SQuAD answer normalisation, EM and token F1, recall@k, the paired bootstrap."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from lightfoot_pipeline.evaluation.metrics import (
    exact_match,
    normalize_answer,
    paired_bootstrap,
    recall_at_k,
    token_f1,
)


def recall_by_definition(ranked: list[str], gold: list[str], k: int) -> float:
    """The gold documents among the first k distinct documents of the ranking, as a fraction."""
    top: list[str] = []
    for doc in ranked:
        if doc not in top:
            top.append(doc)
    return len(set(gold) & set(top[:k])) / len(set(gold))


@pytest.mark.parametrize("text, expected", [
    ("The  Anglican Communion!", "anglican communion"),
    ("An apple a day", "apple day"),
    ("theatre of the absurd", "theatre of absurd"),  # articles only as whole words
    ("U.S.A.", "usa"),
    ("  Karl\tRenner\n", "karl renner"),
    ("6.8 inches", "68 inches"),
    ("Land-grant University", "landgrant university"),
    ("the", ""),
])
def test_squad_normalisation(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_uses_the_normalisation_and_the_aliases():
    assert exact_match("the Anglican Communion", ["Anglican Communion"]) == 1.0
    assert exact_match("ANGLICAN communion.", ["the Anglican Communion"]) == 1.0
    assert exact_match("Stanley Hall", ["G. Stanley Hall", "Stanley Hall"]) == 1.0
    assert exact_match("Stanley Hall", ["G. Stanley Hall"]) == 0.0
    assert exact_match(None, ["anything"]) == 0.0
    assert exact_match("35", ["35"]) == 1.0 and exact_match("35.", ["3.5"]) == 1.0  # punctuation goes


def test_token_f1_cases():
    # 2 common tokens; precision 2/2, recall 2/3
    assert token_f1("Stanley Hall", ["G. Stanley Hall"]) == pytest.approx(0.8)
    # repeated tokens count once per occurrence in both: common 1, precision 1/2, recall 1
    assert token_f1("hall hall", ["hall"]) == pytest.approx(2 / 3)
    # the best alias wins
    assert token_f1("Stanley Hall", ["Wilhelm Wundt", "Stanley Hall"]) == 1.0
    assert token_f1("Victoria", ["Victoria Falls"]) == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert token_f1("Zambezi", ["Victoria Falls"]) == 0.0
    assert token_f1(None, ["Victoria Falls"]) == 0.0
    # both sides empty after normalisation agree exactly; one empty side has no overlap
    assert token_f1("the", ["a"]) == 1.0
    assert token_f1("the", ["Falls"]) == 0.0


def test_answers_need_a_gold_answer():
    with pytest.raises(ValueError, match="gold answer"):
        exact_match("x", [])
    with pytest.raises(ValueError, match="gold answer"):
        token_f1("x", [])


def test_recall_counts_distinct_documents_in_order():
    ranked = ["a", "a", "x", "b", "y", "c"]
    scores = recall_at_k({"q": ranked, "r": ranked}, {"q": ["a", "b"], "r": ["c", "z"]}, [2, 3, 10])
    assert scores["recall@2"].tolist() == [0.5, 0.0]  # the repeated "a" is one document
    assert scores["recall@3"].tolist() == [1.0, 0.0]
    assert scores["recall@10"].tolist() == [1.0, 0.5]


def test_recall_matches_the_definition_on_random_rankings():
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(40)]
    rankings, gold = {}, {}
    for q in range(150):
        gold[f"q{q}"] = rng.sample(docs, rng.randint(1, 4))
        # passages of one document may repeat in a ranking: the document counts once, at its best rank
        rankings[f"q{q}"] = [rng.choice(docs) for _ in range(rng.randint(0, 25))]
    scores = recall_at_k(rankings, gold, [1, 2, 5, 10])
    for metric, k in (("recall@1", 1), ("recall@2", 2), ("recall@5", 5), ("recall@10", 10)):
        expected = [recall_by_definition(rankings[q], gold[q], k) for q in gold]
        np.testing.assert_allclose(scores[metric], expected)


def test_recall_keeps_the_order_of_the_gold_mapping_and_scores_empty_rankings_zero():
    scores = recall_at_k({"b": ["x", "y"], "a": []}, {"b": ["y"], "a": ["x"]}, [1, 2])
    assert scores["recall@1"].tolist() == [0.0, 0.0]
    assert scores["recall@2"].tolist() == [1.0, 0.0]


def test_recall_refuses_what_it_cannot_score():
    with pytest.raises(ValueError, match="no gold documents"):
        recall_at_k({"q": ["d"]}, {"q": []}, [2])
    with pytest.raises(ValueError, match="no ranking"):
        recall_at_k({}, {"q": ["d"]}, [2])
    with pytest.raises(ValueError, match="positive"):
        recall_at_k({"q": ["d"]}, {"q": ["d"]}, [0])


# -- the bootstrap on inputs whose answer is known ---------------------------------------------


def test_a_constant_difference_has_a_zero_width_interval():
    b = np.random.default_rng(1).random(60)
    result = paired_bootstrap(b + 0.25, b)
    assert result.difference == pytest.approx(0.25)
    assert result.low == pytest.approx(0.25) and result.high == pytest.approx(0.25)
    assert result.significant


def test_identical_systems_differ_by_exactly_zero_and_not_significantly():
    a = np.random.default_rng(2).random(60)
    result = paired_bootstrap(a, a.copy())
    assert (result.difference, result.low, result.high) == (0.0, 0.0, 0.0)
    assert not result.significant


def test_the_interval_of_a_coin_matches_the_normal_approximation():
    # differences are 1 on half the questions and 0 on the rest: mean 0.5, standard error
    # sqrt(0.25 / n); the 95% interval is 0.5 ± 1.96 · 0.025 for n = 400
    n = 400
    a = np.array([1.0, 0.0] * (n // 2))
    b = np.zeros(n)
    result = paired_bootstrap(a, b, resamples=20_000, seed=3)
    half_width = 1.96 * math.sqrt(0.25 / n)
    assert result.difference == pytest.approx(0.5)
    assert result.low == pytest.approx(0.5 - half_width, abs=0.006)
    assert result.high == pytest.approx(0.5 + half_width, abs=0.006)
    assert result.significant


def test_pairing_matters_a_shared_question_effect_cancels():
    # a and b vary a lot from question to question but a is always b + 0.05: paired, the
    # difference is certain; the same means unpaired would be lost in the spread
    b = np.random.default_rng(4).random(30)
    result = paired_bootstrap(b + 0.05, b)
    assert result.low == pytest.approx(0.05) and result.significant


def test_symmetric_differences_are_not_significant():
    a = np.array([1.0, 0.0] * 25)
    b = np.array([0.0, 1.0] * 25)
    result = paired_bootstrap(a, b, seed=5)
    assert result.difference == 0.0
    assert result.low < 0.0 < result.high
    assert not result.significant


def test_the_bootstrap_is_reproducible_and_checks_its_input():
    a, b = np.random.default_rng(6).random((2, 25))
    assert paired_bootstrap(a, b, seed=11) == paired_bootstrap(a, b, seed=11)
    with pytest.raises(ValueError, match="equal lengths"):
        paired_bootstrap([1.0, 0.0], [1.0])
    with pytest.raises(ValueError, match="at least one"):
        paired_bootstrap([], [])
    with pytest.raises(ValueError, match="finite"):
        paired_bootstrap([float("nan")], [0.0])

