"""Retrieval: question -> ranked passages, with no model call but the local embedder and reranker.

For a question q (paper §3.3; DESIGN.md, Retrieval):

1. Embed q with the model the snapshot's passage and fact vectors come from.
2. Seed Personalized PageRank:
   - the subject and object entities of the ``top_facts`` (2) facts most similar to q get mass
     ``similarity / number of passages mentioning the entity`` from each fact they end;
   - the ``seed_passages`` (100) passages most similar to q get their similarity min–max scaled
     to [0, ``passage_seed_weight``] (0.05).
3. Walk with damping 0.9 from the seeds and keep the ``candidates`` (30) passages with the highest
   scores: by default the local walk (forward push from a residual of ``epsilon`` per unit of
   degree, localwalk.py), whose cost follows the seeds' neighbourhood, pushed on until it proves
   the first ``exact_ranks`` (10) passages, or every candidate when a cross-encoder will fuse
   their ranks, in the exact walk's order (the exact walk serves a query whose proof would cost
   more); with ``walk="exact"``, power iteration over the snapshot's whole CSR graph (graph.py).

The similarities of step 2 come from the snapshot's float16 vectors (seeding.py): exact products
at reduced precision with the best rows scored again in float32, or, for a fact table large
enough to carry an inverted-file index, the rows of the groups nearest the question
(``seeding="index"``, the default where the snapshot has an index; ``seeding="exact"`` scores
every row).
4. If a cross-encoder is available, score those passages with it and fuse its ranking with the
   PageRank ranking by reciprocal rank fusion (k = 60); otherwise keep the PageRank order and
   say so in the result.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.retrieval.graph import DAMPING, TOLERANCE, PageRankResult, walk_graph
from lightfoot_pipeline.retrieval.localwalk import EPSILON
from lightfoot_pipeline.retrieval.rerank import RRF_K, Reranker, RerankerStatus, reciprocal_rank_fusion
from lightfoot_pipeline.retrieval.seeding import HalfScorer, InvertedFileScorer
from lightfoot_pipeline.snapshot.format import Snapshot


class RetrievalError(LightfootError, RuntimeError):
    """Retrieval cannot run as configured (the message says why)."""


WALKS = ("local", "exact")
SEEDINGS = ("index", "exact")


@dataclass(frozen=True)
class RetrievalSettings:
    top_facts: int = 2
    seed_passages: int = 100
    passage_seed_weight: float = 0.05
    damping: float = DAMPING
    tolerance: float = TOLERANCE
    candidates: int = 30  # passages PageRank keeps, and the reranker sees
    rrf_k: int = RRF_K
    walk: str = "local"  # "local" (forward push) or "exact" (power iteration over the whole graph)
    epsilon: float = EPSILON  # the local walk's first residual per unit of degree
    exact_ranks: int = 10  # leading passages the local walk proves in the exact walk's order (all with a reranker)
    seeding: str = "index"  # "index" (the fact index where the snapshot has one) or "exact"
    probe_share: float | None = None  # share of the fact index's groups a question scores (None: seeding.probes_for)

    def __post_init__(self) -> None:
        if self.walk not in WALKS:
            raise ValueError(f"walk must be one of {', '.join(WALKS)}, got {self.walk!r}")
        if self.seeding not in SEEDINGS:
            raise ValueError(f"seeding must be one of {', '.join(SEEDINGS)}, got {self.seeding!r}")
        if not self.epsilon > 0:
            raise ValueError(f"epsilon must be positive, got {self.epsilon}")
        if self.probe_share is not None and not 0 < self.probe_share <= 1:
            raise ValueError(f"probe_share must be in (0, 1], got {self.probe_share}")
        for name in ("top_facts", "seed_passages", "candidates", "exact_ranks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.passage_seed_weight > 0:
            raise ValueError(f"passage_seed_weight must be positive, got {self.passage_seed_weight}")


@dataclass
class FactHit:
    fact_id: str
    subject: str
    predicate: str
    object: str
    similarity: float
    evidence: list[dict] = field(default_factory=list)  # {chunk_id, doc_id, evidence}
    row: int = field(default=-1, repr=False)  # the fact's row in the snapshot

    @property
    def text(self) -> str:
        return f"({self.subject}; {self.predicate}; {self.object})"


@dataclass
class PassageHit:
    rank: int
    chunk_id: str
    doc_id: str
    title: str
    text: str
    pagerank_rank: int
    pagerank_score: float
    dense_score: float
    rerank_score: float | None = None
    rerank_rank: int | None = None
    fused_score: float | None = None
    location: str | None = None  # a file's passage: its path and page or section


@dataclass
class Retrieval:
    question: str
    snapshot_id: str
    passages: list[PassageHit]
    seed_facts: list[FactHit]
    order: str  # "pagerank+rerank", "pagerank" or "dense" (no seed had any weight)
    reranker: RerankerStatus
    pagerank: dict
    timings_ms: dict[str, float]

    def as_dict(self) -> dict:
        out = asdict(self)
        out["reranker"] = self.reranker.as_dict()
        return out


def top_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest scores, best first; ties go to the lower index."""
    k = min(k, scores.shape[0])
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    if k <= 4:  # a few maxima: k linear scans beat a partition of the whole array
        work = np.array(scores, dtype=np.float64, copy=True)
        picked = []
        for _ in range(k):
            best = int(np.argmax(work))  # the first of equal maxima: the lower index
            picked.append(best)
            work[best] = -np.inf
        return np.asarray(picked, dtype=np.int64)
    if k < scores.shape[0]:
        part = np.argpartition(-scores, k - 1)[:k]
        # a tie at the cut could leave out a lower index: take everything scoring at the cut
        cut = scores[part].min()
        part = np.flatnonzero(scores >= cut)
    else:
        part = np.arange(scores.shape[0])
    order = np.lexsort((part, -scores[part]))
    return part[order][:k]


@contextlib.contextmanager
def query_thread_limits() -> Iterator[None]:
    """Keep BLAS and torch on one thread each while the block runs, and restore what they had
    after it; the large products are split over two threads by the project itself (rowsplit.py).

    A query is small: one short text through the embedder, two matrix-vector products, a sparse
    walk. The BLAS library's idle worker threads spin while they wait for work, taking the core
    from the sparse walk: measured on the 2-core machine under load, one thread each for BLAS and
    torch halved the p50 latency at MuSiQue scale (75 -> 39 ms) and more than halved it on the
    sample (62 -> 25 ms).

    Both settings are the process's (not the thread's), so the query service holds this for as long
    as it is open (``QueryService.close`` leaves it) and the evaluation loop for its questions;
    nothing else in the process should embed a corpus meanwhile. Blocks may nest; each restores
    what it found.
    """
    import torch  # seeding's float16 products run in torch (seeding.py)
    from threadpoolctl import threadpool_limits

    torch_threads = torch.get_num_threads()
    blas = threadpool_limits(limits=1, user_api="blas")
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(torch_threads)
        blas.restore_original_limits()


def embed_question(embedder: Embedder, question: str) -> np.ndarray:
    """The question's unit vector (dim,), through the embedder's single-text path."""
    return np.asarray(embedder.embed_query(question), dtype=np.float32).reshape(-1)


class Retriever:
    """Ranks a snapshot's passages for questions. Thread-safe: holds no per-query state."""

    def __init__(self, snapshot: Snapshot, embedder: Embedder, reranker: Reranker | None = None,
                 reranker_status: RerankerStatus | None = None, settings: RetrievalSettings | None = None) -> None:
        wanted = snapshot.info.models.get("embedder")
        if wanted and wanted != embedder.model_id:
            raise RetrievalError(
                f"snapshot {snapshot.snapshot_id} holds vectors of {wanted!r}, but the embedder is "
                f"{embedder.model_id!r}: query with the same embedder, or export a snapshot with this one")
        self.snapshot = snapshot
        self.graph = walk_graph(snapshot)  # the walk operators, shared by every retriever of the snapshot
        self.embedder = embedder
        self.reranker = reranker
        if reranker is not None:
            self.reranker_status = RerankerStatus("available", reranker.model_id)
        else:
            self.reranker_status = reranker_status or RerankerStatus("disabled", None, "no reranker configured")
        self.settings = settings or RetrievalSettings()
        self._passage_scores = HalfScorer(snapshot.passage_vectors)  # (#passages, dim)
        index = snapshot.fact_index
        self._fact_scores = (
            InvertedFileScorer(snapshot.fact_vectors, index.centroids, index.offsets, self.settings.probe_share,
                               snapshot.fact_codes)
            if index is not None and self.settings.seeding == "index" else HalfScorer(snapshot.fact_vectors)
        )  # (#facts, dim)

    def warm_up(self) -> None:
        """Build the snapshot's lookup arrays and run the embedder once, before the first query."""
        snap = self.snapshot
        _ = (snap.entity_passage_counts, snap.fact_subjects, snap.fact_objects,
             snap.evidence_ranges)  # cached properties, computed here once
        if self.settings.walk == "local" and snap.n_nodes:
            # both walks prepared (the proof may hand a query to the exact walk), and the local
            # walk's loops compiled (one round of a walk that settles almost at once)
            self.graph.prepare()
            self.graph.local.ranked(np.zeros(1, dtype=np.int64), np.ones(1), self.settings.damping, 1.0, 1, 0)
        self.question_vector("warm-up question")

    # -- the parts -----------------------------------------------------------------------------

    def question_vector(self, question: str) -> np.ndarray:
        if not question or not question.strip():
            raise RetrievalError("the question is empty")
        return embed_question(self.embedder, question)

    def dense_scores(self, vector: np.ndarray) -> np.ndarray:
        # (#passages, dim) x (dim,) -> (#passages,), exact in float32 for the seeded passages
        return self._passage_scores.scores(vector, self.settings.seed_passages)

    def similar_facts(self, vector: np.ndarray, k: int) -> list[FactHit]:
        snap = self.snapshot
        if snap.facts.height == 0:
            return []
        scores = self._fact_scores.scores(vector, k)  # (#facts, dim) x (dim,) -> (#facts,)
        hits = []
        for index in top_indices(scores, k):
            row = snap.facts.row(int(index), named=True)
            hits.append(FactHit(
                fact_id=row["fact_id"], subject=row["subject"], predicate=row["predicate"], object=row["object"],
                similarity=float(scores[index]),
                evidence=[{"chunk_id": e["chunk_id"], "doc_id": e["doc_id"], "evidence": e["evidence"]}
                          for e in snap.fact_evidence(int(index))],
                row=int(index),
            ))
        return hits

    def seeds(self, dense: np.ndarray, facts: list[FactHit]) -> np.ndarray:
        """The (N,) seed weights of the walk (not yet normalised)."""
        snap, s = self.snapshot, self.settings
        seeds = np.zeros(snap.n_nodes, dtype=np.float64)
        for hit in facts:
            similarity = max(hit.similarity, 0.0)
            for entity in (int(snap.fact_subjects[hit.row]), int(snap.fact_objects[hit.row])):
                # an entity that ends both facts (or both ends of one) collects each share
                seeds[entity] += similarity / max(int(snap.entity_passage_counts[entity]), 1)
        top = top_indices(dense, s.seed_passages)
        if top.size:
            values = dense[top].astype(np.float64)
            low, high = values.min(), values.max()
            scaled = (values - low) / (high - low) if high > low else np.ones_like(values)
            seeds[snap.n_entities + top] = scaled * s.passage_seed_weight
        return seeds

    def walk(self, seeds: np.ndarray, rerank: bool = False) -> PageRankResult:
        """The walk from seed weights (N,) that ranks the candidates: with ``walk="local"``, the
        local walk proven to rank the first ``exact_ranks`` passages (every candidate if a reranker
        will fuse their ranks, ``rerank``) as the exact walk does (the exact walk where the proof
        would cost more, graph.py); with ``walk="exact"``, the exact walk."""
        s = self.settings
        if s.walk == "local":
            ranks = s.candidates if rerank else min(s.exact_ranks, s.candidates)
            return self.graph.ranked_pagerank(seeds, ranks, damping=s.damping, epsilon=s.epsilon,
                                              tolerance=s.tolerance)
        return self.graph.personalized_pagerank(seeds, damping=s.damping, tolerance=s.tolerance)

    # -- the whole ----------------------------------------------------------------------------

    def retrieve(self, question: str, *, top_k: int | None = None, rerank: bool = True,
                 vector: np.ndarray | None = None) -> Retrieval:
        """Ranked passages for a question; ``top_k`` of them (default: all candidates)."""
        s, snap = self.settings, self.snapshot
        timings: dict[str, float] = {}
        started = clock = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[name] = round((now - clock) * 1000.0, 3)
            clock = now

        if vector is None:
            vector = self.question_vector(question)
        lap("embed")
        dense = self.dense_scores(vector)
        facts = self.similar_facts(vector, s.top_facts)
        seeds = self.seeds(dense, facts)
        lap("seed")
        pagerank: dict = {"walk": s.walk, "iterations": 0, "delta": None, "converged": None, "damping": s.damping,
                          "tolerance": s.tolerance, "epsilon": s.epsilon}
        if seeds.sum() > 0:
            result = self.walk(seeds, rerank=rerank and self.reranker is not None)
            passage_scores = self.graph.passage_scores(result.scores)  # (#passages,)
            pagerank.update(iterations=result.iterations, delta=result.delta, converged=result.converged,
                            edge_visits=result.edge_visits)
            if result.proof is not None:
                pagerank["proof"] = result.proof
            order = "pagerank"
        else:
            passage_scores = dense  # nothing to personalise the walk with (e.g. an empty index)
            order = "dense"
        # a proven walk's first passages by its scores are the ones it proved, in their order
        candidates = top_indices(passage_scores, s.candidates)
        lap("pagerank")

        hits = [self._hit(int(i), rank, float(passage_scores[i]), float(dense[i]))
                for rank, i in enumerate(candidates, start=1)]
        status = self.reranker_status
        if rerank and self.reranker is not None and hits:
            scores = self.reranker.score(question, snap.passage_texts(candidates))
            by_rerank = sorted(range(len(hits)), key=lambda j: (-float(scores[j]), j))
            for rank, j in enumerate(by_rerank, start=1):
                hits[j].rerank_score = float(scores[j])
                hits[j].rerank_rank = rank
            fused = reciprocal_rank_fusion([list(range(len(hits))), by_rerank], k=s.rrf_k)
            hits = [hits[j] for j, _ in fused]
            for hit, (_, score) in zip(hits, fused, strict=True):
                hit.fused_score = score
            order = f"{order}+rerank"
        elif not rerank and self.reranker is not None:
            status = RerankerStatus("disabled", self.reranker.model_id, "reranking was turned off for this query")
        lap("rerank")
        for rank, hit in enumerate(hits, start=1):
            hit.rank = rank
        if top_k is not None:
            hits = hits[:top_k]
        timings["total"] = round((time.perf_counter() - started) * 1000.0, 3)
        return Retrieval(question=question, snapshot_id=snap.snapshot_id, passages=hits, seed_facts=facts,
                         order=order, reranker=status, pagerank=pagerank, timings_ms=timings)

    def _hit(self, index: int, rank: int, score: float, dense: float) -> PassageHit:
        row = self.snapshot.passages.row(index, named=True)
        return PassageHit(rank=rank, chunk_id=row["chunk_id"], doc_id=row["doc_id"], title=row["title"] or "",
                          text=row["text"], pagerank_rank=rank, pagerank_score=score, dense_score=dense,
                          location=row.get("location"))


def anchored_seeds(snapshot: Snapshot, anchors: np.ndarray, facts: list[FactHit], dense: np.ndarray,
                   passages: np.ndarray, passage_seed_weight: float) -> np.ndarray:
    """The (N,) seed weights of a walk anchored at entities (a deep question's local investigation).

    The anchor entities share a mass of 1 equally; the ends of ``facts`` get mass as in
    :meth:`Retriever.seeds`; the passages ``passages`` (indices into the snapshot's passages, the
    anchors' neighbourhood) get their similarity ``dense`` min–max scaled to
    [0, ``passage_seed_weight``].
    """
    seeds = np.zeros(snapshot.n_nodes, dtype=np.float64)
    anchors = np.asarray(anchors, dtype=np.int64)
    if anchors.size:
        np.add.at(seeds, anchors, 1.0 / anchors.size)
    for hit in facts:
        for entity in (int(snapshot.fact_subjects[hit.row]), int(snapshot.fact_objects[hit.row])):
            seeds[entity] += max(hit.similarity, 0.0) / max(int(snapshot.entity_passage_counts[entity]), 1)
    passages = np.asarray(passages, dtype=np.int64)
    if passages.size:
        values = dense[passages].astype(np.float64)
        low, high = values.min(), values.max()
        scaled = (values - low) / (high - low) if high > low else np.ones_like(values)
        seeds[snapshot.n_entities + passages] = scaled * passage_seed_weight
    return seeds
