"""Parity of a retrieval configuration with a reference one: the same questions, the same snapshot.

Used to hold the fast paths (the local walk, indexed and reduced-precision seeding) to the exact
walk: recall@k of each, their difference, the mean overlap of the two top 10s, and the share of
questions whose top 10 passages are the reference's in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from lightfoot_pipeline.evaluation.metrics import recall_at_k
from lightfoot_pipeline.ingest.dataset import Question
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.retrieval.retrieve import RetrievalSettings, Retriever
from lightfoot_pipeline.snapshot.format import Snapshot

KS = (2, 5, 10)
OVERLAP_AT = 10
EXACT = RetrievalSettings(walk="exact", seeding="exact")


def _rankings(retriever: Retriever, questions: Sequence[Question], vectors: list[np.ndarray]
              ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Per question: ranked document ids (first passage of each document) and the top passages."""
    documents, passages = {}, {}
    for question, vector in zip(questions, vectors, strict=True):
        hits = retriever.retrieve(question.question, rerank=False, vector=vector).passages
        documents[question.qid] = list(dict.fromkeys(hit.doc_id for hit in hits))
        passages[question.qid] = [hit.chunk_id for hit in hits[:OVERLAP_AT]]
    return documents, passages


def retrieval_parity(snapshot: Snapshot, embedder: Embedder, questions: Sequence[Question],
                     candidates: dict[str, RetrievalSettings], reference: RetrievalSettings = EXACT) -> dict:
    """Recall@2/5/10 of the reference and of each candidate configuration on questions with gold
    documents, each candidate's difference from the reference, the mean top-10 overlap, and the
    share of questions with the reference's top 10 in the reference's order."""
    questions = [q for q in questions if q.gold_doc_ids]
    if not questions:
        raise ValueError("parity needs questions with gold documents")
    gold = {q.qid: list(q.gold_doc_ids) for q in questions}
    vectors = [np.asarray(embedder.embed_query(q.question), dtype=np.float32) for q in questions]

    def figures(settings: RetrievalSettings) -> tuple[dict, dict[str, list[str]]]:
        documents, passages = _rankings(Retriever(snapshot, embedder, settings=settings), questions, vectors)
        recall = recall_at_k(documents, gold, KS)
        return {name: round(float(values.mean()), 4) for name, values in recall.items()}, passages

    reference_recall, reference_top = figures(reference)
    out = {"questions": len(questions), "reference": {"settings": _described(reference), **reference_recall}}
    for name, settings in candidates.items():
        recall, top = figures(settings)
        overlap = [len(set(top[q]) & set(reference_top[q])) / max(1, min(OVERLAP_AT, len(reference_top[q])))
                   for q in gold]
        out[name] = {
            "settings": _described(settings), **recall,
            "recall_difference": {k: round(recall[k] - reference_recall[k], 4) for k in recall},
            f"mean_top{OVERLAP_AT}_overlap": round(float(np.mean(overlap)), 4),
            f"top{OVERLAP_AT}_equal": round(float(np.mean([top[q] == reference_top[q] for q in gold])), 4),
        }
    return out


def _described(settings: RetrievalSettings) -> dict:
    return {"walk": settings.walk, "seeding": settings.seeding,
            **({"epsilon": settings.epsilon} if settings.walk == "local" else {"tolerance": settings.tolerance})}


def local_settings(**changes) -> RetrievalSettings:
    """The default (local walk, indexed seeding) settings with changes."""
    return replace(RetrievalSettings(), **changes)
