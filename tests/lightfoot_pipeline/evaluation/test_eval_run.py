"""An evaluation run end to end on the slice: index, snapshot, modes, answers under a budget, run directory."""

from __future__ import annotations

import pytest

from lightfoot_pipeline import pipeline
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.serving.answer import Answerer
from lightfoot_pipeline.evaluation.eval_run import AnswerOptions, legacy_result, run_evaluation
from lightfoot_pipeline.evaluation.harness import HarnessError
from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.evaluation.report import write_report
from lightfoot_pipeline.evaluation.runs import load_run
from lightfoot_pipeline.store.store import Store


@pytest.fixture(scope="module")
def eval_store(tmp_path_factory):
    return Store(str(tmp_path_factory.mktemp("eval-store") / "store"))


def answerer_for(chat_server, **overrides) -> Answerer:
    return Answerer(LLMClient(LLMSettings(base_url=chat_server.base_url, model="gpt-4o-mini", max_retries=0,
                                          **overrides)))


def evaluate(store, dataset, embedder, **kwargs):
    lines: list[str] = []
    outcome = run_evaluation(store, dataset, dataset / "questions-dev.jsonl", embedder, echo=lines.append, **kwargs)
    return outcome, lines


def test_a_retrieval_run_is_kept_with_its_configuration(eval_store, small_dataset, hashing_embedder, tmp_path):
    outcome, lines = evaluate(eval_store, small_dataset, hashing_embedder, run_dir=tmp_path / "run")
    assert any(line.startswith("built 160 documents") and "with 0 model calls" in line for line in lines)
    run = load_run(tmp_path / "run")
    assert run.modes == ["dense", "lightfoot", "hipporag2"] and run.phases == ["eval"]
    assert run.results.height == 3 * 8
    config = run.config
    assert config["n_questions"] == 8 and config["questions_without_gold"] == 1
    assert config["snapshots"]["eval"]["fingerprint"] == pipeline.fingerprint(eval_store).digest
    assert config["embedder"] == hashing_embedder.model_id
    assert config["modes"]["hipporag2"]["retrieval"]["damping"] == 0.5
    assert config["modes"]["hipporag2"]["retrieval"]["seed_passages"] == 160
    assert config["index_cost"]["extraction_calls"] == 160 and config["index_cost"]["passages"] == 160
    assert config["answers"] is None
    assert run.results.get_column("answer_status").unique().to_list() == ["not asked"]
    # the JSON of `lightfoot eval --out` comes from the same results
    legacy = legacy_result(outcome)
    assert legacy["n_questions"] == 8 and set(legacy["modes"]) == {"dense", "lightfoot", "hipporag2"}
    lightfoot = run.results.filter(run.results["mode"] == "lightfoot")
    assert legacy["modes"]["lightfoot"]["recall@5"] == pytest.approx(lightfoot["recall@5"].mean(), abs=1e-4)


def test_a_dry_run_prices_the_answers_and_calls_nothing(eval_store, small_dataset, hashing_embedder, chat_server,
                                                        tmp_path):
    answers = AnswerOptions(answerer=answerer_for(chat_server), budget_usd=0.5, dry_run=True)
    outcome, lines = evaluate(eval_store, small_dataset, hashing_embedder, answers=answers, run_dir=tmp_path / "run")
    assert outcome.dry_run and chat_server.count == 0
    assert not (tmp_path / "run").exists()
    assert outcome.estimate.calls == 3 * 8 and outcome.estimate.price_source == "list"
    assert lines[-1].startswith("dry run: 24 answer calls to gpt-4o-mini") and lines[-1].endswith("budget $0.5")


def test_an_answer_run_is_scored_charged_and_reported(eval_store, small_dataset, hashing_embedder, chat_server,
                                                      tmp_path):
    chat_server.script(lambda request: chat_server.Reply(content='{"answer": "Karl Renner"}', usage=(900, 8)))
    answers = AnswerOptions(answerer=answerer_for(chat_server, concurrency=4), budget_usd=1.0,
                            modes=["lightfoot", "dense"])
    outcome, _ = evaluate(eval_store, small_dataset, hashing_embedder, answers=answers, run_dir=tmp_path / "run")
    assert chat_server.count == 16 and outcome.spend.calls == 16 and not outcome.spend.stopped_by_budget
    run = load_run(tmp_path / "run")
    asked = run.results.filter(run.results["answer_status"] != "not asked")
    assert sorted(asked.get_column("mode").unique().to_list()) == ["dense", "lightfoot"]
    renner = asked.filter(asked["qid"] == "3hop1__404363_705261_126049")
    assert renner.get_column("em").to_list() == [1.0, 1.0]
    assert asked.get_column("em").sum() == 2.0
    spend = run.config["answers"]["spend"]
    per_call = (900 * 0.15 + 8 * 0.60) / 1e6
    assert spend["cost_usd"] == pytest.approx(16 * per_call)
    charged = ledger.read(eval_store)
    charged = charged.filter(charged["run_id"] == run.config["answers"]["ledger_run_id"])
    assert charged.height == 16 and set(charged.get_column("purpose")) == {"answer"}
    assert charged.get_column("cost_usd").sum() == pytest.approx(16 * per_call)
    text = write_report(tmp_path / "run").read_text()
    assert "| lightfoot | 8 | 8 | 0 | 0 | 0.125 |" in text
    assert "**Cost**: 16 calls to `gpt-4o-mini`" in text and "budget $1" in text


def test_answers_need_an_endpoint_unless_the_run_is_dry(eval_store, small_dataset, hashing_embedder):
    with pytest.raises(HarnessError, match="endpoint"):
        evaluate(eval_store, small_dataset, hashing_embedder, answers=AnswerOptions(answerer=None))
    with pytest.raises(HarnessError, match="not in this run"):
        evaluate(eval_store, small_dataset, hashing_embedder,
                 answers=AnswerOptions(answerer=None, dry_run=True, modes=["lightfoot+rerank"]))
