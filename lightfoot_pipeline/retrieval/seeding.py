"""Similarity of a question to every passage or fact of a snapshot, for seeding the walk.

A snapshot stores its vectors at half precision (snapshot/format.py). Two ways score them:

- **Exact at reduced precision** (:class:`HalfScorer`): one float16 matrix–vector product over
  every row (torch's CPU kernel reads the half-precision rows directly; NumPy would convert them
  first, ten times slower), then the best candidates are scored again in float32 from the same
  stored rows, so the ranking at the top does not depend on float16 rounding of the products.
- **An inverted-file index** (:class:`InvertedFileScorer`) for large fact tables: the rows are
  stored grouped by their nearest of a few hundred centroids (``snapshot/fact_index.py`` trains
  them at export), and a question scores the centroids, then only the rows of the ``probes``
  closest groups (:func:`probes_for`). A snapshot that carries eight-bit codes of its facts
  (``snapshot/codes.py``) has the probed rows scored by an int8 product of the codes, half the
  bytes of the float16 rows, and only the best ``CODE_REFINE`` beyond those asked for read from
  the float16 rows and scored again in float32: a replica then keeps the codes' pages resident,
  not the float16 rows'.

Measured on the 2-core machine: a float16 product reads about 15 GB/s, 5 ms for 100,000 rows of
384 dimensions, where float32 NumPy takes 24 ms (and NumPy's own float16 product 240 ms).

The int8 product is summed one of two ways, whichever is faster on the CPU at hand (measured once
per process: :func:`int8_kernel`), and both give the same sums, bit for bit: torch's int8 product
(``_int_mm``, int32 sums), fast where the CPU has int8 dot-product instructions (VNNI, AMX) and 8
times slower than the other where it has not (an AVX2 AMD EPYC: 210 ms against 27 ms for 70,000
rows of 384 codes, one thread); or the codes converted to float32 a block of rows at a time and
multiplied in float32. The float32 sums are exact: each product of two codes is an integer of
magnitude at most 127², and the sum of up to :data:`EXACT_FLOAT_COLUMNS` of them stays below
2²⁴, where every integer is a float32, so no partial sum is rounded whatever the order.

A reader view's vectors are rows of its snapshot's matrix (snapshot/shared_rows.py ``SharedRows``):
both scorers then read that matrix, either the whole of it with the view's rows picked from the
products, or (for a view of a small part of it, or of a group whose rows are not consecutive in
it) the view's rows gathered for the product. Each row's product does not depend on the rows
beside it (torch's half-precision kernel computes one dot product per row), so a view's scores
are those a snapshot holding its rows alone gives, bit for bit.
"""

from __future__ import annotations

import functools
import time
import warnings

import numpy as np

from lightfoot_pipeline.settings import INT8_KERNEL_ENV, SettingsError, int8_kernel_name
from lightfoot_pipeline.snapshot.codes import LEVELS, RowCodes, encode_query
from lightfoot_pipeline.snapshot.shared_rows import SharedRows, Vectors, consecutive

REFINE = 64  # extra rows scored again in float32 beyond those asked for
# Extra rows scored again from the float16 rows after an int8 product of the codes, whose error
# is larger (a product's error has a standard deviation of about 5e-4 for unit vectors of 384
# dimensions, against about 1e-4 for float16): on 570,000 random unit vectors the exact top 10
# are within the codes' top 74; 256 leaves room for the ties of clustered vectors and costs 256
# rows read (0.2 MB) a query.
CODE_REFINE = 256
QUERY_COLUMNS = 8  # the int8 product's right-hand side: the question's codes and seven zero columns
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
# A view that holds under this share of its snapshot's rows gathers them for each product; above
# it, the whole matrix is scored (reading every row costs less than gathering most of them).
GATHER_BELOW_SHARE = 1 / 3


# The int8 product's kernels (see the module docstring); LIGHTFOOT_INT8_KERNEL names one, else the
# faster is measured on a block of KERNEL_PROBE_ROWS rows.
INT8_KERNELS = ("int_mm", "float32")
KERNEL_PROBE_ROWS = 16_384
FLOAT_BLOCK_ROWS = 4_096  # rows converted to float32 at a time (6 MB at 384 columns)
# Codes per row up to which float32 sums of code products are exact: LEVELS² x this < 2²⁴.
EXACT_FLOAT_COLUMNS = (1 << 24) // (LEVELS * LEVELS)


def _torch():
    import torch

    return torch


@functools.cache
def int8_kernel(columns: int) -> str:
    """The kernel that sums int8 products of rows of ``columns`` codes in this process: the one
    LIGHTFOOT_INT8_KERNEL names, else the faster of the two on a block of random codes (float32
    only where its sums are exact)."""
    named = int8_kernel_name()
    if named:
        if named not in INT8_KERNELS:
            raise SettingsError(f"{INT8_KERNEL_ENV}={named!r}: one of {', '.join(INT8_KERNELS)}",
                                hint=f"set {INT8_KERNEL_ENV} to one of those, or unset it (the faster, measured)")
        if named == "float32" and columns > EXACT_FLOAT_COLUMNS:
            raise SettingsError(f"{INT8_KERNEL_ENV}=float32: its sums are exact up to {EXACT_FLOAT_COLUMNS} "
                                f"codes a row, these rows have {columns}", hint=f"unset {INT8_KERNEL_ENV}")
        return named
    if columns > EXACT_FLOAT_COLUMNS:
        return "int_mm"
    torch = _torch()
    generator = torch.Generator().manual_seed(0)
    block = torch.randint(-LEVELS, LEVELS + 1, (KERNEL_PROBE_ROWS, columns), dtype=torch.int8, generator=generator)
    rhs = torch.zeros((columns, QUERY_COLUMNS), dtype=torch.int8)
    rhs[:, 0] = block[0]
    timings = {}
    for kernel in INT8_KERNELS:
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            code_sums(block, rhs, kernel)
            best = min(best, time.perf_counter() - started)
        timings[kernel] = best
    return min(INT8_KERNELS, key=lambda kernel: timings[kernel])


def code_sums(block, rhs, kernel: str) -> np.ndarray:
    """(rows,) the sums of products of each row of ``block`` ((rows, columns) int8) with the first
    column of ``rhs`` ((columns, QUERY_COLUMNS) int8), as float32 (each an integer, exactly)."""
    torch = _torch()
    if kernel == "int_mm":
        # torch's one int8 product that sums in int32: torch.mv of int8 sums in int8 and overflows;
        # NumPy's has no fast int8 kernel.
        return torch._int_mm(block, rhs)[:, 0].numpy().astype(np.float32)  # noqa: SLF001
    query = rhs[:, 0].to(torch.float32)
    rows = block.shape[0]
    out = torch.empty(rows, dtype=torch.float32)
    converted = torch.empty((min(rows, FLOAT_BLOCK_ROWS), block.shape[1]), dtype=torch.float32)
    for lo in range(0, rows, FLOAT_BLOCK_ROWS):
        hi = min(rows, lo + FLOAT_BLOCK_ROWS)
        piece = converted[: hi - lo]
        piece.copy_(block[lo:hi])
        torch.mv(piece, query, out=out[lo:hi])
    return out.numpy()


def _as_tensor(matrix: np.ndarray):
    """A torch view of a (possibly read-only, memory-mapped) array, without a copy."""
    torch = _torch()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*", category=UserWarning)
        return torch.from_numpy(matrix)


class _HalfMatrix:
    """The float16 matrix a scorer multiplies: a snapshot's own, or the one a view's rows are of."""

    def __init__(self, vectors: Vectors) -> None:
        torch = _torch()
        if isinstance(vectors, SharedRows):
            self.matrix = _as_tensor(np.ascontiguousarray(vectors.matrix, dtype=np.float16))  # (n, dim)
            self.rows: np.ndarray | None = vectors.rows  # (m,) rows of the matrix, the view's order
            self.row_tensor = torch.from_numpy(vectors.rows)
        else:
            self.matrix = _as_tensor(np.ascontiguousarray(vectors, dtype=np.float16))  # (m, dim)
            self.rows = None

    def products(self, query, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """(hi - lo,) float32: the half-precision products of the view's rows lo:hi (every row by default)."""
        torch = _torch()
        if self.rows is None:
            return torch.mv(self.matrix[lo:hi], query).float().numpy()  # (rows, dim) x (dim,) -> (rows,)
        rows = self.rows[lo:hi]
        piece = consecutive(rows)
        if piece is not None:  # consecutive rows of the matrix: a slice of it, no gather
            return torch.mv(self.matrix[piece], query).float().numpy()
        if rows.size >= GATHER_BELOW_SHARE * self.matrix.shape[0]:
            return torch.mv(self.matrix, query).float().numpy()[rows]  # (n, dim) x (dim,) -> (n,), then picked
        gathered = torch.index_select(self.matrix, 0, self.row_tensor[lo:hi])  # (rows, dim)
        return torch.mv(gathered, query).float().numpy()


class HalfScorer:
    """``vectors @ q`` over every row of a float16 (n, dim) matrix, exact in float32 at the top."""

    def __init__(self, vectors: Vectors) -> None:
        self.vectors = vectors  # (n, dim) float16, usually memory-mapped, or a view's rows of such
        self._matrix = _HalfMatrix(vectors)

    def scores(self, q: np.ndarray, best: int) -> np.ndarray:
        """(n,) float32 similarities; the ``best + REFINE`` highest are computed in float32."""
        n = self.vectors.shape[0]
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        torch = _torch()
        query = torch.from_numpy(np.ascontiguousarray(q, dtype=np.float16))
        coarse = self._matrix.products(query)  # (n, dim) x (dim,) -> (n,)
        k = min(n, best + REFINE)
        top = np.argpartition(-coarse, k - 1)[:k] if k < n else np.arange(n)
        coarse[top] = _exact_rows(self.vectors, top, q)
        return coarse


def _exact_rows(vectors: Vectors, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """float32 similarities of some rows, in the order given."""
    return np.asarray(vectors[rows], dtype=np.float32) @ q.astype(np.float32)  # (k, dim) x (dim,)


class _CodeMatrix:
    """The int8 codes a scorer multiplies: those of the matrix a snapshot's (or a view's) rows are of."""

    def __init__(self, codes: RowCodes, vectors: Vectors) -> None:
        torch = _torch()
        base = vectors.matrix if isinstance(vectors, SharedRows) else vectors
        if codes.rows != base.shape[0] or not codes.fits(base.shape[1]):
            raise ValueError(f"codes of {codes.rows} rows of {codes.codes.shape[1]} columns are not those of "
                             f"vectors of shape {base.shape}")
        self.codes = _as_tensor(codes.codes)  # (n, columns) int8
        self.scales = codes.scales  # (n,) float32
        self.rows: np.ndarray | None = vectors.rows if isinstance(vectors, SharedRows) else None
        self.row_tensor = torch.from_numpy(vectors.rows) if isinstance(vectors, SharedRows) else None
        self.kernel = int8_kernel(int(codes.codes.shape[1]))

    def query(self, q: np.ndarray) -> tuple[object, float]:
        """The question's codes as the product's (columns, QUERY_COLUMNS) right-hand side, and its scale."""
        torch = _torch()
        codes, scale = encode_query(q)
        rhs = torch.zeros((codes.shape[0], QUERY_COLUMNS), dtype=torch.int8)
        rhs[:, 0] = torch.from_numpy(codes)
        return rhs, scale

    def products(self, query: tuple[object, float], lo: int, hi: int) -> np.ndarray:
        """(hi - lo,) float32: the coded products of the view's rows lo:hi."""
        torch = _torch()
        rhs, scale = query
        if self.rows is None:
            block, scales = self.codes[lo:hi], self.scales[lo:hi]
        else:
            rows = self.rows[lo:hi]
            piece = consecutive(rows)
            if piece is not None:
                block, scales = self.codes[piece], self.scales[piece]
            else:
                block, scales = torch.index_select(self.codes, 0, self.row_tensor[lo:hi]), self.scales[rows]
        # (rows, columns) x (columns,) -> (rows,) integer sums, by this CPU's faster kernel
        sums = code_sums(block, rhs, self.kernel)
        return sums * (np.asarray(scales, dtype=np.float32) * np.float32(scale))


# -- the inverted-file index (built by snapshot/fact_index.py) ---------------------------------


def probes_for(lists: int, probe_share: float | None = None) -> int:
    """Groups a question scores in an index of ``lists`` groups: ``probe_share`` of them when given,
    else PROBE_FACTOR x sqrt(lists); never fewer than MIN_PROBES nor more than there are."""
    wanted = probe_share * lists if probe_share is not None else PROBE_FACTOR * np.sqrt(lists)
    return int(min(lists, max(MIN_PROBES, int(np.ceil(wanted)))))


class InvertedFileScorer:
    """Similarities of the rows in the groups closest to the question; -inf elsewhere.

    The rows of group ``g`` are ``offsets[g]:offsets[g + 1]`` (the snapshot stores its facts in
    group order). With ``codes`` (of the rows of the matrix ``vectors`` are, or are rows of), the
    probed rows are scored by their codes and the best ``best + CODE_REFINE`` again exactly.
    """

    def __init__(self, vectors: Vectors, centroids: np.ndarray, offsets: np.ndarray,
                 probe_share: float | None = None, codes: RowCodes | None = None) -> None:
        if offsets.shape[0] != centroids.shape[0] + 1 or int(offsets[-1]) != vectors.shape[0]:
            raise ValueError("the index's group offsets do not match its centroids and rows")
        self.vectors = vectors
        self.centroids = np.asarray(centroids, dtype=np.float32)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self._matrix = _HalfMatrix(vectors)
        self._codes = _CodeMatrix(codes, vectors) if codes is not None else None
        self.probes = probes_for(self.centroids.shape[0], probe_share)

    def scores(self, q: np.ndarray, best: int) -> np.ndarray:
        torch = _torch()
        q32 = np.asarray(q, dtype=np.float32)
        out = np.full(self.vectors.shape[0], -np.inf, dtype=np.float32)
        near = np.argpartition(-(self.centroids @ q32), self.probes - 1)[: self.probes]  # (L, dim) x (dim,)
        coded = self._codes
        query = coded.query(q32) if coded is not None else torch.from_numpy(q32.astype(np.float16))
        products = coded.products if coded is not None else self._matrix.products
        rows = []
        for group in np.sort(near):
            lo, hi = int(self.offsets[group]), int(self.offsets[group + 1])
            if hi > lo:
                out[lo:hi] = products(query, lo, hi)  # (hi - lo, dim) x (dim,)
                rows.append(np.arange(lo, hi))
        if rows:
            probed = np.concatenate(rows)
            k = min(probed.size, best + (CODE_REFINE if coded is not None else REFINE))
            top = probed[np.argpartition(-out[probed], k - 1)[:k]]
            out[top] = _exact_rows(self.vectors, top, q32)
        return out
