"""Run directories: written, read back, refused when they would be lost, compared question by question."""

from __future__ import annotations

import json

import polars as pl
import pytest

from lightfoot_pipeline.evaluation.runs import (
    RESULTS_FILE,
    RUN_FILE,
    RunError,
    compare_modes,
    compare_runs,
    load_run,
    results_frame,
    write_run,
)


def rows(scores: dict[str, list[float]], phase: str = "eval", qids=None) -> list[dict]:
    out = []
    for mode, values in scores.items():
        for i, value in enumerate(values):
            qid = qids[i] if qids else f"q{i}"
            out.append({"phase": phase, "mode": mode, "qid": qid, "question": f"question {qid}?",
                        "gold_doc_ids": ["d1"], "ranked_doc_ids": ["d1", "d2"], "recall@5": value,
                        "em": value, "f1": value})
    return out


def test_a_run_reads_back_as_written(tmp_path):
    config = {"kind": "eval", "dataset": "somewhere", "snapshots": {"eval": {"fingerprint": "abc"}}}
    frame = results_frame(rows({"lightfoot": [1.0, 0.5, 0.0], "dense": [0.5, 0.5, 0.0]}), ks=[5])
    write_run(tmp_path / "run", config, frame)
    run = load_run(tmp_path / "run")
    assert run.config["snapshots"]["eval"]["fingerprint"] == "abc"
    assert run.config["format"] == 1 and "created_at" in run.config and run.config["software"]["polars"]
    assert run.modes == ["lightfoot", "dense"] and run.phases == ["eval"] and run.metrics == ["recall@5"]
    assert run.results.get_column("recall@5").to_list() == [1.0, 0.5, 0.0, 0.5, 0.5, 0.0]
    assert run.results.schema["ranked_doc_ids"] == pl.List(pl.String)
    assert run.results.get_column("evidence").null_count() == 6


def test_an_existing_run_is_not_overwritten_by_accident(tmp_path):
    frame = results_frame(rows({"lightfoot": [1.0]}), ks=[5])
    write_run(tmp_path, {"kind": "eval", "marker": 1}, frame)
    with pytest.raises(RunError, match="already holds a run"):
        write_run(tmp_path, {"kind": "eval", "marker": 2}, frame)
    write_run(tmp_path, {"kind": "eval", "marker": 3}, frame, overwrite=True)
    assert json.loads((tmp_path / RUN_FILE).read_text())["marker"] == 3


def test_bad_results_are_refused(tmp_path):
    duplicated = results_frame(rows({"lightfoot": [1.0]}) * 2, ks=[5])
    with pytest.raises(RunError, match="twice"):
        write_run(tmp_path / "a", {"kind": "eval"}, duplicated)
    with pytest.raises(RunError, match="does not define"):
        results_frame([{**rows({"lightfoot": [1.0]})[0], "surprise": 1}], ks=[5])


def test_an_unfinished_run_is_reported_as_such(tmp_path):
    frame = results_frame(rows({"lightfoot": [1.0]}), ks=[5])
    frame.write_parquet(tmp_path / RESULTS_FILE)
    with pytest.raises(RunError, match="interrupted"):
        load_run(tmp_path)


def test_modes_of_a_run_compare_by_paired_bootstrap(tmp_path):
    write_run(tmp_path, {"kind": "eval"}, results_frame(
        rows({"lightfoot": [1.0, 1.0, 0.5, 1.0], "dense": [0.5, 0.5, 0.0, 0.5]}), ks=[5]))
    run = load_run(tmp_path)
    result = compare_modes(run, "lightfoot", "dense", "recall@5")
    assert result.difference == pytest.approx(0.5) and (result.low, result.high) == (pytest.approx(0.5),) * 2
    assert result.significant
    with pytest.raises(RunError, match="no results for mode"):
        compare_modes(run, "lightfoot", "hipporag2", "recall@5")
    with pytest.raises(RunError, match="no metric"):
        compare_modes(run, "lightfoot", "dense", "recall@7")


def test_two_runs_compare_only_over_the_same_questions(tmp_path):
    write_run(tmp_path / "a", {"kind": "eval"}, results_frame(rows({"lightfoot": [1.0, 0.0, 1.0]}), ks=[5]))
    # b holds a's scores under the questions in another order: paired by position the runs would
    # be identical (a zero-width interval); paired by question they differ on q0 and q1
    write_run(tmp_path / "b", {"kind": "eval"}, results_frame(
        rows({"lightfoot": [1.0, 0.0, 1.0]}, qids=["q1", "q0", "q2"]), ks=[5]))
    write_run(tmp_path / "c", {"kind": "eval"}, results_frame(rows({"lightfoot": [1.0, 0.0]}), ks=[5]))
    a, b, c = (load_run(tmp_path / name) for name in "abc")
    result = compare_runs(a, b, "lightfoot", "recall@5")
    assert result.n == 3 and result.difference == 0.0
    assert result.low < 0.0 < result.high
    assert compare_runs(a, a, "lightfoot", "recall@5").high == 0.0
    with pytest.raises(RunError, match="not over the same questions"):
        compare_runs(a, c, "lightfoot", "recall@5")


def test_unanswered_questions_cannot_be_compared(tmp_path):
    answered = rows({"lightfoot": [1.0, 0.0], "dense": [1.0, 1.0]})
    answered[1]["em"] = None
    write_run(tmp_path, {"kind": "eval"}, results_frame(answered, ks=[5]))
    with pytest.raises(RunError, match="no score on one side"):
        compare_modes(load_run(tmp_path), "lightfoot", "dense", "em")
