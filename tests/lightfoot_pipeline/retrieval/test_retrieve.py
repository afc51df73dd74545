"""Retrieval: fact and passage seeding, the walk, the candidates, reranking and fusion."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lightfoot_pipeline.evaluation.evaluate import ensure_dataset_indexed
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.retrieval.rerank import CrossEncoderReranker, RerankerStatus, reciprocal_rank_fusion
from lightfoot_pipeline.retrieval.retrieve import RetrievalError, RetrievalSettings, Retriever, top_indices
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store.store import Store

DATA = Path(__file__).parents[1] / "data" / "query-corpus"
QUESTION = "Who founded the company that makes the Zephyr phone?"


@pytest.fixture(scope="module")
def embedder():
    return HashingEmbedder(dim=32)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory, embedder):
    store = Store(str(tmp_path_factory.mktemp("retrieve") / "store"))
    ensure_dataset_indexed(store, DATA, embedder)
    export_snapshot(store, embedder)
    return load_snapshot(store)


class KeywordReranker:
    """A stand-in cross-encoder: scores a passage by whether it contains a word."""

    model_id = "keyword"

    def __init__(self, word: str) -> None:
        self.word = word
        self.calls: list[tuple[str, int]] = []

    def score(self, question, passages):
        self.calls.append((question, len(passages)))
        return np.array([1.0 if self.word in p.lower() else 0.0 for p in passages], dtype=np.float32)


def test_seeds_follow_the_paper(snapshot, embedder):
    retriever = Retriever(snapshot, embedder)
    vector = retriever.question_vector(QUESTION)
    dense = retriever.dense_scores(vector)
    facts = retriever.similar_facts(vector, 2)
    seeds = retriever.seeds(dense, facts)
    n_entities = snapshot.n_entities
    # Passages: min–max scaled similarity, the best at 0.05 and the worst of the top 100 at 0.
    passage_seeds = seeds[n_entities:]
    assert passage_seeds.max() == pytest.approx(0.05)
    assert passage_seeds[int(np.argmax(dense))] == pytest.approx(0.05)
    assert passage_seeds[int(np.argmin(dense))] == 0.0
    # Entities: each fact gives similarity / (passages mentioning the entity) to its two ends.
    expected = np.zeros(n_entities)
    for fact in facts:
        for entity in (snapshot.fact_subjects[fact.row], snapshot.fact_objects[fact.row]):
            expected[entity] += fact.similarity / snapshot.entity_passage_counts[entity]
    np.testing.assert_allclose(seeds[:n_entities], expected)
    assert np.count_nonzero(expected) >= 2
    # The two facts are the two most similar, best first, with their evidence.
    all_scores = snapshot.fact_vectors @ vector
    assert [f.row for f in facts] == list(np.argsort(-all_scores, kind="stable")[:2])
    assert all(f.evidence and f.evidence[0]["doc_id"].startswith("q-") for f in facts)


def test_only_the_top_passages_are_seeded(snapshot, embedder):
    retriever = Retriever(snapshot, embedder, settings=RetrievalSettings(seed_passages=3))
    vector = retriever.question_vector(QUESTION)
    seeds = retriever.seeds(retriever.dense_scores(vector), [])
    assert np.count_nonzero(seeds[snapshot.n_entities:]) == 2  # the third of three scales to 0
    assert not seeds[: snapshot.n_entities].any()


def test_the_walk_finds_the_second_hop_that_dense_retrieval_misses(snapshot, embedder):
    retriever = Retriever(snapshot, embedder)
    result = retriever.retrieve(QUESTION)
    docs = [p.doc_id for p in result.passages]
    dense_docs = [snapshot.passages.row(int(i), named=True)["doc_id"]
                  for i in top_indices(retriever.dense_scores(retriever.question_vector(QUESTION)), 12)]
    assert {"q-zephyr", "q-orbital"} <= set(docs[:3])
    assert dense_docs.index("q-orbital") > docs.index("q-orbital")
    assert result.order == "pagerank" and result.snapshot_id == snapshot.snapshot_id
    assert result.pagerank["converged"] and result.pagerank["iterations"] > 1
    assert result.reranker.state == "disabled"
    assert [p.rank for p in result.passages] == list(range(1, len(docs) + 1))
    assert set(result.timings_ms) == {"embed", "seed", "pagerank", "rerank", "total"}
    # Every passage is a candidate here (12 < 30), each exactly once, scores descending.
    assert sorted(docs) == sorted(snapshot.passages.get_column("doc_id").to_list())
    scores = [p.pagerank_score for p in result.passages]
    assert scores == sorted(scores, reverse=True)
    assert len(retriever.retrieve(QUESTION, top_k=3).passages) == 3


def test_reranking_fuses_the_cross_encoder_rank_with_the_pagerank_rank(snapshot, embedder):
    reranker = KeywordReranker("riga")
    plain = Retriever(snapshot, embedder).retrieve(QUESTION)
    fused = Retriever(snapshot, embedder, reranker).retrieve(QUESTION)
    assert fused.order == "pagerank+rerank" and fused.reranker.state == "available"
    assert reranker.calls == [(QUESTION, len(plain.passages))]
    by_pagerank = [p.chunk_id for p in plain.passages]
    by_rerank = [p.chunk_id for p in sorted(plain.passages, key=lambda p: ("riga" not in p.text.lower(), p.rank))]
    expected = [c for c, _ in reciprocal_rank_fusion([by_pagerank, by_rerank], k=60)]
    assert [p.chunk_id for p in fused.passages] == expected
    riga = next(p for p in fused.passages if "riga" in p.text.lower())
    assert riga.rerank_rank == 1 and riga.rank < riga.pagerank_rank
    assert fused.passages[0].fused_score == pytest.approx(
        1 / (60 + fused.passages[0].pagerank_rank) + 1 / (60 + fused.passages[0].rerank_rank))
    off = Retriever(snapshot, embedder, reranker).retrieve(QUESTION, rerank=False)
    assert [p.chunk_id for p in off.passages] == by_pagerank and off.reranker.state == "disabled"


@pytest.mark.slow
def test_retrieval_with_a_tiny_cross_encoder(snapshot, embedder, tmp_path, tiny_cross_encoder):
    tiny_cross_encoder(tmp_path / "tiny")
    reranker = CrossEncoderReranker(str(tmp_path / "tiny"))
    result = Retriever(snapshot, embedder, reranker).retrieve(QUESTION, top_k=5)
    assert result.order == "pagerank+rerank" and result.reranker.model == "tiny"
    assert len(result.passages) == 5
    assert all(p.rerank_score is not None and p.fused_score is not None for p in result.passages)
    fused = [p.fused_score for p in result.passages]
    assert fused == sorted(fused, reverse=True)


def test_no_reranker_is_reported_with_its_reason(snapshot, embedder):
    status = RerankerStatus("unavailable", "BAAI/bge-reranker-base", "not on this machine")
    result = Retriever(snapshot, embedder, None, status).retrieve(QUESTION)
    assert result.order == "pagerank" and result.reranker == status
    assert result.as_dict()["reranker"]["reason"] == "not on this machine"


def test_the_embedder_must_be_the_snapshots(snapshot):
    with pytest.raises(RetrievalError, match="holds vectors of"):
        Retriever(snapshot, HashingEmbedder(dim=64))
    with pytest.raises(RetrievalError, match="empty"):
        Retriever(snapshot, HashingEmbedder(dim=32)).retrieve("   ")


def test_top_indices_orders_ties_by_index():
    scores = np.array([0.2, 0.9, 0.9, 0.1, 0.9])
    assert top_indices(scores, 2).tolist() == [1, 2]
    assert top_indices(scores, 6).tolist() == [1, 2, 4, 0, 3]
    many = np.repeat([0.5, 0.7], 10)
    assert top_indices(many, 12).tolist() == [*range(10, 20), 0, 1]
    assert top_indices(np.array([]), 3).tolist() == []


def test_the_local_walk_proves_the_ranks_the_output_reads(snapshot, embedder):
    # Without a reranker the first exact_ranks passages are proven; a reranker's fusion reads the
    # rank of every candidate, so then all of them are. Either way they are the exact walk's.
    settings = RetrievalSettings(exact_ranks=3)
    exact = Retriever(snapshot, embedder, settings=RetrievalSettings(walk="exact")).retrieve(QUESTION)
    plain = Retriever(snapshot, embedder, settings=settings).retrieve(QUESTION)
    assert plain.pagerank["proof"]["ranks"] == 3
    assert [p.chunk_id for p in plain.passages[:3]] == [p.chunk_id for p in exact.passages[:3]]
    fused = Retriever(snapshot, embedder, KeywordReranker("riga"), settings=settings).retrieve(QUESTION)
    assert fused.pagerank["proof"]["ranks"] == settings.candidates
    by_pagerank = [p.chunk_id for p in sorted(fused.passages, key=lambda p: p.pagerank_rank)]
    assert by_pagerank == [p.chunk_id for p in exact.passages]
    with pytest.raises(ValueError, match="exact_ranks"):
        RetrievalSettings(exact_ranks=0)
