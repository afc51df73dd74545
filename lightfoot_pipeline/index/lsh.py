"""Which pairs of names the links compare: seeded random-hyperplane LSH bands.

Each name gets ``bands`` keys. A band's key holds the signs of the name's vector on ``rows``
hyperplanes drawn from a seeded normal distribution, in the low bits, and a hash of the name's
group (its number signature, see numbers.py) in the high bits. Two names are *candidates* when they
share a key in the same band. Two vectors at angle θ agree on one hyperplane's sign with
probability 1 - θ/π, so a pair at cosine 0.80 collides in at least one band with probability
``1 - (1 - 0.795**rows)**bands``, and a pair of unrelated names rarely does.

A name's keys are a function of its vector, its group and the banding alone, so whether two names
are compared depends on those two names only: the filter keeps the link pairwise, as the erasure
invariant requires. A sign is not left to BLAS: a projection whose float32 value is within the
rounding margin of zero is recomputed in a fixed order (exact.py), so a name's keys are the same
bits whatever batch it arrives in.

Candidate pairs come from sorting each band's keys and pairing equal ones: never an n x n matrix.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np

from lightfoot_pipeline.index.exact import exact_dots, float32_margin
from lightfoot_pipeline.settings import Banding

ROW_CHUNK = 2048  # names projected at a time: bounds the memory to ROW_CHUNK x bands x rows floats
PAIRS_PER_MERGE = 1 << 22  # candidate codes gathered before they are deduplicated


@lru_cache(maxsize=8)
def hyperplanes(banding: Banding, dim: int) -> np.ndarray:
    """(bands * rows, dim) float32 unit normals, a function of the seed and the dimension."""
    rng = np.random.Generator(np.random.PCG64(banding.seed))
    planes = rng.standard_normal((banding.bands * banding.rows, dim))
    planes /= np.linalg.norm(planes, axis=1, keepdims=True)
    planes = planes.astype(np.float32)
    planes.flags.writeable = False
    return planes


def group_hash(group: str) -> int:
    """A stable 64-bit hash of a group label (the same in every process and on every machine)."""
    return int.from_bytes(hashlib.blake2b(group.encode("utf-8"), digest_size=8).digest(), "little")


def sign_bits(vectors: np.ndarray, banding: Banding) -> np.ndarray:
    """(n, bands * rows) bool: the sign (>= 0) of each unit vector on each hyperplane."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    planes = hyperplanes(banding, vectors.shape[1])
    margin = np.float32(float32_margin(vectors.shape[1]))
    out = np.empty((len(vectors), len(planes)), dtype=bool)
    for r0 in range(0, len(vectors), ROW_CHUNK):
        chunk = vectors[r0 : r0 + ROW_CHUNK]
        projections = chunk @ planes.T  # (rows, dim) x (dim, bands*rows) -> (rows, bands*rows)
        signs = projections >= 0
        near_i, near_k = np.nonzero(np.abs(projections) < margin)
        if len(near_i):
            signs[near_i, near_k] = exact_dots(chunk[near_i], planes[near_k]) >= 0
        out[r0 : r0 + ROW_CHUNK] = signs
    return out


def band_keys(vectors: np.ndarray, banding: Banding, groups: np.ndarray | None = None) -> np.ndarray:
    """(n, bands) int64 keys of unit vectors; rows of different groups never share a key.

    ``groups`` holds one uint64 hash per row (see group_hash); its top ``64 - rows`` bits fill the
    keys' high bits. None puts every row in one group.
    """
    n, rows = len(vectors), banding.rows
    signs = sign_bits(vectors, banding).reshape(n, banding.bands, rows)
    weights = np.left_shift(np.uint64(1), np.arange(rows, dtype=np.uint64))  # (rows,)
    bits = (signs.astype(np.uint64) * weights).sum(axis=2, dtype=np.uint64)  # (n, bands)
    if groups is not None:
        if len(groups) != n:
            raise ValueError(f"band_keys: {len(groups)} group hashes for {n} vectors")
        high = np.asarray(groups, dtype=np.uint64) >> np.uint64(rows) << np.uint64(rows)
        bits |= high[:, None]
    return bits.view(np.int64)


class _PairSet:
    """Unique pair codes ``i * width + j``, merged as they arrive."""

    def __init__(self, width: int) -> None:
        self.width = np.int64(max(width, 1))
        self.merged = np.zeros(0, dtype=np.int64)
        self.pending: list[np.ndarray] = []
        self.pending_size = 0
        self.emitted = 0

    def add(self, i: np.ndarray, j: np.ndarray) -> None:
        if len(i):
            self.pending.append(i.astype(np.int64) * self.width + j.astype(np.int64))
            self.pending_size += len(i)
            self.emitted += len(i)
            if self.pending_size >= PAIRS_PER_MERGE:
                self._merge()

    def _merge(self) -> None:
        if self.pending:
            self.merged = np.union1d(self.merged, np.concatenate(self.pending))
            self.pending, self.pending_size = [], 0

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        self._merge()
        return self.merged // self.width, self.merged % self.width


def _runs(counts: np.ndarray) -> np.ndarray:
    """0, 1, …, c-1 for each count c, concatenated."""
    total = int(counts.sum())
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - starts


def candidates_within(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i, j), i < j, of rows that share a key in some band; sorted, each pair once."""
    n = len(keys)
    found = _PairSet(n)
    for band in range(keys.shape[1] if keys.ndim == 2 else 0):
        order = np.argsort(keys[:, band], kind="stable")
        ordered = keys[order, band]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        sizes = np.diff(np.r_[starts, n])
        group_end = np.repeat(starts + sizes, sizes)  # end of each position's group
        later = group_end - 1 - np.arange(n)  # later positions in the same group
        left = np.repeat(np.arange(n), later)
        right = left + 1 + _runs(later)
        i, j = order[left], order[right]
        found.add(np.minimum(i, j), np.maximum(i, j))
    return found.pairs()


def candidates_between(new_keys: np.ndarray, old_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i into new, j into old) that share a key in some band; sorted, each pair once."""
    found = _PairSet(len(old_keys))
    if len(new_keys) == 0 or len(old_keys) == 0:
        return found.pairs()
    for band in range(new_keys.shape[1]):
        order = np.argsort(old_keys[:, band], kind="stable")
        ordered = old_keys[order, band]
        lo = np.searchsorted(ordered, new_keys[:, band], side="left")
        hi = np.searchsorted(ordered, new_keys[:, band], side="right")
        counts = hi - lo
        i = np.repeat(np.arange(len(new_keys)), counts)
        j = order[np.repeat(lo, counts) + _runs(counts)]
        found.add(i, j)
    return found.pairs()
