"""Dot products whose value does not depend on how they were batched.

A float32 matrix product sums in an order that BLAS chooses by block size, thread count and
memory layout, so a value near a decision boundary (a cosine at the link threshold, a projection
near zero) can fall on either side of it depending on which other rows shared the product. Such
values are recomputed here, one pair at a time and in a fixed order.
"""

from __future__ import annotations

import numpy as np


def exact_dots(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Row-wise dot products of float32 vectors, computed in float64 in a fixed order.

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


def float32_margin(dim: int) -> float:
    """A bound, with room to spare, on the float32 rounding error of a dot product of unit vectors."""
    return max(1e-4, 4.0 * dim * 2.0**-24)
