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

**The sketch cut.** A band collision says little on its own: two unrelated names (cosine near 0)
agree on all 16 signs of some band of 200 with probability about 200 / 2^16, so a corpus of n names
of a type yields about 0.003 n^2 / 2 candidates whatever the threshold. All ``bands x rows`` sign
bits of the two names are at hand in their keys, though, and the number of signs on which they
differ (the Hamming distance of the sketches) estimates their angle: it is Binomial(N, θ/π) for N
bits. A candidate goes on to the exact cosine only when that distance is at most
``hamming_cut(threshold)``, the mean for a pair exactly at the threshold plus ``SKETCH_Z`` standard
deviations; a pair at or above the threshold is cut with probability below 1e-9 (z = 6). The cut
is a function of the two names' keys alone, so the link stays pairwise; it spares reading the
vectors of unrelated names, which at 100k passages is nearly every name of the type.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from functools import lru_cache

import numpy as np

from lightfoot_pipeline.index.exact import exact_dots, float32_margin
from lightfoot_pipeline.settings import Banding

ROW_CHUNK = 2048  # names projected at a time: bounds the memory to ROW_CHUNK x bands x rows floats
PAIRS_PER_CHUNK = 1 << 16  # candidate pairs yielded at a time: bounds the memory of a band's pairs and sketches
PAIRS_PER_MERGE = 1 << 22  # candidate codes gathered before they are deduplicated
DIRECT_ROWS = 20  # bands of at most this many rows are looked up in a table of 2**rows entries
SCAN_ROWS = 1 << 15  # rows of the larger side's sketches made band-major at a time (see sketch_pairs_between)
SKETCH_Z = 6.0  # standard deviations of the Hamming distance that the sketch cut allows (see above)


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


def band_pairs_between(new_keys: np.ndarray, old_keys: np.ndarray, rows: int = 64) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per band, the pairs (i into new, j into old) with equal keys; a pair recurs in every band it shares.

    The smaller side is indexed and the larger one looked up in it, so adding a few names to many
    costs one pass over the many per band, not a sort of them. With ``rows`` sign bits of at most
    DIRECT_ROWS the keys are taken apart (split_keys) and paired by :func:`sketch_pairs_between`;
    otherwise a band's index is its sorted keys.
    """
    if len(new_keys) == 0 or len(old_keys) == 0:
        return
    if rows <= DIRECT_ROWS:
        mask = np.int64((1 << rows) - 1)
        yield from sketch_pairs_between(new_keys[:, 0] & ~mask, new_keys & mask, old_keys[:, 0] & ~mask,
                                        old_keys & mask, rows)
        return
    small, large, swapped = (new_keys, old_keys, False) if len(new_keys) <= len(old_keys) else (old_keys, new_keys, True)
    for band in range(new_keys.shape[1]):
        order = np.argsort(small[:, band], kind="stable")
        ordered = small[order, band]
        lo = np.searchsorted(ordered, large[:, band], side="left")
        counts = np.searchsorted(ordered, large[:, band], side="right") - lo
        hits = np.flatnonzero(counts)
        for a, b in _expand(hits, lo[hits], counts[hits], order):
            yield (a, b) if swapped else (b, a)


def sketch_pairs_between(new_high: np.ndarray, new_marks: np.ndarray, old_high: np.ndarray, old_marks: np.ndarray,
                         rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """band_pairs_between on keys taken apart: (n,) high bits and (n, bands) sketches of ``rows`` bits.

    The smaller side is indexed per band: which of the 2**rows sign patterns it holds (a bit
    table), its rows ordered by pattern, and, through a table of 2**rows slots, where the rows of
    each pattern it holds start in that order and end (_band_index). The larger side is scanned
    SCAN_ROWS rows at a time, each chunk's sketches turned band-major once so that a band's
    lookups read its bits in sequence; only the rows that hit the bit table are looked up further.
    A hit also needs the high bits (the group) to agree.
    """
    if len(new_high) == 0 or len(old_high) == 0:
        return
    swapped = len(new_high) > len(old_high)
    small_high, small_marks, large_high, large_marks = (
        (old_high, old_marks, new_high, new_marks) if swapped else (new_high, new_marks, old_high, old_marks))
    index = [_band_index(np.ascontiguousarray(small_marks[:, band]), rows) for band in range(small_marks.shape[1])]
    for r0 in range(0, len(large_high), SCAN_ROWS):
        chunk = np.ascontiguousarray(large_marks[r0 : r0 + SCAN_ROWS].T)
        for (held, slot, bounds, order), low in zip(index, chunk, strict=True):
            hits = np.flatnonzero(held.take(low))
            if len(hits) == 0:
                continue
            pattern = slot.take(low[hits]).astype(np.int64)
            first = bounds[pattern]
            for a, b in _expand(hits, first, bounds[pattern + 1] - first, order):
                a = a + r0
                same = small_high[b] == large_high[a]
                yield (a[same], b[same]) if swapped else (b[same], a[same])


def _slot_type(patterns: int) -> type[np.unsignedinteger] | type[np.signedinteger]:
    """The narrowest type that numbers ``patterns`` sign patterns."""
    return np.uint16 if patterns <= 1 << 16 else np.int32


def _band_index(low: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One band of the smaller side (at least one row): which sign patterns it holds, each held
    pattern's number (its slot), where the rows of each numbered pattern start among its rows
    ordered by pattern (one more bound: the end), and that order. Built from the sorted rows, not
    by counting every pattern: a cumulative sum over 2**rows counts cost four times the rest, and
    the stored sketches are looked up a part at a time (name_sketches.py), each part against an
    index of the added names built again."""
    order = np.argsort(low, kind="stable")
    ordered = low[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    patterns = ordered[starts]
    held = np.zeros(1 << rows, dtype=bool)
    held[patterns] = True
    slot = np.zeros(1 << rows, dtype=_slot_type(len(patterns)))
    slot[patterns] = np.arange(len(patterns))
    return held, slot, np.append(starts, len(low)).astype(np.int64), order.astype(np.int32)


def _expand(hits: np.ndarray, lo: np.ndarray, counts: np.ndarray, order: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The pairs (position in the larger side, row of the smaller side) of a band's lookups, in chunks."""
    for p0, p1 in _spans(counts):
        yield np.repeat(hits[p0:p1], counts[p0:p1]), order[np.repeat(lo[p0:p1], counts[p0:p1]) + _runs(counts[p0:p1])]


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


def candidates_between(new_keys: np.ndarray, old_keys: np.ndarray, rows: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i into new, j into old) that share a key in some band; sorted, each pair once."""
    found = _PairSet(len(old_keys))
    for i, j in band_pairs_between(new_keys, old_keys, rows):
        found.add(i, j)
    return found.pairs()


def sketches(keys: np.ndarray, banding: Banding) -> np.ndarray:
    """(n, bands) unsigned sign bits of each band key (its low ``rows`` bits): the name's sketch."""
    width = np.uint16 if banding.rows <= 16 else np.uint32 if banding.rows <= 32 else np.uint64
    low = np.uint64((1 << banding.rows) - 1)
    return (np.asarray(keys).view(np.uint64) & low).astype(width)


def hamming_cut(banding: Banding, threshold: float) -> int:
    """The largest sketch distance kept for a link threshold (see the module docstring)."""
    n_bits = banding.bands * banding.rows
    q = math.acos(min(1.0, max(-1.0, threshold))) / math.pi  # chance that one sign differs at the threshold
    return min(n_bits, math.floor(n_bits * q + SKETCH_Z * math.sqrt(n_bits * q * (1.0 - q))))


def sketch_distances(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Row-wise Hamming distances of two equally long lists of sketches."""
    return np.bitwise_count(left ^ right).sum(axis=1, dtype=np.int32)


def _near(chunks: Iterator[tuple[np.ndarray, np.ndarray]], left: np.ndarray, right: np.ndarray, cut: int,
          width: int) -> tuple[np.ndarray, np.ndarray]:
    kept = [np.zeros(0, dtype=np.int64)]
    for i, j in chunks:
        close = sketch_distances(left[i], right[j]) <= cut
        kept.append(i[close].astype(np.int64) * width + j[close].astype(np.int64))
    codes = np.unique(np.concatenate(kept))
    return codes // width, codes % width


def near_within(keys: np.ndarray, banding: Banding, threshold: float,
                bands: range | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i, j), i < j, that share a band key and pass the sketch cut; sorted, each pair once.

    ``bands``: only the pairs that share a key in one of these bands (the cut still reads every
    band's bits); None for all of them."""
    marks = sketches(keys, banding)
    shared = keys if bands is None else keys[:, bands.start : bands.stop]
    return _near(band_pairs_within(shared), marks, marks, hamming_cut(banding, threshold), max(len(keys), 1))


def near_between(new_keys: np.ndarray, old_keys: np.ndarray, banding: Banding,
                 threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i into new, j into old) that share a band key and pass the sketch cut; sorted, each pair once."""
    return _near(band_pairs_between(new_keys, old_keys, banding.rows), sketches(new_keys, banding),
                 sketches(old_keys, banding), hamming_cut(banding, threshold), max(len(old_keys), 1))


def near_between_parts(new: tuple[np.ndarray, np.ndarray], old: tuple[np.ndarray, np.ndarray], banding: Banding,
                       threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """near_between on keys taken apart (split_keys): the old side's keys are never put together."""
    if banding.rows > DIRECT_ROWS:
        return near_between(join_keys(*new), join_keys(*old), banding, threshold)
    return _near(sketch_pairs_between(*new, *old, banding.rows), new[1], old[1], hamming_cut(banding, threshold),
                 max(len(old[0]), 1))


def split_keys(keys: np.ndarray, banding: Banding) -> tuple[np.ndarray, np.ndarray]:
    """The two parts of names' band keys: (n,) int64 high bits (the group's) and (n, bands) sketches."""
    keys = np.asarray(keys, dtype=np.int64)
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64), sketches(np.zeros((0, banding.bands), dtype=np.int64), banding)
    return keys[:, 0] & ~np.int64((1 << banding.rows) - 1), sketches(keys, banding)


def join_keys(high: np.ndarray, marks: np.ndarray) -> np.ndarray:
    """(n, bands) int64 band keys from their parts (split_keys)."""
    return (np.asarray(high, dtype=np.int64)[:, None] | marks.astype(np.int64)).astype(np.int64)
