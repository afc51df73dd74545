"""How many of the exhaustive links the banded candidate filter finds, and at what cost.

The banded rule links a pair only when the two names share an LSH band key (lsh.py); the
exhaustive rule compares every pair. Both are functions of the pair, so the banded links are a
subset of the exhaustive ones, and the share found is the one figure that says what the filter
costs in recall. Measured per threshold, over names grouped by type as the index links them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from lightfoot_pipeline.index.links import LinkRule, pairs_within
from lightfoot_pipeline.index.lsh import candidates_within
from lightfoot_pipeline.settings import IndexSettings

NamedVectors = Mapping[str, tuple[Sequence[str], np.ndarray]]  # type -> (names, (n, dim) unit vectors)


@dataclass
class LinkRecall:
    """The banded rule against the exhaustive one, at one threshold."""

    threshold: float
    names: int = 0
    all_pairs: int = 0  # same-type pairs: what the exhaustive rule compares
    candidate_pairs: int = 0  # distinct same-type pairs that share a band key
    exhaustive_links: int = 0
    banded_links: int = 0
    exhaustive_s: float = 0.0
    banded_s: float = 0.0

    @property
    def found_share(self) -> float:
        """Share of the exhaustive links that the banded rule finds (1.0 when there are none)."""
        return self.banded_links / self.exhaustive_links if self.exhaustive_links else 1.0

    @property
    def candidate_share(self) -> float:
        """Share of the same-type pairs that the banded rule compares."""
        return self.candidate_pairs / self.all_pairs if self.all_pairs else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "found_share": self.found_share, "candidate_share": self.candidate_share}


def _pair_set(i: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    return np.unique(np.minimum(i, j).astype(np.int64) * n + np.maximum(i, j))


def link_recall(named_vectors: NamedVectors, rule: LinkRule) -> LinkRecall:
    """Links found by ``rule`` (banded) and by its exhaustive form, over every type's names."""
    if rule.banding is None:
        raise ValueError("link_recall measures a banded rule against the exhaustive one; this rule has no banding")
    out = LinkRecall(rule.threshold)
    for names, vectors in named_vectors.values():
        n = len(names)
        out.names += n
        out.all_pairs += n * (n - 1) // 2
        started = time.perf_counter()
        exhaustive = _pair_set(*pairs_within(names, vectors, rule.exhaustive())[:2], n)
        out.exhaustive_s += time.perf_counter() - started
        started = time.perf_counter()
        keys = rule.keys(names, vectors)
        banded = _pair_set(*pairs_within(names, vectors, rule, keys)[:2], n)
        out.banded_s += time.perf_counter() - started
        out.candidate_pairs += len(candidates_within(keys)[0])
        out.exhaustive_links += len(exhaustive)
        out.banded_links += int(np.isin(banded, exhaustive, assume_unique=True).sum())
    return out


def link_pairs_found_share(named_vectors: NamedVectors, settings: IndexSettings) -> float:
    """The lower of the shares of exhaustive links found at the entity and synonym thresholds."""
    if settings.banding is None:
        return 1.0
    return min(
        link_recall(named_vectors, LinkRule.of(settings, threshold)).found_share
        for threshold in (settings.entity_threshold, settings.synonym_threshold)
    )
