"""The harness: every mode side by side on one snapshot; answers under a budget, scored by EM/F1."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lightfoot_pipeline.evaluation.harness import (
    HarnessError,
    answer_messages,
    answer_rows,
    estimate_answer_cost,
    run_questions,
    select_modes,
)
from lightfoot_pipeline.evaluation.metrics import exact_match, token_f1
from lightfoot_pipeline.evaluation.modes import DENSE, HIPPORAG2, LIGHTFOOT, LIGHTFOOT_RERANK, standard_modes
from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.retrieval.answer import Answerer
from lightfoot_pipeline.retrieval.retrieve import Retriever


class Reversed:
    """A reranker that prefers whatever PageRank ranked last."""

    model_id = "reversed"

    def score(self, question, passages):
        return list(range(len(passages)))


@pytest.fixture(scope="module")
def results(small_index, small_questions, hashing_embedder):
    _, snapshot = small_index
    return run_questions(snapshot, hashing_embedder, small_questions, standard_modes(False))


def test_the_standard_modes_and_the_baseline_settings(small_index):
    _, snapshot = small_index
    assert [m.name for m in standard_modes(False)] == [DENSE, LIGHTFOOT, HIPPORAG2]
    assert [m.name for m in standard_modes(True)] == [DENSE, LIGHTFOOT, LIGHTFOOT_RERANK, HIPPORAG2]
    modes = {m.name: m for m in standard_modes(True)}
    hippo = modes[HIPPORAG2].settings_for(snapshot)
    assert (hippo.damping, hippo.top_facts, hippo.passage_seed_weight) == (0.5, 5, 0.05)
    assert hippo.seed_passages == snapshot.passages.height
    assert not modes[HIPPORAG2].rerank and modes[LIGHTFOOT_RERANK].rerank
    lightfoot = modes[LIGHTFOOT].settings_for(snapshot)
    assert (lightfoot.damping, lightfoot.top_facts, lightfoot.seed_passages) == (0.9, 2, 100)
    with pytest.raises(HarnessError, match="unknown or unavailable"):
        select_modes(standard_modes(False), [LIGHTFOOT_RERANK])


def test_the_hipporag2_baseline_seeds_every_passage(small_index, small_questions, hashing_embedder):
    _, snapshot = small_index
    mode = {m.name: m for m in standard_modes(False)}[HIPPORAG2]
    retriever = Retriever(snapshot, hashing_embedder, settings=mode.settings_for(snapshot))
    vector = retriever.question_vector(small_questions[0].question)
    dense = retriever.dense_scores(vector)
    seeds = retriever.seeds(dense, retriever.similar_facts(vector, 5))
    passage_seeds = seeds[snapshot.n_entities:]
    # min-max scaling gives the least similar passage 0; every other passage gets a share ≤ 0.05
    assert np.count_nonzero(passage_seeds) == snapshot.passages.height - np.count_nonzero(dense == dense.min())
    assert passage_seeds.max() == pytest.approx(0.05)


def test_every_mode_answers_every_question_with_gold(results, small_questions):
    with_gold = [q.qid for q in small_questions if q.gold_doc_ids]
    assert "no-gold" not in {r.qid for r in results}
    for mode in (DENSE, LIGHTFOOT, HIPPORAG2):
        mine = [r for r in results if r.mode == mode]
        assert [r.qid for r in mine] == with_gold
        for r in mine:
            assert set(r.recall) == {"recall@2", "recall@5", "recall@10"}
            assert len(r.ranked_chunk_ids) == 30 and len(set(r.ranked_doc_ids)) == len(r.ranked_doc_ids)
            assert r.recall["recall@2"] <= r.recall["recall@5"] <= r.recall["recall@10"]
    assert {r.order for r in results if r.mode == DENSE} == {"dense"}
    assert {r.order for r in results if r.mode != DENSE} == {"pagerank"}


def test_the_rankings_are_the_retrievers_and_recall_counts_distinct_gold_documents(
        small_index, small_questions, hashing_embedder, results):
    _, snapshot = small_index
    retriever = Retriever(snapshot, hashing_embedder)
    chunk_ids = snapshot.passages.get_column("chunk_id").to_list()
    by_qid = {q.qid: q for q in small_questions}
    for r in results:
        question = by_qid[r.qid].question
        if r.mode == DENSE:
            scores = retriever.dense_scores(hashing_embedder.embed_query(question))  # (#passages,)
            expected = [chunk_ids[i] for i in np.argsort(-scores, kind="stable")[:30]]
        elif r.mode == LIGHTFOOT:
            expected = [p.chunk_id for p in retriever.retrieve(question).passages]
        else:
            continue
        assert r.ranked_chunk_ids == expected
        for k in (2, 5, 10):
            top = r.ranked_doc_ids[:k]
            assert r.recall[f"recall@{k}"] == len(set(r.gold_doc_ids) & set(top)) / len(set(r.gold_doc_ids))


def test_the_reranked_mode_reorders_lightfoot_and_leaves_the_others_alone(small_index, small_questions,
                                                                         hashing_embedder, results):
    _, snapshot = small_index
    with pytest.raises(HarnessError, match="needs a cross-encoder"):
        run_questions(snapshot, hashing_embedder, small_questions, standard_modes(True))
    reranked = run_questions(snapshot, hashing_embedder, small_questions, standard_modes(True), reranker=Reversed())
    plain = {(r.mode, r.qid): r.ranked_chunk_ids for r in results}
    for r in reranked:
        if r.mode == LIGHTFOOT_RERANK:
            lightfoot = plain[(LIGHTFOOT, r.qid)]
            assert sorted(r.ranked_chunk_ids) == sorted(lightfoot) and r.ranked_chunk_ids != lightfoot
        else:
            assert r.ranked_chunk_ids == plain[(r.mode, r.qid)]


# -- answers ------------------------------------------------------------------------------------


def answerer_for(chat_server, **overrides) -> Answerer:
    settings = LLMSettings(base_url=chat_server.base_url, model="gpt-4o-mini", max_retries=0, concurrency=1,
                           **overrides)
    return Answerer(LLMClient(settings))


def question_of(request) -> str:
    return request.user_text.rsplit("Question:", 1)[1].strip()


def test_answers_are_scored_by_em_and_f1(chat_server, results, small_questions):
    by_question = {q.question: q for q in small_questions}
    replies = {}
    for i, q in enumerate(small_questions[:8]):
        # even questions: the gold answer, dressed up (the normalisation must see through it);
        # odd ones: a partly right answer
        replies[q.question] = f"The {q.answer}." if i % 2 == 0 else f"{q.answer.split()[0]} something"
    chat_server.script(lambda request: chat_server.Reply(content=json.dumps({"answer": replies[question_of(request)]})))
    chosen = [r for r in results if r.mode == LIGHTFOOT]
    spend = answer_rows(chosen, answerer_for(chat_server), budget_usd=None)
    assert chat_server.count == len(chosen) == spend.calls
    for r in chosen:
        row = r.row()
        q = by_question[r.question]
        golds = [q.answer, *q.answer_aliases]
        assert row["answer_status"] == "answered"
        assert row["prediction"] == replies[q.question]
        assert row["em"] == exact_match(replies[q.question], golds)
        assert row["f1"] == pytest.approx(token_f1(replies[q.question], golds))
    ems = [r.row()["em"] for r in chosen]
    assert ems == [1.0 if i % 2 == 0 else 0.0 for i in range(len(chosen))]


def test_the_prompt_gives_lightfoot_its_facts_and_every_mode_ten_passages(results):
    lightfoot = next(r for r in results if r.mode == LIGHTFOOT)
    dense = next(r for r in results if r.mode == DENSE)
    user = answer_messages(lightfoot)[1]["content"]
    assert "10. (" in user and "[10]" in user and "[11]" not in user
    dense_user = answer_messages(dense)[1]["content"]
    assert "Facts (subject; predicate; object), most relevant first:\n(none)" in dense_user
    assert "[10]" in dense_user and dense_user.endswith(f"Question: {dense.question}")


def test_the_budget_cap_stops_the_calls_before_the_spend_passes_it(chat_server, results):
    chat_server.script(lambda request: chat_server.Reply(content='{"answer": "x"}', usage=(1000, 5)))
    answerer = answerer_for(chat_server, price_in_per_mtok=100.0, price_out_per_mtok=400.0)
    chosen = [r for r in results if r.mode == HIPPORAG2]
    worst = [answerer.worst_case_usd(answerer.messages(r.question, r.facts, r.hits)) for r in chosen]
    actual = (1000 * 100.0 + 5 * 400.0) / 1e6
    # room for the first three calls' worst cases, not a fourth's
    budget = 2 * actual + worst[2] + 1e-9
    assert 3 * actual + worst[3] > budget
    spend = answer_rows(chosen, answerer, budget_usd=budget)
    assert chat_server.count == spend.calls == 3
    assert spend.skipped == len(chosen) - 3 and spend.stopped_by_budget
    assert spend.cost_usd == pytest.approx(3 * actual) and spend.cost_usd <= budget
    statuses = [r.answer_status for r in chosen]
    assert statuses[:3] == ["answered"] * 3
    assert all(s.startswith("skipped: the budget cap") for s in statuses[3:])
    assert all(r.row()["em"] is None for r in chosen[3:])


def test_a_failed_call_is_recorded_with_its_reason(chat_server, results):
    chat_server.queue(chat_server.Reply(status=401), then=chat_server.Reply(content='{"answer": "Karl Renner"}'))
    chosen = [r for r in results if r.mode == DENSE][:3]
    spend = answer_rows(chosen, answerer_for(chat_server), budget_usd=5.0)
    assert spend.failed == 1 and spend.calls == 3
    first = chosen[0].row()
    assert first["answer_status"].startswith("failed: auth") and first["em"] is None
    assert chosen[1].row()["answer_status"] == "answered"


def test_the_estimate_counts_prompt_characters_and_prices(results):
    chosen = [r for r in results if r.mode == LIGHTFOOT]
    estimate = estimate_answer_cost(chosen, "gpt-4o-mini", (0.15, 0.60, "list"), max_tokens=200)
    chars = [sum(len(m["content"]) for m in answer_messages(r)) for r in chosen]
    assert estimate.calls == len(chosen)
    assert estimate.tokens_in == sum(math.ceil(c / 4) for c in chars)
    assert estimate.tokens_out_max == 200 * len(chosen)
    assert estimate.cost_usd == pytest.approx((estimate.tokens_in * 0.15 + estimate.tokens_out_typical * 0.60) / 1e6,
                                              abs=1e-6)
    assert estimate.cost_usd < estimate.cost_usd_max
    assert f"{len(chosen)} answer calls to gpt-4o-mini" in estimate.line()
