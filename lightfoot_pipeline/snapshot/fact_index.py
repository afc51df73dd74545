"""The fact index a large snapshot carries: centroids trained on its fact vectors, and each fact's group.

For fact tables of ``INDEX_MIN_ROWS`` rows or more, the export groups the facts by their nearest of
a few hundred centroids (``fact_index.npz``; ``retrieval/seeding.py`` scores a question against
the centroids, then only the rows of the closest groups). The centroids are trained by spherical
k-means on a sample chosen by row id (the smallest fact ids, content hashes), and every row goes to
its nearest centroid: the index is a function of the live vectors alone, rebuilt with every
snapshot, as the erasure invariant requires of query-time indexes.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import polars as pl

from lightfoot_pipeline.snapshot.spill import release

# Fact tables from this size get an inverted-file index. Below it exact float16 scoring is fast
# enough (88k facts: 5.8 ms of CPU on the loaded 2-core machine) and loses nothing; the index
# (0.8 ms probing 4% of the groups, 1.6 ms at 15%, about 2.5 times less than exact at 40%) pays
# where exact scoring takes tens of ms.
INDEX_MIN_ROWS = 200_000
KMEANS_ITERATIONS = 8
SAMPLE_PER_LIST = 32  # k-means trains on this many rows per centroid
BLOCK_ROWS = 65_536  # rows per product when assigning rows to centroids, at most
BLOCK_PRODUCT_BYTES = 64 << 20  # and no more rows than keep a block's (rows, lists) float32 product within this
ASSIGN_THREADS = 2  # blocks assigned at once


def n_lists(n_rows: int) -> int:
    """Centroids for a table of n rows: about half the square root, a few thousand rows each."""
    return int(min(4096, max(8, round(np.sqrt(n_rows) / 2))))


def train_centroids(vectors: np.ndarray, sample_rows: np.ndarray, lists: int) -> np.ndarray:
    """(lists, dim) unit centroids by spherical k-means on the sample rows, started from the
    first ``lists`` of them: the same sample always gives the same centroids."""
    sample = np.asarray(vectors[sample_rows], dtype=np.float32)  # (S, dim)
    release(vectors)
    centroids = sample[:lists].copy()
    for _ in range(KMEANS_ITERATIONS):
        nearest = np.argmax(sample @ centroids.T, axis=1)  # (S, dim) x (dim, lists) -> (S,)
        sums = np.zeros_like(centroids)
        np.add.at(sums, nearest, sample)
        empty = ~np.any(sums, axis=1)
        sums[empty] = centroids[empty]  # a centroid nobody chose keeps its place
        centroids = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return centroids.astype(np.float32)


def assign(vectors, centroids: np.ndarray, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """(n,) index of each row's nearest centroid (ties to the lower index). The blocks of rows
    are independent products of the same shapes whatever runs them, so they run
    on two threads (the BLAS library holds one each, and releases the GIL) with the same result.
    Memory-mapped vectors (an export's: spill.py) have their pages let go after each block."""
    n = vectors.shape[0]
    out = np.empty(n, dtype=np.int32)
    # Rows a block: what bounds the memory of an assignment, whatever the number of centroids (at
    # a million passages, 1,400 centroids: a block of 65,536 rows would be a product of 370 MB).
    size = int(max(1, min(BLOCK_ROWS, BLOCK_PRODUCT_BYTES // (4 * max(1, centroids.shape[0])))))

    def block(lo: int) -> int:
        rows = np.asarray(vectors[lo : lo + size], dtype=np.float32)
        out[lo : lo + rows.shape[0]] = np.argmax(rows @ centroids.T, axis=1)  # (b, dim) x (dim, L)
        release(vectors)
        return min(n, lo + size)

    with ThreadPoolExecutor(max_workers=ASSIGN_THREADS) as pool:
        for done in pool.map(block, range(0, n, size)):
            if progress is not None:
                progress(done, n)
    return out


def sample_rows(ids: np.ndarray | pl.Series, lists: int) -> np.ndarray:
    """Rows that train the centroids: those of the smallest ids, in id order."""
    size = min(len(ids), SAMPLE_PER_LIST * lists)
    # the smallest (id, row) pairs, then in that order: a stable sort's first rows, without sorting every row
    smallest = pl.DataFrame({"id": ids}).with_row_index("row").bottom_k(size, by=["id", "row"])
    return smallest.sort(["id", "row"]).get_column("row").to_numpy().astype(np.int64)
