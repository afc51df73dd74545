"""An evaluation run end to end: index, snapshot, modes, answers under a budget, run directory, JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lightfoot_pipeline.evaluation.evaluate import (
    AnswerOptions,
    ensure_dataset_indexed,
    eval_json,
    plan_evaluation,
    run_evaluation,
)
from lightfoot_pipeline.evaluation.harness import HarnessError
from lightfoot_pipeline.evaluation.metrics import recall_at_k
from lightfoot_pipeline.evaluation.modes import DENSE, HIPPORAG2, LIGHTFOOT
from lightfoot_pipeline.evaluation.report import write_report
from lightfoot_pipeline.evaluation.runs import load_run
from lightfoot_pipeline.ingest.dataset import DatasetError
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.retrieval.answer import Answerer
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store

DATA = Path(__file__).parents[1] / "data" / "query-corpus"


@pytest.fixture(scope="module")
def eval_store(tmp_path_factory):
    return Store(str(tmp_path_factory.mktemp("eval-store") / "store"))


def answerer_for(chat_server, **overrides) -> Answerer:
    settings = {"base_url": chat_server.base_url, "model": "gpt-4o-mini", "max_retries": 0, **overrides}
    return Answerer(LLMClient(LLMSettings(**settings)))


def evaluate(store, dataset, embedder, **kwargs):
    lines: list[str] = []
    outcome = run_evaluation(store, dataset, dataset / "questions-dev.jsonl", embedder, echo=lines.append, **kwargs)
    return outcome, lines


@pytest.mark.slow
def test_a_retrieval_run_is_kept_with_its_configuration(eval_store, small_dataset, hashing_embedder, tmp_path):
    outcome, lines = evaluate(eval_store, small_dataset, hashing_embedder, run_dir=tmp_path / "run")
    assert any(line.startswith("built 160 documents") and "with 0 model calls" in line for line in lines)
    run = load_run(tmp_path / "run")
    assert run.modes == ["dense", "lightfoot", "hipporag2"] and run.phases == ["eval"]
    assert run.results.height == 3 * 8
    config = run.config
    assert config["n_questions"] == 8 and config["questions_without_gold"] == 1
    assert config["snapshots"]["eval"]["fingerprint"] == fingerprint(eval_store).digest
    assert config["embedder"] == hashing_embedder.model_id
    assert config["modes"]["hipporag2"]["retrieval"]["damping"] == 0.5
    assert config["modes"]["hipporag2"]["retrieval"]["seed_passages"] == 160
    assert config["index_cost"]["extraction_calls"] == 160 and config["index_cost"]["passages"] == 160
    assert config["answers"] is None
    assert run.results.get_column("answer_status").unique().to_list() == ["not asked"]
    # the JSON of `lightfoot eval --out` comes from the same results
    result = eval_json(outcome)
    assert result["n_questions"] == 8 and set(result["modes"]) == {"dense", "lightfoot", "hipporag2"}
    lightfoot = run.results.filter(run.results["mode"] == "lightfoot")
    assert result["modes"]["lightfoot"]["recall@5"] == pytest.approx(lightfoot["recall@5"].mean(), abs=1e-4)
    assert result["run"]["run_dir"] == str(tmp_path / "run")


def test_a_dry_run_prices_the_answers_and_calls_nothing(eval_store, small_dataset, hashing_embedder, chat_server,
                                                        tmp_path):
    answers = AnswerOptions(answerer=answerer_for(chat_server), budget_usd=0.5, dry_run=True)
    outcome, lines = evaluate(eval_store, small_dataset, hashing_embedder, answers=answers, run_dir=tmp_path / "run")
    assert outcome.dry_run and chat_server.count == 0
    assert not (tmp_path / "run").exists()
    assert outcome.estimate.calls == 3 * 8 and outcome.estimate.price_source == "list"
    assert lines[-1].startswith("dry run: 24 answer calls to gpt-4o-mini") and lines[-1].endswith("budget $0.5")


@pytest.mark.slow
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


def test_answer_calls_are_charged_with_every_attempt_they_took(eval_store, small_dataset, hashing_embedder,
                                                              chat_server, tmp_path):
    # every first request of a call is refused with a 429, so each call takes two
    chat_server.script(lambda request: chat_server.Reply(status=429) if request.number % 2 else
                       chat_server.Reply(content='{"answer": "x"}', usage=(500, 4)))
    answerer = answerer_for(chat_server, concurrency=1, max_retries=1, backoff_s=0.0)
    answers = AnswerOptions(answerer=answerer, budget_usd=None, modes=["dense"])
    outcome, _ = evaluate(eval_store, small_dataset, hashing_embedder, answers=answers)
    assert chat_server.count == 16 and outcome.spend.calls == 8 and outcome.spend.failed == 0
    run_id = outcome.config["answers"]["ledger_run_id"]
    charged = ledger.read(eval_store, run_id)
    assert charged.get_column("attempts").to_list() == [2] * 8
    assert set(charged.get_column("status")) == {"ok"}
    totals = ledger.totals(eval_store, run_id)
    assert (totals["calls"], totals["retries"], totals["attempts"]) == (8, 8, 16)


def test_a_failed_or_empty_answer_is_charged_as_such(eval_store, small_dataset, hashing_embedder, chat_server):
    chat_server.queue(chat_server.Reply(status=401), chat_server.Reply(content='{"answer": ""}'))
    answers = AnswerOptions(answerer=answerer_for(chat_server, concurrency=1), budget_usd=None, modes=["lightfoot"])
    outcome, _ = evaluate(eval_store, small_dataset, hashing_embedder, answers=answers)
    charged = ledger.read(eval_store, outcome.config["answers"]["ledger_run_id"])
    rows = sorted(charged.select("status", "error_kind", "attempts").iter_rows())
    assert rows[0] == ("error", "auth", 1) and rows[1:] == [("unusable", None, 1)] * 7


def test_the_eval_json_holds_every_mode_and_each_questions_ranking(store, tmp_path):
    questions = tmp_path / "questions.jsonl"
    rows = [json.loads(line) for line in (DATA / "questions.jsonl").read_text().splitlines() if line.strip()]
    rows[0]["gold_doc_ids"] = [*rows[0]["gold_doc_ids"], "not-in-the-corpus"]
    questions.write_text("".join(json.dumps(row) + "\n" for row in rows))
    outcome = run_evaluation(store, DATA, questions, HashingEmbedder(dim=32), echo=lambda line: None)
    result = eval_json(outcome)
    json.dumps(result)
    assert result["n_questions"] == 3 and result["run"]["questions_without_gold"] == 1
    assert set(result["modes"]) == {DENSE, LIGHTFOOT, HIPPORAG2}
    assert set(result["modes"][LIGHTFOOT]) == {"recall@2", "recall@5", "recall@10"}
    assert result["run"]["build"]["built"] and result["run"]["build"]["documents"] == 12
    assert result["run"]["retrieval_ms"]["p50"] > 0 and result["run"]["run_dir"] is None
    first, second = result["per_question"][:2]
    assert first["qid"] == "q1" and first["gold_missing"] == ["not-in-the-corpus"] and second["gold_missing"] == []
    ranked = second["modes"][LIGHTFOOT]["ranked"]
    assert len(ranked) == 12 and {"chunk_id", "doc_id"} == set(ranked[0])
    for k in (2, 5, 10):
        recomputed = recall_at_k({"q": [r["doc_id"] for r in ranked]}, {"q": second["gold_doc_ids"]}, [k])
        assert second["modes"][LIGHTFOOT][f"recall@{k}"] == recomputed[f"recall@{k}"][0]
    mean = sum(q["modes"][DENSE]["recall@5"] for q in result["per_question"]) / 3
    assert result["modes"][DENSE]["recall@5"] == round(mean, 4)
    # the graph walk reaches second hops that the questions' words do not
    plain = eval_json(run_evaluation(store, DATA, DATA / "questions.jsonl", HashingEmbedder(dim=32),
                                     plan_evaluation([DENSE, LIGHTFOOT], [5]), echo=lambda line: None))
    assert plain["modes"] == {DENSE: {"recall@5": plain["modes"][DENSE]["recall@5"]}, LIGHTFOOT: {"recall@5": 1.0}}
    assert plain["modes"][DENSE]["recall@5"] < 1.0 and not plain["run"]["build"]["built"]


def test_a_plan_refuses_unknown_modes_and_cutoffs():
    assert [m.name for m in plan_evaluation().modes] == [DENSE, LIGHTFOOT, HIPPORAG2]
    assert plan_evaluation(ks=[10, 2, 2]).ks == (2, 10)
    with pytest.raises(HarnessError, match="unknown or unavailable modes"):
        plan_evaluation(["lightfoot+rerank"])
    with pytest.raises(HarnessError, match="positive"):
        plan_evaluation(ks=[0, 5])


def test_the_store_is_built_only_when_it_lacks_the_dataset(store, tmp_path):
    embedder = HashingEmbedder(dim=32)
    first = ensure_dataset_indexed(store, DATA, embedder)
    assert first["built"] and first["documents"] == 12 and first["model_calls"] == 0
    assert ensure_dataset_indexed(store, DATA, embedder) == {"built": False, "documents": 0, "model_calls": 0}
    changed = tmp_path / "changed"
    shutil.copytree(DATA, changed)
    lines = (changed / "corpus.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["text"] += " It has a blue case."
    (changed / "corpus.jsonl").write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    again = ensure_dataset_indexed(store, changed, embedder)
    assert again["built"] and again["documents"] == 1
    (changed / "extractions.jsonl").unlink()
    row["text"] += " And a red one."
    (changed / "corpus.jsonl").write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    with pytest.raises(DatasetError, match=r"no extractions\.jsonl"):
        ensure_dataset_indexed(store, changed, embedder)


@pytest.mark.slow  # two evaluations of a small corpus: a few seconds
def test_eval_publishes_a_deployment_store_only_through_the_permission_check(tmp_path, monkeypatch):
    """`lightfoot eval --store` exports as `lightfoot snapshot` does: services polling the store
    never load a snapshot whose check failed; the evaluation reads the staged copy either way."""
    from lightfoot_pipeline.evaluation import evaluate as evaluate_module
    from lightfoot_pipeline.snapshot.export import latest_snapshot
    from lightfoot_pipeline.snapshot.verdict import CheckVerdict

    def failing(embedder, settings):
        return lambda store, staged: CheckVerdict(name="views_match_fresh_stores", passed=False, reason="a view differs")

    store = Store(str(tmp_path / "store"))
    monkeypatch.setattr(evaluate_module, "permission_check", failing)
    outcome = run_evaluation(store, DATA, DATA / "questions.jsonl", HashingEmbedder(dim=32), echo=lambda line: None)
    staged = outcome.config["snapshots"]["eval"]["snapshot_id"]
    assert eval_json(outcome)["n_questions"] == 3 and latest_snapshot(store) is None
    monkeypatch.undo()
    outcome = run_evaluation(store, DATA, DATA / "questions.jsonl", HashingEmbedder(dim=32), echo=lambda line: None)
    published = latest_snapshot(store)
    assert published is not None and published.snapshot_id == outcome.config["snapshots"]["eval"]["snapshot_id"]
    assert published.snapshot_id > staged
