"""The hgmem mode in an evaluation: both modes on the same questions, scored, charged, kept (ids
only unless traces are asked for), reported with EM/F1, cost and paired intervals, and priced by
a dry run."""

from __future__ import annotations

import json

import pytest

from lightfoot_pipeline.evaluation.evaluate import AnswerOptions, plan_evaluation, run_evaluation
from lightfoot_pipeline.evaluation.harness import HarnessError
from lightfoot_pipeline.evaluation.metrics import recall_at_k
from lightfoot_pipeline.evaluation.report import write_report
from lightfoot_pipeline.evaluation.runs import load_run
from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.retrieval.answer import Answerer
from lightfoot_pipeline.retrieval.deep.prompts import ANSWER_SYSTEM, CHECK_SYSTEM, MEMORY_SYSTEM
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.store import Store

INSERT = {"operations": [{"op": "insert", "point": "", "points": [], "description": "what the first passage says",
                          "entities": ["E1"], "facts": ["F1"], "passages": ["P1", "P2"]}]}
SUFFICIENT = {"sufficient": True, "reason": "enough", "subqueries": []}


@pytest.fixture(scope="module")
def deep_store(tmp_path_factory):
    return Store(str(tmp_path_factory.mktemp("deep-eval") / "store"))


def answerer_for(chat_server) -> Answerer:
    return Answerer(LLMClient(LLMSettings(base_url=chat_server.base_url, model="gpt-4o-mini", max_retries=0,
                                          concurrency=2)))


def scripted(chat_server) -> None:
    def reply(request):
        system = request.messages[0]["content"]
        if system == MEMORY_SYSTEM:
            payload = INSERT
        elif system == ANSWER_SYSTEM:
            payload = {"answer": "Karl Renner", "points": ["M1"]}
        elif system.startswith(CHECK_SYSTEM[:40]):
            payload = SUFFICIENT
        else:  # the one-step answer
            payload = {"answer": "Karl Renner"}
        return chat_server.Reply(content=json.dumps(payload), usage=(1000, 20))

    chat_server.script(reply)


def run(store, dataset, embedder, answers, run_dir=None):
    plan = plan_evaluation(["lightfoot", "hgmem"])
    return run_evaluation(store, dataset, dataset / "questions-dev.jsonl", embedder, plan, answers=answers,
                          run_dir=run_dir, echo=lambda line: None)


@pytest.mark.slow
def test_both_modes_answer_the_same_questions_and_the_report_compares_them(deep_store, small_dataset,
                                                                          hashing_embedder, chat_server, tmp_path):
    scripted(chat_server)
    answers = AnswerOptions(answerer=answerer_for(chat_server), budget_usd=1.0)
    outcome = run(deep_store, small_dataset, hashing_embedder, answers, tmp_path / "run")
    # 8 one-step answers; each deep question: memory, check (sufficient), answer
    assert chat_server.count == 8 + 8 * 3 and outcome.spend.calls == 32
    results = load_run(tmp_path / "run").results
    deep = results.filter(results["mode"] == "hgmem")
    assert deep.height == 8 and set(deep.get_column("answer_status")) == {"answered"}
    assert deep.filter(deep["qid"] == "3hop1__404363_705261_126049").get_column("em").to_list() == [1.0]
    by_mode = {r.mode + r.qid: r for r in outcome.results}
    for row in deep.iter_rows(named=True):
        lightfoot = by_mode["lightfoot" + row["qid"]]
        # the memory rests on the question's first two passages: they lead the deep ranking
        assert row["ranked_chunk_ids"][:2] == lightfoot.ranked_chunk_ids[:2]
        expected = recall_at_k({row["qid"]: row["ranked_doc_ids"]}, {row["qid"]: row["gold_doc_ids"]}, [2, 5, 10])
        assert row["recall@5"] == pytest.approx(float(expected["recall@5"][0]))
        assert row["answer_cost_usd"] == pytest.approx(3 * (1000 * 0.15 + 20 * 0.60) / 1e6)
    charged = ledger.read(deep_store)
    charged = charged.filter(charged["run_id"] == outcome.config["answers"]["ledger_run_id"])
    purposes = charged.get_column("purpose").to_list()
    assert sorted(set(purposes)) == ["answer", "deep-answer", "deep-check", "deep-memory"] and len(purposes) == 32
    kept = json.loads((tmp_path / "run" / "deep.json").read_text())
    assert not kept["traces"] and len(kept["questions"]) == 8
    text = json.dumps(kept)
    assert "what the first passage says" not in text and "Karl Renner" not in text
    assert all(q["points"][0]["chunks"] for q in kept["questions"].values())
    report = write_report(tmp_path / "run").read_text()
    assert "| hgmem | 8 | 8 | 0 | 0 |" in report and "hgmem − lightfoot | EM | 8 |" in report
    assert "hgmem − lightfoot | F1 | 8 |" in report and "`hgmem` ran at most 3 steps" in report
    assert "ids only" in report


@pytest.mark.slow
def test_traces_keep_the_text_of_each_step(deep_store, small_dataset, hashing_embedder, chat_server, tmp_path):
    scripted(chat_server)
    answers = AnswerOptions(answerer=answerer_for(chat_server), budget_usd=1.0, traces=True)
    run(deep_store, small_dataset, hashing_embedder, answers, tmp_path / "run")
    kept = json.loads((tmp_path / "run" / "deep.json").read_text())
    question = next(iter(kept["questions"].values()))
    assert kept["traces"] and question["answer"] == "Karl Renner" and question["question"]
    assert question["memory"][0]["description"] == "what the first passage says"


@pytest.mark.slow
def test_a_dry_run_prices_both_modes_with_no_endpoint(deep_store, small_dataset, hashing_embedder):
    answers = AnswerOptions(answerer=None, dry_run=True)
    outcome = run(deep_store, small_dataset, hashing_embedder, answers)
    assert outcome.dry_run and outcome.spend is None
    assert outcome.estimate.calls == 8 + 8 * 6  # one call each, and at most 2 x 3 steps a deep question
    assert 0 < outcome.estimate.cost_usd < outcome.estimate.cost_usd_max


def test_hgmem_needs_answers(deep_store, small_dataset, hashing_embedder):
    with pytest.raises(HarnessError, match="hgmem calls the model at every step"):
        run(deep_store, small_dataset, hashing_embedder, None)
    assert "hgmem" not in [m.name for m in plan_evaluation().modes]


def test_the_deletion_audit_refuses_hgmem(small_dataset, hashing_embedder):
    from lightfoot_pipeline.evaluation.deletion_eval import run_deletion_audit

    with pytest.raises(HarnessError, match="hgmem calls the model"):
        run_deletion_audit(small_dataset, small_dataset / "questions-dev.jsonl", hashing_embedder,
                           plan_evaluation(["lightfoot", "hgmem"]), run_dir=None)


def test_an_unreachable_endpoint_stops_the_run_at_once_and_what_was_asked_is_charged(
        deep_store, small_dataset, hashing_embedder):
    import socket

    from lightfoot_pipeline.retrieval.deep import DeepQueryError

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    before = ledger.read(deep_store).height
    answerer = Answerer(LLMClient(LLMSettings(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, concurrency=2)))
    plan = plan_evaluation(["hgmem"])
    with pytest.raises(DeepQueryError, match=f"127.0.0.1:{port}"):
        run_evaluation(deep_store, small_dataset, small_dataset / "questions-dev.jsonl", hashing_embedder, plan,
                       answers=AnswerOptions(answerer=answerer, budget_usd=1.0), echo=lambda line: None)
    charged = ledger.read(deep_store).height - before
    assert 1 <= charged <= 2  # the questions in flight when it failed, one call each; none after
