"""Evaluation: recall@k of retrieval over questions with gold passages.

A question's recall@k is the fraction of its gold documents among the first k distinct documents
of a ranking (a document with several passages counts once, at its best passage). Modes:

- ``dense``: passages by the cosine of their vector with the question's (no graph);
- ``lightfoot``: the PageRank order (retrieve.py, no reranker);
- ``lightfoot+rerank``: PageRank's candidates reranked by the cross-encoder and fused by RRF
  (only when a cross-encoder is available).

The result has the shape ``{"n_questions", "modes": {mode: {"recall@k": …}}, "per_question": […],
"run": {…}}``, where each per-question entry lists the ranked passages of every mode.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from lightfoot_pipeline import pipeline
from lightfoot_pipeline.ingest.dataset import (
    DatasetError, Question, has_recorded_extractions, load_corpus, load_recorded_extractions,
)
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.ingest.passages import text_hash
from lightfoot_pipeline.serving.retrieve import Retriever, top_indices
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENTS

K_VALUES = (2, 5, 10)
DENSE, LIGHTFOOT, LIGHTFOOT_RERANK = "dense", "lightfoot", "lightfoot+rerank"


def distinct_in_order(values: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    return [v for v in values if not (v in seen or seen.add(v))]


def recall_at(ranked_doc_ids: Sequence[str], gold_doc_ids: Sequence[str], k: int) -> float:
    """Fraction of the gold documents among the first k distinct documents of the ranking."""
    gold = set(gold_doc_ids)
    if not gold:
        raise ValueError("recall needs at least one gold document")
    top = distinct_in_order(ranked_doc_ids)[:k]
    return len(gold.intersection(top)) / len(gold)


def evaluate_recall(
    retriever: Retriever,
    questions: Sequence[Question],
    ks: Sequence[int] = K_VALUES,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Recall@k of every mode over the questions that name gold documents."""
    ks = sorted(set(ks))
    if not ks or ks[0] < 1:
        raise ValueError(f"k values must be positive, got {ks}")
    snap = retriever.snapshot
    chunk_ids = snap.passages.get_column("chunk_id").to_list()
    doc_ids = snap.passages.get_column("doc_id").to_list()
    live_docs = set(doc_ids)
    modes = [DENSE, LIGHTFOOT] + ([LIGHTFOOT_RERANK] if retriever.reranker is not None else [])
    depth = max(ks[-1], retriever.settings.candidates)
    scored = [q for q in questions if q.gold_doc_ids]
    sums = {mode: {k: 0.0 for k in ks} for mode in modes}
    per_question = []
    timings: list[float] = []
    for done, question in enumerate(scored, start=1):
        vector = retriever.question_vector(question.question)
        dense = retriever.dense_scores(vector)
        rankings = {DENSE: [(chunk_ids[i], doc_ids[i]) for i in top_indices(dense, depth)]}
        result = retriever.retrieve(question.question, rerank=LIGHTFOOT_RERANK in modes, vector=vector)
        timings.append(result.timings_ms["total"] - result.timings_ms["rerank"])
        by_pagerank = sorted(result.passages, key=lambda p: p.pagerank_rank)
        rankings[LIGHTFOOT] = [(p.chunk_id, p.doc_id) for p in by_pagerank]
        if LIGHTFOOT_RERANK in modes:
            rankings[LIGHTFOOT_RERANK] = [(p.chunk_id, p.doc_id) for p in result.passages]
        entry = {
            "qid": question.qid,
            "question": question.question,
            "gold_doc_ids": list(question.gold_doc_ids),
            "gold_missing": sorted(set(question.gold_doc_ids) - live_docs),
            "modes": {},
        }
        for mode in modes:
            ranked_docs = [d for _, d in rankings[mode]]
            recalls = {f"recall@{k}": recall_at(ranked_docs, question.gold_doc_ids, k) for k in ks}
            for k in ks:
                sums[mode][k] += recalls[f"recall@{k}"]
            entry["modes"][mode] = {
                **recalls,
                "ranked": [{"chunk_id": c, "doc_id": d} for c, d in rankings[mode]],
            }
        per_question.append(entry)
        if progress is not None:
            progress(done, len(scored))
    n = len(scored)
    summary = {mode: {f"recall@{k}": round(sums[mode][k] / n, 4) if n else None for k in ks} for mode in modes}
    return {
        "n_questions": n,
        "modes": summary,
        "per_question": per_question,
        "run": {
            "snapshot_id": snap.snapshot_id,
            "store_seq": snap.info.store_seq,
            "fingerprint": snap.info.fingerprint,
            "embedder": retriever.embedder.model_id,
            "reranker": retriever.reranker_status.as_dict(),
            "questions_without_gold": len(questions) - n,
            "retrieval_ms": {
                "p50": round(float(np.percentile(timings, 50)), 3) if timings else None,
                "p95": round(float(np.percentile(timings, 95)), 3) if timings else None,
            },
        },
    }


def ensure_dataset_indexed(store: Store, dataset_dir: Path, embedder: Embedder,
                           progress: Callable[[int, int], None] | None = None) -> dict:
    """Build the dataset's documents into the store unless it holds them already, with no model call.

    A document counts as held when the store has it with the same title and text. Missing or
    changed ones are ingested with the dataset's recorded extractions (extractions.jsonl); a
    dataset without them is refused, since building it would take model calls.
    """
    documents = load_corpus(dataset_dir)
    held: dict[str, str] = {}
    if store.exists():
        rows = store.read(DOCUMENTS.name, columns=["doc_id", "content_hash"])
        held = dict(zip(rows.get_column("doc_id").to_list(), rows.get_column("content_hash").to_list()))
    missing = [d for d in documents if held.get(d.doc_id) != text_hash(f"{d.title}\x00{d.text}")]
    if not missing:
        return {"built": False, "documents": 0, "model_calls": 0}
    if not has_recorded_extractions(dataset_dir):
        raise DatasetError(
            f"{dataset_dir} has no extractions.jsonl and {store.uri} does not hold its {len(missing)} documents; "
            "evaluation builds with no model call, so ingest the dataset first (`lightfoot ingest`)")
    started = time.perf_counter()
    report = pipeline.ingest(store, missing, ReplayExtractor(load_recorded_extractions(dataset_dir)), embedder,
                             progress=progress)
    return {"built": True, "documents": len(missing), "failed": report.failed, "model_calls": report.model_calls,
            "seconds": round(time.perf_counter() - started, 2)}
