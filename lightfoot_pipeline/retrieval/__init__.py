"""Query time: from a question to ranked passages and facts over a snapshot, with no model call.

The question is embedded; the most similar facts and passages seed Personalized PageRank over the
snapshot's graph (the local walk by default, which proves its top 10 the exact walk's, or hands
the query to the exact walk); the top passages
are reranked by a cross-encoder and fused by reciprocal rank. ``explain_query`` says why each
passage ranked; ``Answerer`` makes the one model call of an answer; ``deep`` is the multi-step
mode, which calls the model between its steps.
"""

from lightfoot_pipeline.retrieval.answer import Answer, AnswerBudget, Answerer, build_answerer
from lightfoot_pipeline.retrieval.explain import explain_query
from lightfoot_pipeline.retrieval.rerank import Reranker, RerankerStatus, load_reranker
from lightfoot_pipeline.retrieval.retrieve import (
    FactHit,
    PassageHit,
    Retrieval,
    RetrievalError,
    RetrievalSettings,
    Retriever,
)

__all__ = [
    "Answer", "AnswerBudget", "Answerer", "FactHit", "PassageHit", "Reranker", "RerankerStatus", "Retrieval",
    "RetrievalError", "RetrievalSettings", "Retriever", "build_answerer", "explain_query", "load_reranker",
]
