"""The deletion audit as an evaluation: the survived/deleted split, exactness, recall before and after."""

from __future__ import annotations

import json

import polars as pl
import pytest

from lightfoot_pipeline.evaluation.deletion_eval import evidence_split, group_recalls
from lightfoot_pipeline.evaluation.harness import QuestionResult
from lightfoot_pipeline.evaluation.runs import load_run


def result(qid: str, gold: list[str], mode: str = "lightfoot") -> QuestionResult:
    return QuestionResult(mode=mode, qid=qid, question=f"{qid}?", gold_doc_ids=gold, gold_answers=["x"],
                          ranked_doc_ids=[], ranked_chunk_ids=[], recall={}, retrieval_ms=0.0, order="pagerank")


def test_a_question_loses_its_evidence_when_any_gold_document_is_deleted():
    results = [result("both-kept", ["a", "b"]), result("one-gone", ["a", "z"]), result("all-gone", ["y", "z"]),
               result("single", ["c"])]
    assert evidence_split(results, {"y", "z"}) == {
        "both-kept": "intact", "one-gone": "deleted", "all-gone": "deleted", "single": "intact"}
    assert set(evidence_split(results, set()).values()) == {"intact"}


def test_group_recalls_average_by_mode_group_and_phase():
    rows = [
        {"mode": "m", "evidence": "intact", "phase": "before", "recall@2": 1.0},
        {"mode": "m", "evidence": "intact", "phase": "before", "recall@2": 0.5},
        {"mode": "m", "evidence": "intact", "phase": "after", "recall@2": 0.5},
        {"mode": "m", "evidence": "deleted", "phase": "after", "recall@2": 0.0},
    ]
    summary = group_recalls(rows, ["recall@2"])
    assert summary == {"m": {"intact": {"before": {"n": 2, "recall@2": 0.75}, "after": {"n": 1, "recall@2": 0.5}},
                             "deleted": {"after": {"n": 1, "recall@2": 0.0}}}}


def test_the_audit_is_exact_and_model_free(small_audit):
    d = small_audit.deletion
    assert d["documents"] == 160 and d["deleted_docs"] == 16 and d["surviving_docs"] == 144
    assert d["model_calls"] == 0 and d["embedder_calls"] == 0 and d["reported_model_calls"] == 0
    assert d["build_model_calls"] == 0 and d["fresh_build_model_calls"] == 0
    assert d["fingerprint_equal"], d["tables_differing"]
    assert d["fingerprint_after_delete"] == d["fingerprint_fresh"]
    assert d["rankings_equal_fresh"], d["rankings_differing_fresh"]
    assert d["leaks"] == []
    assert d["delete_seconds"] > 0


def test_the_audit_splits_questions_by_their_gold_documents(small_audit, small_questions):
    d = small_audit.deletion
    deleted = set(d["deleted_doc_ids"])
    expected = {q.qid: ("deleted" if deleted.intersection(q.gold_doc_ids) else "intact")
                for q in small_questions if q.gold_doc_ids}
    frame = pl.DataFrame(small_audit.rows).select("phase", "mode", "qid", "evidence", "gold_doc_ids",
                                                  "ranked_doc_ids", "recall@10")
    assert dict(frame.filter(pl.col("phase") == "before").select("qid", "evidence").unique().iter_rows()) == expected
    assert d["questions"] == {"intact": sum(v == "intact" for v in expected.values()),
                              "deleted": sum(v == "deleted" for v in expected.values())}
    assert d["questions"]["deleted"] >= 2 and d["questions"]["intact"] >= 2
    for row in frame.filter(pl.col("phase") == "after").iter_rows(named=True):
        # nothing deleted is retrieved, so a question can recall at most its surviving gold documents
        assert not deleted.intersection(row["ranked_doc_ids"])
        surviving = [g for g in row["gold_doc_ids"] if g not in deleted]
        assert row["recall@10"] <= len(surviving) / len(row["gold_doc_ids"]) + 1e-12


def test_the_audit_reports_recall_of_both_groups_before_and_after(small_audit):
    recall = small_audit.deletion["recall"]
    assert set(recall) == {"dense", "lightfoot", "hipporag2"}
    frame = pl.DataFrame(small_audit.rows)
    for mode, groups in recall.items():
        for group in ("intact", "deleted"):
            for phase in ("before", "after", "fresh"):
                mine = frame.filter((pl.col("mode") == mode) & (pl.col("evidence") == group)
                                    & (pl.col("phase") == phase))
                assert groups[group][phase]["n"] == mine.height
                assert groups[group][phase]["recall@5"] == pytest.approx(mine.get_column("recall@5").mean(), abs=1e-4)
        # the fresh build scores exactly as the store after the deletion (the deleted group need not
        # lose recall: a deleted passage can free a place in the top 10 for another gold passage)
        assert groups["deleted"]["after"] == groups["deleted"]["fresh"]
        assert groups["intact"]["after"] == groups["intact"]["fresh"]


def test_the_audit_run_directory_keeps_every_phase(small_audit):
    run = load_run(small_audit.run_dir)
    assert run.kind == "deletion-audit" and run.phases == ["before", "after", "fresh"]
    assert run.deletion == json.loads((small_audit.run_dir / "deletion.json").read_text())
    snapshots = run.config["snapshots"]
    assert snapshots["after"]["fingerprint"] == snapshots["fresh"]["fingerprint"] != snapshots["before"]["fingerprint"]
    assert run.results.height == 3 * 3 * 8
