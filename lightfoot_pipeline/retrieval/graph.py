"""Personalized PageRank over a snapshot's graph (its adjacency: ``snapshot/adjacency.py``).

Personalized PageRank walks the row-normalised matrix ``P = D⁻¹ A``: with probability ``damping``
the walker follows an edge, otherwise it jumps back to the seed distribution ``s``; a walker on a
node with no edges jumps back to ``s`` as well. The scores are the fixed point of

    x = (1 - damping) · s + damping · (x P + (mass on edgeless nodes) · s)

found by power iteration until the L1 change of ``x`` between two steps is below the tolerance:
the exact walk, whose every iteration reads the whole graph. The local walk (localwalk.py) reaches
the same ranking by forward push from the seeds, in time that follows the seeds' neighbourhood,
and proves it: :meth:`RetrievalGraph.ranked_pagerank` returns the first passages in the exact
walk's order from the local walk when its bounds prove that order within a cap on the work, and
from the exact walk otherwise. Retrieval uses it by default and keeps the exact walk as an option
and as its reference.

A snapshot's walk operators are prepared on first use and kept while the snapshot is in memory
(:func:`walk_graph`), so every retriever over one snapshot shares them. Both walks read the
adjacency's own arrays, which a snapshot maps from its files (format.py): the exact walk holds no
scaled or reordered copy of the graph (12 bytes a stored entry each, 0.3 GB at 800k passages), only
its degrees, so a replica and each reader view (permissions/views.py) hold the graph once.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from lightfoot_pipeline.retrieval.localwalk import EPSILON, LocalWalk
from lightfoot_pipeline.retrieval.rowsplit import RowSplit
from lightfoot_pipeline.snapshot.format import Snapshot

DAMPING = 0.9
# L1 change between successive iterates at which the walk stops (the scores sum to 1; the error is
# at most damping / (1 - damping) times this). Measured against a walk run to 1e-11, it gives the
# same 30 first passages in the same order for each of the bundled sample's 100 questions (MiniLM)
# and 200 questions of the synthetic MuSiQue-scale corpus, in 67 to 79 iterations (p50); 1e-4 (41
# to 46 iterations) missed the top 10's order on 2 of the 200 and the top 30's on 19 of them.
TOLERANCE = 1e-6
MAX_ITERATIONS = 200
# The local walk's proof of a ranking may walk this many edges per entry of the adjacency matrix,
# and at least PUSH_VISITS_FLOOR, before the exact walk serves the query instead: about where the
# exact walk (some 70 products, each reading every entry, in compiled sparse code split over two
# threads) becomes the cheaper: measured on the 2-core machine, the exact walk takes as long as 6
# (MuSiQue scale) to 9 (the sample) push visits per entry. That was measured while the exact walk
# ran on a reordered copy of the graph; reading the snapshot's graph in place, it takes about 1.3
# times as long (benchmarks/exact_walk.py at 100,000 passages), so this cap now hands a query over
# somewhat early, never wrongly: either walk ranks exactly. The floor, a few milliseconds of
# pushing, keeps small graphs local.
PUSH_VISITS_PER_ENTRY = 8.0
PUSH_VISITS_FLOOR = 100_000


@dataclass(frozen=True)
class PageRankResult:
    scores: np.ndarray  # (N,) sums to 1
    iterations: int
    delta: float  # L1 change at the last step
    converged: bool
    edge_visits: int | None = None  # edges the local walk read (None for the exact walk)
    top: np.ndarray | None = None  # (k,) passage indices, best first, where the walk proved the exact order
    proof: dict | None = None  # how the ranking was proven (ranked_pagerank): walk, rounds, epsilon


class RetrievalGraph:
    """The walk operators of an adjacency matrix, each prepared on first use and kept for every query."""

    def __init__(self, adjacency: sp.csr_matrix, n_entities: int) -> None:
        if adjacency.shape[0] != adjacency.shape[1]:
            raise ValueError(f"adjacency must be square, got {adjacency.shape}")
        self.adjacency = adjacency
        self.n_nodes = adjacency.shape[0]
        self.n_entities = n_entities
        self.n_passages = self.n_nodes - n_entities

    @cached_property
    def local(self) -> LocalWalk:
        """The forward-push walk (localwalk.py)."""
        return LocalWalk(self.adjacency, ranked_from=self.n_entities)

    @cached_property
    def exact_operator(self) -> tuple[RowSplit, np.ndarray]:
        """The exact walk's products with the adjacency A, split by rows (views of the arrays the
        local walk reads, no copy), and the nodes with no edge."""
        local = self.local
        adjacency = sp.csr_matrix((local.weights, local.indices, local.indptr), shape=(self.n_nodes, self.n_nodes),
                                  copy=False)
        return RowSplit(adjacency), np.flatnonzero(local.degree == 0)

    def prepare(self) -> None:
        """Prepare both walks' operators now (the local walk's proof may hand a query to the exact
        walk); neither depends on the damping, which each walk applies as it goes."""
        _ = self.exact_operator

    def personalized_pagerank(
        self,
        seeds: np.ndarray,
        damping: float = DAMPING,
        tolerance: float = TOLERANCE,
        max_iterations: int = MAX_ITERATIONS,
    ) -> PageRankResult:
        """PPR scores of every node for seed weights ``seeds`` (N,), normalised here to sum 1: the
        exact walk, by power iteration over the whole graph."""
        s, total = self._checked_seeds(seeds, damping)
        s = s / total  # (N,)
        walk, dangling = self.exact_operator
        inverse_degree = self.local.inverse_degree  # (N,): 1 / weighted degree, 0 where there is no edge
        restart = (1.0 - damping) * s  # (N,)
        x = s.copy()
        change, scaled = np.empty_like(x), np.empty_like(x)
        delta = np.inf
        iterations = 0
        while iterations < max_iterations:
            iterations += 1
            # One step of the walk, x_next = damping · Pᵀ x with P = D⁻¹ A; A is symmetric, so
            # Pᵀ x = A (D⁻¹ x): (N, N) x (N,) -> (N,)
            x_next = walk.matvec(np.multiply(inverse_degree, x, out=scaled))
            x_next *= damping
            x_next += restart
            if dangling.size:
                stranded = x[dangling].sum()  # walkers on edgeless nodes jump back to the seeds
                x_next += (damping * stranded) * s
            np.subtract(x_next, x, out=change)
            delta = float(np.abs(change, out=change).sum())
            x = x_next
            if delta < tolerance:
                break
        return PageRankResult(scores=x, iterations=iterations, delta=delta, converged=delta < tolerance)

    def local_pagerank(self, seeds: np.ndarray, damping: float = DAMPING, epsilon: float = EPSILON) -> PageRankResult:
        """PPR scores of every node for seed weights ``seeds`` (N,) by forward push from the seeds
        (localwalk.py): ``iterations`` counts pushes, ``delta`` is the residual mass left."""
        s, total = self._checked_seeds(seeds, damping)
        nodes = np.flatnonzero(s)
        scores, figures = self.local.run(nodes, s[nodes] / total, damping, epsilon)
        return PageRankResult(scores=scores, iterations=figures["pushes"], delta=figures["residual"],
                              converged=figures["converged"], edge_visits=figures["edge_visits"])

    def ranked_pagerank(self, seeds: np.ndarray, count: int, damping: float = DAMPING, epsilon: float = EPSILON,
                        tolerance: float = TOLERANCE) -> PageRankResult:
        """PPR scores for seed weights ``seeds`` (N,) that rank the first ``count`` passages in the
        exact walk's order: the local walk's, pushed from ``epsilon`` down until its bounds prove that
        order (localwalk.py), with ``top`` the proven passages best first; or, when the proof would
        walk more than :data:`PUSH_VISITS_PER_ENTRY` edges per entry of the graph (and
        :data:`PUSH_VISITS_FLOOR`), the exact walk's at ``tolerance`` (``top`` None: rank its
        scores). ``proof`` says which and what it took: ``{"walk": "local" | "exact", "ranks",
        "rounds", "epsilon", "edge_visits"}`` (the last three of the local walk)."""
        s, total = self._checked_seeds(seeds, damping)
        nodes = np.flatnonzero(s)
        cap = max(PUSH_VISITS_FLOOR, int(PUSH_VISITS_PER_ENTRY * self.adjacency.nnz))
        ranking = self.local.ranked(nodes, s[nodes] / total, damping, epsilon, count, cap)
        proof = {"walk": "local", "ranks": count, "rounds": ranking.rounds, "epsilon": ranking.epsilon,
                 "edge_visits": ranking.edge_visits}
        if ranking.top is not None:
            return PageRankResult(scores=ranking.scores, iterations=ranking.pushes, delta=ranking.residual,
                                  converged=ranking.converged, edge_visits=ranking.edge_visits,
                                  top=ranking.top - self.n_entities, proof=proof)
        exact = self.personalized_pagerank(seeds, damping=damping, tolerance=tolerance)
        return dataclasses.replace(exact, proof={**proof, "walk": "exact"})

    def _checked_seeds(self, seeds: np.ndarray, damping: float) -> tuple[np.ndarray, float]:
        if not 0.0 < damping < 1.0:
            raise ValueError(f"damping must be in (0, 1), got {damping}")
        s = np.asarray(seeds, dtype=np.float64).ravel()  # (N,)
        if s.shape[0] != self.n_nodes:
            raise ValueError(f"seed vector has {s.shape[0]} entries for a graph of {self.n_nodes} nodes")
        if np.any(s < 0) or not np.isfinite(s).all():
            raise ValueError("seed weights must be finite and non-negative")
        total = float(s.sum())
        if total <= 0:
            raise ValueError("seed weights are all zero: nothing to personalise the walk with")
        return s, total

    def passage_scores(self, scores: np.ndarray) -> np.ndarray:
        """The passage part of a node vector: (N,) -> (#passages,)."""
        return scores[self.n_entities:]


_GRAPHS: weakref.WeakKeyDictionary[Snapshot, RetrievalGraph] = weakref.WeakKeyDictionary()
_GRAPHS_LOCK = threading.Lock()


def walk_graph(snapshot: Snapshot) -> RetrievalGraph:
    """The walk operators of a snapshot's graph, one set per snapshot in memory."""
    with _GRAPHS_LOCK:
        graph = _GRAPHS.get(snapshot)
        if graph is None:
            graph = _GRAPHS[snapshot] = RetrievalGraph(snapshot.adjacency, snapshot.n_entities)
        return graph
