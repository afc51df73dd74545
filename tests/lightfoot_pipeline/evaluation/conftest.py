"""Fixtures of the evaluation tests: a small slice of the bundled sample, indexed with the hashing embedder.

The slice is the first 160 documents of the MuSiQue sample (with their recorded extractions) and
the first 8 dev questions, whose gold documents all lie among them, plus one question without gold
documents (the harness must leave it out of recall).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

N_DOCUMENTS = 160
N_QUESTIONS = 8


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory, sample_dir) -> Path:
    target = tmp_path_factory.mktemp("small-musique")
    keep: set[str] = set()
    with (sample_dir / "corpus.jsonl").open(encoding="utf-8") as src, \
            (target / "corpus.jsonl").open("w", encoding="utf-8") as dst:
        for line in src:
            row = json.loads(line)
            if len(keep) < N_DOCUMENTS:
                keep.add(row["doc_id"])
                dst.write(line)
    with (sample_dir / "extractions.jsonl").open(encoding="utf-8") as src, \
            (target / "extractions.jsonl").open("w", encoding="utf-8") as dst:
        for line in src:
            if json.loads(line)["doc_id"] in keep:
                dst.write(line)
    questions = [json.loads(line) for line in (sample_dir / "questions-dev.jsonl").open(encoding="utf-8")][:N_QUESTIONS]
    assert all(set(q["gold_doc_ids"]) <= keep for q in questions)
    questions.append({"qid": "no-gold", "question": "Which river runs through nowhere?", "answer": "none",
                      "gold_doc_ids": []})
    with (target / "questions-dev.jsonl").open("w", encoding="utf-8") as dst:
        for q in questions:
            dst.write(json.dumps(q) + "\n")
    return target


@pytest.fixture(scope="session")
def small_questions(small_dataset):
    from lightfoot_pipeline.ingest.dataset import load_questions

    return load_questions(small_dataset / "questions-dev.jsonl")


@pytest.fixture(scope="session")
def small_index(tmp_path_factory, small_dataset, hashing_embedder):
    """(store, snapshot) of the slice: built once, read by every test (tests must not write to it)."""
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.ingest.dataset import load_corpus, load_recorded_extractions
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor
    from lightfoot_pipeline.snapshot.export import export_snapshot
    from lightfoot_pipeline.snapshot.format import load_snapshot
    from lightfoot_pipeline.store.store import Store

    store = Store(str(tmp_path_factory.mktemp("small-index") / "store"))
    operations.ingest(store, load_corpus(small_dataset), ReplayExtractor(load_recorded_extractions(small_dataset)),
                    hashing_embedder)
    info = export_snapshot(store, hashing_embedder)
    return store, load_snapshot(store, info.snapshot_id)


def audit_seed(doc_ids: list[str], questions, fraction: float) -> int:
    """The first seed whose deletions take evidence from some questions and leave others intact."""
    from lightfoot_pipeline.evaluation.deletion_trial import choose_deletions

    for seed in range(200):
        doomed = set(choose_deletions(doc_ids, fraction, seed))
        hit = [bool(doomed.intersection(q.gold_doc_ids)) for q in questions if q.gold_doc_ids]
        if 2 <= sum(hit) <= len(hit) - 2:
            return seed
    raise AssertionError("no seed splits the questions")


@pytest.fixture(scope="session")
def small_audit(tmp_path_factory, small_dataset, small_questions, hashing_embedder):
    """The deletion audit of the slice (10%), kept as a run directory; its stores kept in work/."""
    from lightfoot_pipeline.evaluation.deletion_eval import run_deletion_audit
    from lightfoot_pipeline.ingest.dataset import load_corpus

    base = tmp_path_factory.mktemp("small-audit")
    seed = audit_seed([d.doc_id for d in load_corpus(small_dataset)], small_questions, 0.1)
    return run_deletion_audit(small_dataset, small_dataset / "questions-dev.jsonl", hashing_embedder,
                              fraction=0.1, seed=seed, work_dir=base / "work", run_dir=base / "run",
                              echo=lambda line: None)
