"""Pairwise name links: same-type names with cosine >= a threshold that carry the same numbers.

No top-k and no approximate index: either would make a name's links depend on which other names
exist or on the order they arrived, and the erasure invariant forbids both. A link is a function
of its two names: their exact cosine reaches the threshold, they carry the same numbers
(numbers.py), and, when the rule has a banding, they share a key in some LSH band (lsh.py), which
depends on each name alone. Which pairs are compared:

- **banded** (the default): only the pairs that share a band key and whose sketches (the keys'
  sign bits) are close enough for the threshold, found by sorting the keys a band at a time; the
  work follows the number of such pairs, not the square of the number of names;
- **exhaustive** (``banding=None``): every pair, in float32 block products of at most
  ``block_rows x block_cols`` (never an n x n matrix); kept to measure what the bands find.

Either way a compared pair's float32 dot product is a first cut at ``threshold - margin``, and
each survivor's cosine is recomputed in float64, one pair at a time and in a fixed order
(exact.py), so that its value does not depend on the batch it was found in; the pair is kept
when that exact value reaches the threshold. The margin is far above float32 rounding for unit
vectors, so no pair that reaches the threshold is missed by the first cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from lightfoot_pipeline.index.exact import exact_dots, float32_margin
from lightfoot_pipeline.index.lsh import band_keys, group_hash, near_between, near_within
from lightfoot_pipeline.index.numbers import number_signature
from lightfoot_pipeline.settings import Banding, IndexSettings

MARGIN = 1e-4
PAIR_CHUNK = 1 << 16  # candidate pairs whose vectors are gathered at a time
LINK_SCHEMA = {"type": pl.String, "name_a": pl.String, "name_b": pl.String, "similarity": pl.Float64}

exact_cosines = exact_dots  # of unit vectors


@dataclass(frozen=True)
class LinkRule:
    """What makes two names of one type a link, and how the pairs to compare are found."""

    threshold: float
    banding: Banding | None = None  # None: every pair is compared
    numbers_must_agree: bool = True
    block_rows: int = 2048
    block_cols: int = 8192

    @classmethod
    def of(cls, settings: IndexSettings, threshold: float | None = None) -> LinkRule:
        """The index's rule, at the synonym threshold (the lowest stored) unless told otherwise."""
        return cls(
            settings.synonym_threshold if threshold is None else threshold, settings.banding,
            settings.numbers_must_agree, settings.block_rows, settings.block_cols,
        )

    def exhaustive(self) -> LinkRule:
        """The same rule comparing every pair (what the bands are measured against)."""
        return replace(self, banding=None)

    def groups(self, names: Sequence[str]) -> list[str]:
        """Each name's group: names of different groups never link."""
        return [number_signature(n) for n in names] if self.numbers_must_agree else [""] * len(names)

    def keys(self, names: Sequence[str], vectors: np.ndarray) -> np.ndarray:
        """(len(names), bands) int64 band keys; each row a function of its name and vector alone."""
        if self.banding is None:
            raise ValueError("an exhaustive link rule has no band keys")
        hashes = np.array([group_hash(g) for g in self.groups(names)], dtype=np.uint64)
        return band_keys(vectors, self.banding, hashes)


def _numbers_agree(
    rule: LinkRule, left: Sequence[str], right: Sequence[str], i: np.ndarray, j: np.ndarray
) -> np.ndarray:
    """Mask of the pairs (left[i], right[j]) whose names may link under the number rule."""
    if not rule.numbers_must_agree:
        return np.ones(len(i), dtype=bool)
    return np.array([number_signature(left[a]) == number_signature(right[b]) for a, b in zip(i, j, strict=True)], dtype=bool)


def _verified(
    queries: np.ndarray, targets: np.ndarray, i: np.ndarray, j: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The candidate pairs (i into queries, j into targets) whose exact cosine reaches the threshold."""
    cutoff = np.float32(threshold - max(MARGIN, float32_margin(queries.shape[1])))
    found_i, found_j, found_s = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.float64)]
    for p0 in range(0, len(i), PAIR_CHUNK):
        ci, cj = i[p0 : p0 + PAIR_CHUNK], j[p0 : p0 + PAIR_CHUNK]
        rough = np.einsum("pd,pd->p", queries[ci], targets[cj])  # (pairs, dim) . (pairs, dim) -> (pairs,)
        near = rough >= cutoff
        ci, cj = ci[near], cj[near]
        exact = exact_dots(queries[ci], targets[cj])
        keep = exact >= threshold
        found_i.append(ci[keep])
        found_j.append(cj[keep])
        found_s.append(exact[keep])
    return np.concatenate(found_i), np.concatenate(found_j), np.concatenate(found_s)


def _block_pairs(
    queries: np.ndarray, targets: np.ndarray, rule: LinkRule, upper_only: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair (i into queries, j into targets) with exact cosine >= the threshold, by blocks."""
    found_i, found_j, found_s = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.float64)]
    cutoff = np.float32(rule.threshold - max(MARGIN, float32_margin(queries.shape[1])))
    for r0 in range(0, len(queries), rule.block_rows):
        q = queries[r0 : r0 + rule.block_rows]
        c_start = r0 if upper_only else 0
        for c0 in range(c_start, len(targets), rule.block_cols):
            t = targets[c0 : c0 + rule.block_cols]
            block = q @ t.T  # (rows, dim) x (dim, cols) -> (rows, cols)
            ii, jj = np.nonzero(block >= cutoff)
            if upper_only:
                keep = (jj + c0) > (ii + r0)
                ii, jj = ii[keep], jj[keep]
            if len(ii) == 0:
                continue
            gi, gj = ii + r0, jj + c0
            exact = exact_dots(queries[gi], targets[gj])
            keep = exact >= rule.threshold
            found_i.append(gi[keep])
            found_j.append(gj[keep])
            found_s.append(exact[keep])
    return np.concatenate(found_i), np.concatenate(found_j), np.concatenate(found_s)


def pairs_within(
    names: Sequence[str], vectors: np.ndarray, rule: LinkRule, keys: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Linked index pairs (i, j, cosine), i < j, among one set of names of one type.

    ``keys`` are the names' band keys (LinkRule.keys) when the caller has them stored.
    """
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if rule.banding is None:
        i, j, s = _block_pairs(vectors, vectors, rule, upper_only=True)
    else:
        near = near_within(rule.keys(names, vectors) if keys is None else keys, rule.banding, rule.threshold)
        i, j, s = _verified(vectors, vectors, *near, rule.threshold)
    same = _numbers_agree(rule, names, names, i, j)
    return i[same], j[same], s[same]


def pairs_between(
    new_names: Sequence[str],
    new_vectors: np.ndarray,
    old_names: Sequence[str],
    old_vectors: np.ndarray,
    rule: LinkRule,
    new_keys: np.ndarray | None = None,
    old_keys: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Linked index pairs (i into new, j into old, cosine) of one type."""
    new_vectors = np.ascontiguousarray(new_vectors, dtype=np.float32)
    old_vectors = np.ascontiguousarray(old_vectors, dtype=np.float32)
    if rule.banding is None:
        i, j, s = _block_pairs(new_vectors, old_vectors, rule, upper_only=False)
    else:
        near = near_between(
            rule.keys(new_names, new_vectors) if new_keys is None else new_keys,
            rule.keys(old_names, old_vectors) if old_keys is None else old_keys,
            rule.banding, rule.threshold,
        )
        i, j, s = _verified(new_vectors, old_vectors, *near, rule.threshold)
    same = _numbers_agree(rule, new_names, old_names, i, j)
    return i[same], j[same], s[same]


def links_of_pairs(
    type_: str, names: Sequence[str], vectors: np.ndarray, i: np.ndarray, j: np.ndarray, rule: LinkRule
) -> pl.DataFrame:
    """The candidate pairs (i, j) of one type's names that are links: exact cosine and the number rule."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    i, j, s = _verified(vectors, vectors, i, j, rule.threshold)
    same = _numbers_agree(rule, names, names, i, j)
    return _ordered(type_, [names[k] for k in i[same]], [names[k] for k in j[same]], s[same])


def _ordered(type_: str, names_i: list[str], names_j: list[str], sims: np.ndarray) -> pl.DataFrame:
    a = [min(x, y) for x, y in zip(names_i, names_j, strict=True)]
    b = [max(x, y) for x, y in zip(names_i, names_j, strict=True)]
    return pl.DataFrame(
        {"type": [type_] * len(a), "name_a": a, "name_b": b, "similarity": sims},
        schema=LINK_SCHEMA,
    )


def links_within(
    type_: str, names: Sequence[str], vectors: np.ndarray, rule: LinkRule, keys: np.ndarray | None = None
) -> pl.DataFrame:
    """All linked pairs among one set of names of one type."""
    i, j, s = pairs_within(names, vectors, rule, keys)
    return _ordered(type_, [names[k] for k in i], [names[k] for k in j], s)


def links_between(
    type_: str,
    new_names: Sequence[str],
    new_vectors: np.ndarray,
    old_names: Sequence[str],
    old_vectors: np.ndarray,
    rule: LinkRule,
    new_keys: np.ndarray | None = None,
    old_keys: np.ndarray | None = None,
) -> pl.DataFrame:
    """All linked pairs of (new, old) names plus those among the new names themselves."""
    frames = [links_within(type_, new_names, new_vectors, rule, new_keys)]
    if len(old_names) and len(new_names):
        i, j, s = pairs_between(new_names, new_vectors, old_names, old_vectors, rule, new_keys, old_keys)
        frames.append(_ordered(type_, [new_names[k] for k in i], [old_names[k] for k in j], s))
    return pl.concat(frames)
