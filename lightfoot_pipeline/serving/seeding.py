"""Similarity of a question to every passage or fact of a snapshot, for seeding the walk.

A snapshot stores its vectors at half precision (snapshot.py). Two ways score them:

- **Exact at reduced precision** (:class:`HalfScorer`): one float16 matrix–vector product over
  every row (torch's CPU kernel reads the half-precision rows directly; NumPy would convert them
  first, ten times slower), then the best candidates are scored again in float32 from the same
  stored rows, so the ranking at the top does not depend on float16 rounding of the products.
- **An inverted-file index** (:class:`InvertedFileScorer`) for large fact tables: the rows are
  stored grouped by their nearest of a few hundred centroids, and a question scores the centroids,
  then only the rows of the ``probes`` closest groups (:func:`probes_for`). The centroids are trained by k-means on a
  sample chosen by row id (the smallest fact ids, content hashes), and every row goes to its nearest
  centroid: the index is a function of the live vectors alone, rebuilt with every snapshot, as the
  erasure invariant requires of query-time indexes.

Measured on the 2-core machine: a float16 product reads about 15 GB/s, 5 ms for 100,000 rows of
384 dimensions, where float32 NumPy takes 24 ms (and NumPy's own float16 product 240 ms).
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np

REFINE = 64  # extra rows scored again in float32 beyond those asked for
# Fact tables from this size get an inverted-file index. Below it exact float16 scoring is fast
# enough (88k facts: 5.8 ms of CPU on the loaded 2-core machine) and loses nothing; the index
# (0.8 ms probing 4% of the groups, 1.6 ms at 15%, about 2.5 times less than exact at 40%) pays
# where exact scoring takes tens of ms.
INDEX_MIN_ROWS = 200_000
# Share of the groups a query scores. On the bundled sample's dev questions with MiniLM (an index
# of 65 groups built for the test), exact seeding's recall@2/5/10 and top 10 are kept at 40%
# (recall@2 -0.000, top-10 overlap 0.998); at 25% recall@2 drops by 0.01 (overlap 0.99), at 15%
# by 0.017 (0.97). With the hashing embedder's vectors, which cluster poorly, 15% of 149 groups
# at MuSiQue scale finds the exact top 2 facts for 43 of 50 queries.
# How many groups a question scores: PROBE_FACTOR x the square root of the number of groups, so
# that the rows scored grow slower than the facts (groups grow with the square root of the facts,
# so the rows scored grow as the 3/4 power). 3.2 probes the share measured on the sample above at
# its 65 groups (26 of them, 40%). At 100,000 synthetic passages (777k facts, 441 groups: 68
# probed, 15%) the top 10 passages of 120 questions overlap exact seeding's by 0.998 and the top
# 2 are the same for 119, as at 40%; at 6% the overlap falls to 0.985.
PROBE_FACTOR = 3.2
MIN_PROBES = 8
KMEANS_ITERATIONS = 8
SAMPLE_PER_LIST = 32  # k-means trains on this many rows per centroid
BLOCK_ROWS = 65_536  # rows per product when assigning rows to centroids


def _torch():
    import torch

    return torch


def _as_tensor(matrix: np.ndarray):
    """A torch view of a (possibly read-only, memory-mapped) array, without a copy."""
    torch = _torch()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*", category=UserWarning)
        return torch.from_numpy(matrix)


class HalfScorer:
    """``vectors @ q`` over every row of a float16 (n, dim) matrix, exact in float32 at the top."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = vectors  # (n, dim) float16, usually memory-mapped
        self._matrix = _as_tensor(np.ascontiguousarray(vectors, dtype=np.float16))

    def scores(self, q: np.ndarray, best: int) -> np.ndarray:
        """(n,) float32 similarities; the ``best + REFINE`` highest are computed in float32."""
        n = self.vectors.shape[0]
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        torch = _torch()
        query = torch.from_numpy(np.ascontiguousarray(q, dtype=np.float16))
        coarse = torch.mv(self._matrix, query).float().numpy()  # (n, dim) x (dim,) -> (n,)
        k = min(n, best + REFINE)
        top = np.argpartition(-coarse, k - 1)[:k] if k < n else np.arange(n)
        coarse[top] = _exact_rows(self.vectors, top, q)
        return coarse


def _exact_rows(vectors: np.ndarray, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """float32 similarities of some rows, in the order given."""
    return np.asarray(vectors[rows], dtype=np.float32) @ q.astype(np.float32)  # (k, dim) x (dim,)


# -- the inverted-file index ---------------------------------------------------------------------


def n_lists(n_rows: int) -> int:
    """Centroids for a table of n rows: about half the square root, a few thousand rows each."""
    return int(min(4096, max(8, round(np.sqrt(n_rows) / 2))))


def train_centroids(vectors: np.ndarray, sample_rows: np.ndarray, lists: int) -> np.ndarray:
    """(lists, dim) unit centroids by spherical k-means on the sample rows, started from the
    first ``lists`` of them: the same sample always gives the same centroids."""
    sample = np.asarray(vectors[sample_rows], dtype=np.float32)  # (S, dim)
    centroids = sample[:lists].copy()
    for _ in range(KMEANS_ITERATIONS):
        nearest = np.argmax(sample @ centroids.T, axis=1)  # (S, dim) x (dim, lists) -> (S,)
        sums = np.zeros_like(centroids)
        np.add.at(sums, nearest, sample)
        empty = ~np.any(sums, axis=1)
        sums[empty] = centroids[empty]  # a centroid nobody chose keeps its place
        centroids = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return centroids.astype(np.float32)


def assign(vectors: np.ndarray, centroids: np.ndarray, progress: Callable[[int, int], None] | None = None
           ) -> np.ndarray:
    """(n,) index of each row's nearest centroid (ties to the lower index)."""
    n = vectors.shape[0]
    out = np.empty(n, dtype=np.int32)
    for lo in range(0, n, BLOCK_ROWS):
        block = np.asarray(vectors[lo : lo + BLOCK_ROWS], dtype=np.float32)
        out[lo : lo + block.shape[0]] = np.argmax(block @ centroids.T, axis=1)  # (b, dim) x (dim, L)
        if progress is not None:
            progress(min(n, lo + BLOCK_ROWS), n)
    return out


def sample_rows(ids: np.ndarray, lists: int) -> np.ndarray:
    """Rows that train the centroids: those of the smallest ids, in id order."""
    size = min(len(ids), SAMPLE_PER_LIST * lists)
    order = np.argsort(ids, kind="stable")
    return order[:size]


def probes_for(lists: int, probe_share: float | None = None) -> int:
    """Groups a question scores in an index of ``lists`` groups: ``probe_share`` of them when given,
    else PROBE_FACTOR x sqrt(lists); never fewer than MIN_PROBES nor more than there are."""
    wanted = probe_share * lists if probe_share is not None else PROBE_FACTOR * np.sqrt(lists)
    return int(min(lists, max(MIN_PROBES, int(np.ceil(wanted)))))


class InvertedFileScorer:
    """Similarities of the rows in the groups closest to the question; -inf elsewhere.

    The rows of group ``g`` are ``offsets[g]:offsets[g + 1]`` (the snapshot stores its facts in
    group order).
    """

    def __init__(self, vectors: np.ndarray, centroids: np.ndarray, offsets: np.ndarray,
                 probe_share: float | None = None) -> None:
        if offsets.shape[0] != centroids.shape[0] + 1 or int(offsets[-1]) != vectors.shape[0]:
            raise ValueError("the index's group offsets do not match its centroids and rows")
        self.vectors = vectors
        self.centroids = np.asarray(centroids, dtype=np.float32)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self._matrix = _as_tensor(np.ascontiguousarray(vectors, dtype=np.float16))
        self.probes = probes_for(self.centroids.shape[0], probe_share)

    def scores(self, q: np.ndarray, best: int) -> np.ndarray:
        torch = _torch()
        q32 = np.asarray(q, dtype=np.float32)
        out = np.full(self.vectors.shape[0], -np.inf, dtype=np.float32)
        near = np.argpartition(-(self.centroids @ q32), self.probes - 1)[: self.probes]  # (L, dim) x (dim,)
        query = torch.from_numpy(q32.astype(np.float16))
        rows = []
        for group in np.sort(near):
            lo, hi = int(self.offsets[group]), int(self.offsets[group + 1])
            if hi > lo:
                out[lo:hi] = torch.mv(self._matrix[lo:hi], query).float().numpy()
                rows.append(np.arange(lo, hi))
        if rows:
            probed = np.concatenate(rows)
            k = min(probed.size, best + REFINE)
            top = probed[np.argpartition(-out[probed], k - 1)[:k]]
            out[top] = _exact_rows(self.vectors, top, q32)
        return out
