"""Recall evaluation, and building a dataset's store for it without a model call."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lightfoot_pipeline.ingest.dataset import DatasetError, load_questions
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.evaluation.evaluate import (
    DENSE, LIGHTFOOT, LIGHTFOOT_RERANK, ensure_dataset_indexed, evaluate_recall, recall_at,
)
from lightfoot_pipeline.serving.retrieve import Retriever
from lightfoot_pipeline.serving.snapshot import load_snapshot
from lightfoot_pipeline.serving.export import export_snapshot

DATA = Path(__file__).parents[1] / "data" / "query-corpus"


def test_recall_counts_distinct_documents_in_order():
    ranked = ["a", "a", "x", "b", "y", "c"]
    assert recall_at(ranked, ["a", "b"], 2) == 0.5  # the repeated "a" is one document
    assert recall_at(ranked, ["a", "b"], 3) == 1.0
    assert recall_at(ranked, ["c", "z"], 10) == 0.5
    with pytest.raises(ValueError):
        recall_at(ranked, [], 2)


def test_evaluation_reports_every_mode_and_each_questions_ranking(store):
    embedder = HashingEmbedder(dim=32)
    ensure_dataset_indexed(store, DATA, embedder)
    export_snapshot(store, embedder)

    class Reversed:  # a reranker that prefers whatever PageRank ranked last
        model_id = "reversed"

        def score(self, question, passages):
            return list(range(len(passages)))

    questions = load_questions(DATA / "questions.jsonl")
    snapshot = load_snapshot(store)
    plain = evaluate_recall(Retriever(snapshot, embedder), questions)
    assert plain["n_questions"] == 3 and plain["run"]["questions_without_gold"] == 1
    assert set(plain["modes"]) == {DENSE, LIGHTFOOT}
    assert set(plain["modes"][LIGHTFOOT]) == {"recall@2", "recall@5", "recall@10"}
    # The graph walk reaches second hops that the question's words do not.
    assert plain["modes"][LIGHTFOOT]["recall@5"] == 1.0
    assert plain["modes"][LIGHTFOOT]["recall@5"] > plain["modes"][DENSE]["recall@5"]
    first = plain["per_question"][0]
    assert first["qid"] == "q1" and first["gold_missing"] == []
    ranked = first["modes"][LIGHTFOOT]["ranked"]
    assert len(ranked) == 12 and {"chunk_id", "doc_id"} == set(ranked[0])
    recomputed = recall_at([r["doc_id"] for r in ranked], first["gold_doc_ids"], 2)
    assert first["modes"][LIGHTFOOT]["recall@2"] == recomputed
    mean = sum(q["modes"][DENSE]["recall@5"] for q in plain["per_question"]) / 3
    assert plain["modes"][DENSE]["recall@5"] == round(mean, 4)
    json.dumps(plain)

    reranked = evaluate_recall(Retriever(snapshot, embedder, Reversed()), questions)
    assert set(reranked["modes"]) == {DENSE, LIGHTFOOT, LIGHTFOOT_RERANK}
    assert reranked["modes"][LIGHTFOOT] == plain["modes"][LIGHTFOOT]
    assert reranked["per_question"][0]["modes"][LIGHTFOOT_RERANK]["ranked"] != ranked
    assert reranked["run"]["reranker"]["state"] == "available"


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
    with pytest.raises(DatasetError, match="no extractions.jsonl"):
        ensure_dataset_indexed(store, changed, embedder)
