"""Personalized PageRank computed locally from the seeds, by forward push.

The exact walk (graph.py) multiplies the whole graph into the score vector at every iteration,
so its cost follows the corpus. Forward push (Andersen, Chung and Lang, 2006) keeps two vectors,
settled scores ``p`` and residual mass ``r``, starting from ``r = s``: pushing a node ``u`` settles
``(1 - damping) · r[u]`` into ``p[u]`` and spreads ``damping · r[u]`` over ``u``'s neighbours in
proportion to the edge weights. A node is pushed while its residual exceeds ``epsilon`` times its
weighted degree, so the work done is at most ``1 / (epsilon · (1 - damping))`` edge visits, however
large the graph: the cost follows the seeds' neighbourhood.

On an undirected graph the score of a node ``v`` is then short of the exact one by at most
``epsilon · degree(v)``; a passage's degree is its number of mentions, so ``epsilon`` bounds the
passage scores' error directly. Walkers on an edgeless node jump back to the seeds in the exact
walk; that scales every score by the same factor, so here their mass is set aside and the scores
are divided by what stays in the graph, which gives the same ranking.

The loop runs compiled (numba, without the GIL, so concurrent queries run in parallel).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

# Residual per unit of weighted degree below which a node is not pushed. Measured against the
# exact walk (hashing embedder): mean top-10 overlap 0.992 on the bundled sample's 50 dev questions
# (1e-5: 0.982, 1e-6: 0.996) and 0.997 on 60 questions of the synthetic MuSiQue-scale corpus, where
# it walks about 280k edges (CPU 7.5 ms, against 20.6 ms for the exact walk in the same run; 1e-6
# walks 1.3M edges in 48 ms).
EPSILON = 3e-6
MAX_PUSHES = 50_000_000  # a guard only: the work bound above is far below it for any EPSILON used


@njit(cache=True, nogil=True)
def _push(indptr, indices, weights, inverse_degree, threshold, seed_nodes, seed_mass, damping, max_pushes):
    n = indptr.shape[0] - 1
    p = np.zeros(n)
    r = np.zeros(n)
    queued = np.zeros(n, dtype=np.bool_)
    queue = np.empty(n, dtype=np.int64)  # a ring: a node is at most once in it
    head = 0
    tail = 0
    size = 0
    for i in range(seed_nodes.shape[0]):
        r[seed_nodes[i]] += seed_mass[i]
    for i in range(seed_nodes.shape[0]):
        u = seed_nodes[i]
        if not queued[u] and r[u] > threshold[u]:
            queued[u] = True
            queue[tail] = u
            tail += 1
            if tail == n:
                tail = 0
            size += 1
    settled = 0.0
    stranded = 0.0
    pushes = 0
    visits = 0
    while size > 0 and pushes < max_pushes:
        u = queue[head]
        head += 1
        if head == n:
            head = 0
        size -= 1
        queued[u] = False
        mass = r[u]
        r[u] = 0.0
        p[u] += (1.0 - damping) * mass
        settled += (1.0 - damping) * mass
        pushes += 1
        if indptr[u + 1] == indptr[u]:
            stranded += damping * mass  # an edgeless node: its walkers leave the graph
            continue
        share = damping * mass * inverse_degree[u]
        for k in range(indptr[u], indptr[u + 1]):
            v = indices[k]
            r[v] += share * weights[k]
            if not queued[v] and r[v] > threshold[v]:
                queued[v] = True
                queue[tail] = v
                tail += 1
                if tail == n:
                    tail = 0
                size += 1
        visits += indptr[u + 1] - indptr[u]
    return p, settled, stranded, pushes, visits


class LocalWalk:
    """Forward-push PPR over a symmetric adjacency matrix, prepared once for every query."""

    def __init__(self, adjacency: sp.csr_matrix) -> None:
        adjacency = sp.csr_matrix(adjacency)
        adjacency.sort_indices()
        self.indptr = adjacency.indptr.astype(np.int64)
        self.indices = adjacency.indices.astype(np.int64)
        self.weights = adjacency.data.astype(np.float64)
        self.degree = np.asarray(adjacency.sum(axis=1), dtype=np.float64).ravel()  # (N,) weighted
        self.inverse_degree = np.divide(1.0, self.degree, out=np.zeros_like(self.degree), where=self.degree > 0)
        self.n_nodes = adjacency.shape[0]

    def run(self, seed_nodes: np.ndarray, seed_mass: np.ndarray, damping: float, epsilon: float
            ) -> tuple[np.ndarray, dict]:
        """Scores (N,) for seed mass (summing to 1) on seed nodes, and the walk's figures: pushes,
        edge visits, and the residual mass left unsettled (what the scores may still be short of)."""
        if not epsilon > 0:
            raise ValueError(f"epsilon must be positive, got {epsilon}")
        order = np.argsort(seed_nodes, kind="stable")
        p, settled, stranded, pushes, visits = _push(
            self.indptr, self.indices, self.weights, self.inverse_degree, epsilon * self.degree,
            np.asarray(seed_nodes, dtype=np.int64)[order], np.asarray(seed_mass, dtype=np.float64)[order],
            float(damping), MAX_PUSHES,
        )
        kept = 1.0 - stranded
        if kept > 0:
            p /= kept
        residual = max(0.0, 1.0 - settled - stranded)
        return p, {"pushes": int(pushes), "edge_visits": int(visits), "residual": residual,
                   "converged": pushes < MAX_PUSHES}
