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

Candidate pairs come from sorting each band's keys and pairing equal ones, a band and a bounded
chunk at a time: never an n x n matrix.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Iterator

import numpy as np

from lightfoot_pipeline.index.exact import exact_dots, float32_margin
from lightfoot_pipeline.settings import Banding

ROW_CHUNK = 2048  # names projected at a time: bounds the memory to ROW_CHUNK x bands x rows floats
PAIRS_PER_CHUNK = 1 << 18  # candidate pairs yielded at a time: bounds the memory of a band's pairs
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
        near_i, near_k = np.nonzero((projections < margin) & (projections > -margin))
        if len(near_i):
            signs[near_i, near_k] = exact_dots(chunk[near_i], planes[near_k]) >= 0
        out[r0 : r0 + ROW_CHUNK] = signs
    return out


def band_keys(vectors: np.ndarray, banding: Banding, groups: np.ndarray | None = None) -> np.ndarray:
    """(n, bands) int64 keys of unit vectors; rows of different groups never share a key.

    ``groups`` holds one uint64 hash per row (see group_hash); its top ``64 - rows`` bits fill the
    keys' high bits. None puts every row in one group.
    """
    return keys_from_signs(sign_bits(vectors, banding), banding, groups)


def keys_from_signs(signs: np.ndarray, banding: Banding, groups: np.ndarray | None = None) -> np.ndarray:
    """(n, bands) int64 keys from sign bits (sign_bits); a caller may keep the bits packed, 1 bit each.

    Bit k of a band's key is the sign on the band's k-th hyperplane.
    """
    n, rows = len(signs), banding.rows
    packed = np.packbits(signs.reshape(n, banding.bands, rows), axis=2, bitorder="little")  # (n, bands, ⌈rows/8⌉)
    padded = np.zeros((n, banding.bands, 8), dtype=np.uint8)
    padded[:, :, : packed.shape[2]] = packed
    keys = padded.view("<u8")[:, :, 0].astype(np.uint64)  # (n, bands)
    if groups is not None:
        if len(groups) != n:
            raise ValueError(f"band keys: {len(groups)} group hashes for {n} vectors")
        high = np.asarray(groups, dtype=np.uint64) >> np.uint64(rows) << np.uint64(rows)
        keys |= high[:, None]
    return keys.view(np.int64)


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


def band_pairs_within(keys: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per band, the pairs (i, j), i < j, of rows with equal keys; a pair recurs in every band it shares."""
    n = len(keys)
    for band in range(keys.shape[1] if keys.ndim == 2 else 0):
        order = np.argsort(keys[:, band], kind="stable")
        ordered = keys[order, band]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        sizes = np.diff(np.r_[starts, n])
        group_end = np.repeat(starts + sizes, sizes)  # end of each position's group
        later = group_end - 1 - np.arange(n)  # later positions in the same group
        for p0, p1 in _spans(later):
            left = np.repeat(np.arange(p0, p1), later[p0:p1])
            right = left + 1 + _runs(later[p0:p1])
            i, j = order[left], order[right]
            yield np.minimum(i, j), np.maximum(i, j)


def band_pairs_between(new_keys: np.ndarray, old_keys: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per band, the pairs (i into new, j into old) with equal keys; a pair recurs in every band it shares."""
    if len(new_keys) == 0 or len(old_keys) == 0:
        return
    for band in range(new_keys.shape[1]):
        order = np.argsort(old_keys[:, band], kind="stable")
        ordered = old_keys[order, band]
        lo = np.searchsorted(ordered, new_keys[:, band], side="left")
        counts = np.searchsorted(ordered, new_keys[:, band], side="right") - lo
        for p0, p1 in _spans(counts):
            i = np.repeat(np.arange(p0, p1), counts[p0:p1])
            j = order[np.repeat(lo[p0:p1], counts[p0:p1]) + _runs(counts[p0:p1])]
            yield i, j


def _spans(counts: np.ndarray) -> Iterator[tuple[int, int]]:
    """Consecutive spans of positions whose counts add up to about PAIRS_PER_CHUNK (one at least)."""
    ends = np.cumsum(counts)
    start = 0
    while start < len(counts):
        base = ends[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + PAIRS_PER_CHUNK, side="right")))
        if ends[min(stop, len(counts)) - 1] > base:
            yield start, min(stop, len(counts))
        start = stop


def candidates_within(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i, j), i < j, of rows that share a key in some band; sorted, each pair once."""
    found = _PairSet(len(keys))
    for i, j in band_pairs_within(keys):
        found.add(i, j)
    return found.pairs()


def candidates_between(new_keys: np.ndarray, old_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i into new, j into old) that share a key in some band; sorted, each pair once."""
    found = _PairSet(len(old_keys))
    for i, j in band_pairs_between(new_keys, old_keys):
        found.add(i, j)
    return found.pairs()
