"""Exact pairwise name links: every pair of same-type names with cosine >= a threshold.

No top-k and no approximate index: either would make a name's links depend on which other names
exist or on the order they arrived, and the erasure invariant forbids both. Similarities are
computed in blocks of at most ``block_rows x block_cols`` (never an n x n matrix):

1. a float32 block product finds candidate pairs above ``threshold - margin``;
2. each candidate's cosine is recomputed in float64 from the float32 vectors, one pair at a time
   and in a fixed order, so that its value does not depend on the block it was found in; the
   pair is kept when that exact value reaches the threshold.

The margin (1e-4) is far above float32 rounding for unit vectors of a few hundred dimensions
(about 1e-6), so no pair that reaches the threshold is missed in step 1.
"""

from __future__ import annotations

import numpy as np
import polars as pl

MARGIN = 1e-4
LINK_SCHEMA = {"type": pl.String, "name_a": pl.String, "name_b": pl.String, "similarity": pl.Float64}


def exact_cosines(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Row-wise dot products of float32 unit vectors, computed in float64 in a fixed order.

    The products are summed by explicit halving (elementwise adds only), so the result is the same
    bits whatever the number of rows, the memory layout or the BLAS library.
    """
    products = left.astype(np.float64) * right.astype(np.float64)
    width = 1 << max(0, (products.shape[1] - 1).bit_length())
    if width != products.shape[1]:
        products = np.pad(products, ((0, 0), (0, width - products.shape[1])))
    while products.shape[1] > 1:
        half = products.shape[1] // 2
        products = products[:, :half] + products[:, half:]
    return products[:, 0]


def _candidate_pairs(
    queries: np.ndarray,
    targets: np.ndarray,
    threshold: float,
    block_rows: int,
    block_cols: int,
    upper_only: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index pairs (i into queries, j into targets) with exact cosine >= threshold."""
    found_i, found_j, found_s = [], [], []
    cutoff = np.float32(threshold - MARGIN)
    for r0 in range(0, len(queries), block_rows):
        q = queries[r0 : r0 + block_rows]
        c_start = r0 if upper_only else 0
        for c0 in range(c_start, len(targets), block_cols):
            t = targets[c0 : c0 + block_cols]
            block = q @ t.T  # (rows, dim) x (dim, cols) -> (rows, cols)
            ii, jj = np.nonzero(block >= cutoff)
            if upper_only:
                keep = (jj + c0) > (ii + r0)
                ii, jj = ii[keep], jj[keep]
            if len(ii) == 0:
                continue
            gi, gj = ii + r0, jj + c0
            exact = exact_cosines(queries[gi], targets[gj])
            keep = exact >= threshold
            found_i.append(gi[keep])
            found_j.append(gj[keep])
            found_s.append(exact[keep])
    if not found_i:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0, dtype=np.float64)
    return np.concatenate(found_i), np.concatenate(found_j), np.concatenate(found_s)


def _ordered(type_: str, names_i: list[str], names_j: list[str], sims: np.ndarray) -> pl.DataFrame:
    a = [min(x, y) for x, y in zip(names_i, names_j)]
    b = [max(x, y) for x, y in zip(names_i, names_j)]
    return pl.DataFrame(
        {"type": [type_] * len(a), "name_a": a, "name_b": b, "similarity": sims},
        schema=LINK_SCHEMA,
    )


def links_within(
    type_: str, names: list[str], vectors: np.ndarray, threshold: float, block_rows: int, block_cols: int
) -> pl.DataFrame:
    """All linked pairs among one set of names of one type."""
    i, j, s = _candidate_pairs(vectors, vectors, threshold, block_rows, block_cols, upper_only=True)
    return _ordered(type_, [names[k] for k in i], [names[k] for k in j], s)


def links_between(
    type_: str,
    new_names: list[str],
    new_vectors: np.ndarray,
    old_names: list[str],
    old_vectors: np.ndarray,
    threshold: float,
    block_rows: int,
    block_cols: int,
) -> pl.DataFrame:
    """All linked pairs of (new, old) names plus those among the new names themselves."""
    frames = [links_within(type_, new_names, new_vectors, threshold, block_rows, block_cols)]
    if len(old_names) and len(new_names):
        i, j, s = _candidate_pairs(new_vectors, old_vectors, threshold, block_rows, block_cols, upper_only=False)
        frames.append(_ordered(type_, [new_names[k] for k in i], [old_names[k] for k in j], s))
    return pl.concat(frames)
