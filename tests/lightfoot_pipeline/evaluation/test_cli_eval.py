"""The evaluation commands: eval --run-dir, eval --dry-run, eval-deletion, report, compare."""

from __future__ import annotations

import json

import polars as pl
import pytest

from lightfoot_pipeline.cli import main
from lightfoot_pipeline.evaluation.runs import load_run

ENDPOINT_VARIABLES = ("OPENAI_BASE_URL", "LIGHTFOOT_LLM_BASE_URL", "OPENAI_API_KEY", "LIGHTFOOT_LLM_API_KEY",
                      "LIGHTFOOT_LLM_MODEL", "OPENAI_MODEL", "LIGHTFOOT_LLM_PRICE_IN", "LIGHTFOOT_LLM_PRICE_OUT")


@pytest.fixture
def no_endpoint(monkeypatch):
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cli-eval") / "store")


@pytest.mark.slow
def test_eval_keeps_a_run_that_report_and_compare_read(cli_store, small_dataset, tmp_path, capsys):
    run_dir, out = tmp_path / "run", tmp_path / "eval.json"
    code = main(["eval", "--store", cli_store, "--dataset", str(small_dataset), "--run-dir", str(run_dir),
                 "--embedder", "hashing:32", "--reranker", "none", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "8 questions" in printed and "hipporag2" in printed and "lightfoot − dense" in printed
    run = load_run(run_dir)
    assert run.modes == ["dense", "lightfoot", "hipporag2"]
    legacy = json.loads(out.read_text())
    assert legacy["run"]["run_dir"] == str(run_dir) and len(legacy["per_question"]) == 8

    assert main(["report", str(run_dir)]) == 0
    assert "recall_by_mode.png" in capsys.readouterr().out
    assert (run_dir / "report.md").exists() and (run_dir / "recall_vs_index_cost.png").exists()

    # the same questions on the same store again: identical rankings, so every difference is 0
    again = tmp_path / "again"
    assert main(["eval", "--store", cli_store, "--dataset", str(small_dataset), "--run-dir", str(again),
                 "--reranker", "none", "--modes", "lightfoot,dense"]) == 0
    capsys.readouterr()
    assert main(["compare", str(run_dir), str(again), "--metric", "recall@5"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "difference" in line]
    assert len(lines) == 2 and all("difference +0.000 [+0.000, +0.000]" in line for line in lines)

    assert main(["eval", "--store", cli_store, "--dataset", str(small_dataset), "--run-dir", str(run_dir),
                 "--reranker", "none"]) == 2
    assert "already holds a run" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_writes_one_json_document_without_a_run_directory(cli_store, small_dataset, tmp_path, capsys):
    out = tmp_path / "eval.json"
    code = main(["eval", "--store", cli_store, "--dataset", str(small_dataset), "--embedder", "hashing:32",
                 "--reranker", "none", "--modes", "lightfoot,dense", "--k", "5,1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    lines = printed.splitlines()
    assert lines[1].split()[:3] == ["lightfoot", "recall@1", lines[1].split()[2]] and "recall@5" in lines[1]
    assert lines[2].split()[0] == "dense" and "paired bootstrap" not in printed
    result = json.loads(out.read_text())
    assert list(result["modes"]) == ["dense", "lightfoot"]  # sorted keys
    assert set(result["modes"]["dense"]) == {"recall@1", "recall@5"}
    assert result["run"]["run_dir"] is None and result["run"]["questions_without_gold"] == 1
    entry = result["per_question"][0]
    assert set(entry) == {"qid", "question", "gold_doc_ids", "gold_missing", "modes"} and entry["gold_missing"] == []
    assert len(entry["modes"]["lightfoot"]["ranked"]) == 30


@pytest.mark.slow
def test_eval_dry_run_prints_the_cost_with_no_endpoint(cli_store, small_dataset, no_endpoint, capsys):
    code = main(["eval", "--store", cli_store, "--dataset", str(small_dataset), "--embedder", "hashing:32",
                 "--reranker", "none", "--dry-run", "--answer-budget", "0.25"])
    captured = capsys.readouterr()
    assert code == 0
    assert "dry run: 24 answer calls to meta-llama/Llama-3.3-70B-Instruct" in captured.err
    assert "$0.1/$0.32 per million tokens in/out (list)" in captured.err and "budget $0.25" in captured.err
    assert "no model was called and nothing was written" in captured.out


def test_eval_refuses_answers_without_an_endpoint_and_runs_without_a_destination(cli_store, small_dataset,
                                                                                no_endpoint, capsys):
    assert main(["eval", "--store", cli_store, "--dataset", str(small_dataset), "--reranker", "none",
                 "--answer", "--run-dir", "x"]) == 2
    assert "language-model endpoint" in capsys.readouterr().err
    assert main(["eval", "--store", cli_store, "--dataset", str(small_dataset), "--reranker", "none"]) == 2
    assert "--out" in capsys.readouterr().err


def test_eval_answers_through_the_configured_endpoint(cli_store, small_dataset, tmp_path, no_endpoint,
                                                      monkeypatch, chat_server, capsys):
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    monkeypatch.setenv("LIGHTFOOT_LLM_MODEL", "gpt-4o-mini")
    chat_server.script(lambda request: chat_server.Reply(content='{"answer": "Avery County"}', usage=(1000, 6)))
    run_dir = tmp_path / "answered"
    code = main(["eval", "--store", cli_store, "--dataset", str(small_dataset), "--embedder", "hashing:32",
                 "--reranker", "none", "--run-dir", str(run_dir), "--answer", "--answer-modes", "lightfoot",
                 "--answer-budget", "0.5"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "answering: 8 answer calls to gpt-4o-mini" in captured.err
    assert "answers: 8 calls, 0 failed, 0 skipped by the budget" in captured.out and "of $0.5" in captured.out
    assert chat_server.count == 8
    answered = load_run(run_dir).results.filter(pl.col("mode") == "lightfoot")
    assert answered.get_column("em").to_list().count(1.0) == 1  # "Avery County" answers one question


@pytest.mark.slow
def test_eval_deletion_and_its_report(small_dataset, tmp_path, capsys):
    run_dir = tmp_path / "audit"
    code = main(["eval-deletion", "--dataset", str(small_dataset), "--run-dir", str(run_dir), "--embedder",
                 "hashing:32", "--reranker", "none", "--modes", "dense,lightfoot", "--seed", "3"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "deleted 16 of 160 documents" in printed and "with 0 model calls" in printed
    assert "fingerprint equal to a fresh build of the survivors: true; rankings equal: true" in printed
    assert load_run(run_dir).modes == ["dense", "lightfoot"]
    assert main(["report", str(run_dir)]) == 0
    assert "recall_deleted_vs_intact.png" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.minilm
def test_the_bundled_sample_deletion_audit_with_minilm(sample_dir, tmp_path, capsys, minilm_vectors, monkeypatch):
    """The whole sample with the packaged MiniLM: every mode before and after deleting 10%, and the report.

    The phase before the deletion is a full evaluation of the sample (the same store `lightfoot eval`
    builds), so this one run checks the baselines' figures too. Its builds (the whole sample, then
    the survivors afresh) index for real; their vectors come from the session's MiniLM build of the
    sample (``minilm_vectors``), so no text is embedded twice in the suite.
    """
    from lightfoot_pipeline.models import embedder as embedders

    monkeypatch.setattr(embedders, "load_embedder", lambda spec: minilm_vectors)
    audit_dir = tmp_path / "audit"
    assert main(["eval-deletion", "--dataset", str(sample_dir), "--run-dir", str(audit_dir),
                 "--reranker", "none", "--fraction", "0.1", "--seed", "0"]) == 0
    assert main(["report", str(audit_dir)]) == 0
    capsys.readouterr()
    audit = load_run(audit_dir)
    means = {mode: audit.scores(mode, "recall@5", "before").get_column("score").mean() for mode in audit.modes}
    # the sample's README: dense-only recall@5 .618 with this embedder; the graph adds to it
    assert means["dense"] == pytest.approx(0.618, abs=0.005)
    assert means["lightfoot"] > means["dense"] and means["hipporag2"] > means["dense"]
    d = audit.deletion
    assert d["deleted_docs"] == 189 and d["model_calls"] == 0 and d["embedder_calls"] == 0
    assert d["fingerprint_equal"] and d["rankings_equal_fresh"] and not d["leaks"]
    text = (audit_dir / "report.md").read_text()
    assert "| fingerprint equal to the fresh build | yes |" in text
