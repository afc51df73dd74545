"""Matrix–vector products split by rows over the query's two threads.

A query's products are memory-bound: the fact vectors alone are 135 MB at MuSiQue scale, and a
PageRank step streams the whole sparse graph. One core cannot draw the memory bandwidth that two
can, so each product is cut into row blocks of about equal work and the blocks run on the calling
thread and a small shared pool (NumPy's BLAS and SciPy's sparse kernels release the GIL). The BLAS
library itself stays on one thread (see ``retrieve.query_thread_limits``): its own idle workers
spin between calls and would take the core from the next product.

Every row is computed by the same kernel whatever the split, and the split depends only on the
matrix, so the scores do not depend on the number of threads between two equal indexes.
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

THREADS = min(2, os.cpu_count() or 1)
# Products smaller than this (stored values per thread) are not worth a thread hand-off; a sparse
# value costs several dense ones (an index read and a scattered load).
MIN_DENSE_PER_THREAD = 200_000
MIN_SPARSE_PER_THREAD = 50_000

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=max(1, THREADS - 1), thread_name_prefix="rowsplit")
        return _POOL


def _rows(matrix: np.ndarray | sp.csr_matrix, lo: int, hi: int) -> np.ndarray | sp.csr_matrix:
    """Rows ``lo:hi`` of ``matrix`` as a view of its arrays, not a copy. A CSR matrix's row slice
    copies its values and indices, and so does SciPy's constructor given views of less than half
    an array; the block takes the views as its arrays instead (a snapshot's graph is mapped from
    its files and shared)."""
    if not sp.issparse(matrix):
        return matrix[lo:hi]
    start, end = int(matrix.indptr[lo]), int(matrix.indptr[hi])
    block = sp.csr_matrix((hi - lo, matrix.shape[1]), dtype=matrix.dtype)
    block.indptr = (matrix.indptr[lo : hi + 1] - start).astype(matrix.indices.dtype)  # (rows + 1,): the only copy
    block.indices, block.data = matrix.indices[start:end], matrix.data[start:end]
    return block


class RowSplit:
    """``matrix @ x`` for a fixed (n, m) matrix, dense or CSR, computed in row blocks that are
    views of the matrix's own arrays."""

    def __init__(self, matrix: np.ndarray | sp.csr_matrix, threads: int = THREADS) -> None:
        self.shape = matrix.shape
        if sp.issparse(matrix):
            matrix = sp.csr_matrix(matrix)
            work = matrix.nnz
            pieces = max(1, min(threads, work // MIN_SPARSE_PER_THREAD))
            # Cut where the cumulative count of stored values crosses each 1/pieces share.
            cuts = np.searchsorted(matrix.indptr, np.linspace(0, work, pieces + 1)[1:-1]).tolist()
        else:
            work = matrix.shape[0] * matrix.shape[1]
            pieces = max(1, min(threads, work // MIN_DENSE_PER_THREAD))
            cuts = [matrix.shape[0] * i // pieces for i in range(1, pieces)]
        bounds = [0, *cuts, matrix.shape[0]]
        self.blocks = [(lo, _rows(matrix, lo, hi)) for lo, hi in itertools.pairwise(bounds) if hi > lo]
        self.dtype = np.result_type(matrix.dtype, np.float32)

    def matvec(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """(n,) = (n, m) x (m,)."""
        if out is None:
            out = np.empty(self.shape[0], dtype=np.result_type(self.dtype, x.dtype))

        def block_product(lo: int, block) -> None:
            out[lo : lo + block.shape[0]] = block @ x  # (rows, m) x (m,) -> (rows,)

        if len(self.blocks) <= 1:
            for lo, block in self.blocks:
                block_product(lo, block)
            return out
        futures = [_pool().submit(block_product, lo, block) for lo, block in self.blocks[1:]]
        block_product(*self.blocks[0])
        for future in futures:
            future.result()
        return out
