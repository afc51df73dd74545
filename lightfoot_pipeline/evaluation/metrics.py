"""Evaluation metrics: recall@k of rankings, exact match and token F1 of answers, paired bootstrap.

- **recall@k** (over documents): the fraction of a question's gold documents among the first k
  distinct documents of a ranking (a document ranked by several passages counts once, at its best
  rank).
- **Exact match and token F1** with the SQuAD normalisation: lower-case, drop punctuation, drop the
  articles a, an and the, collapse whitespace. A question with several accepted answers (the
  answer and its aliases) gets the best score over them.
- **Paired bootstrap**: two systems scored on the same questions; resample the questions with
  replacement and take the percentiles of the mean difference. The difference is significant at
  95% when the interval excludes zero. One system's mean gets its interval the same way
  (:func:`bootstrap_interval`).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000
CONFIDENCE = 0.95

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


# -- answers --------------------------------------------------------------------------------------


def normalize_answer(text: str) -> str:
    """The SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(gold_answers: Sequence[str]) -> list[str]:
    golds = [g for g in gold_answers if g is not None]
    if not golds:
        raise ValueError("scoring an answer needs at least one gold answer")
    return golds


def exact_match(prediction: str | None, gold_answers: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0."""
    golds = _golds(gold_answers)
    if prediction is None:
        return 0.0
    guess = normalize_answer(prediction)
    return float(any(guess == normalize_answer(g) for g in golds))


def _f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
    if not prediction_tokens or not gold_tokens:
        # Both empty (e.g. the answer is only an article): they agree exactly; one empty: no overlap.
        return float(prediction_tokens == gold_tokens)
    common = Counter(prediction_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(prediction_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str | None, gold_answers: Sequence[str]) -> float:
    """The best token-overlap F1 of the prediction against any gold answer (SQuAD normalisation)."""
    golds = _golds(gold_answers)
    if prediction is None:
        return 0.0
    tokens = normalize_answer(prediction).split()
    return max(_f1(tokens, normalize_answer(g).split()) for g in golds)


# -- rankings -------------------------------------------------------------------------------------


def distinct(values: Sequence[str]) -> list[str]:
    """The values in order with repeats dropped (a document ranked by several passages counts once)."""
    seen: set[str] = set()
    return [v for v in values if not (v in seen or seen.add(v))]


def recall_at_k(
    rankings: Mapping[str, Sequence[str]],
    gold: Mapping[str, Sequence[str]],
    ks: Sequence[int],
) -> dict[str, np.ndarray]:
    """Per-question recall@k of ranked document ids against gold document ids.

    ``rankings`` and ``gold`` are keyed by question id; every question of ``gold`` needs at least
    one gold document. Returns ``{"recall@k": (n_questions,) array}`` in the order of ``gold``.
    """
    ks = sorted(set(int(k) for k in ks))
    if not ks or ks[0] < 1:
        raise ValueError(f"k values must be positive, got {ks}")
    qids = list(gold)
    if not qids:
        return {f"recall@{k}": np.zeros(0) for k in ks}
    for qid in qids:
        if not gold[qid]:
            raise ValueError(f"question {qid!r} has no gold documents: recall is undefined")
    missing = [qid for qid in qids if qid not in rankings]
    if missing:
        raise ValueError(f"no ranking for {len(missing)} questions, e.g. {missing[0]!r}")
    ranked = {qid: distinct(rankings[qid]) for qid in qids}
    wanted = {qid: set(gold[qid]) for qid in qids}
    return {f"recall@{k}": np.array([len(wanted[qid].intersection(ranked[qid][:k])) / len(wanted[qid]) for qid in qids])
            for k in ks}


# -- significance ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairedBootstrap:
    """The mean difference ``a - b`` of two paired score vectors and its bootstrap interval."""

    n: int
    mean_a: float
    mean_b: float
    difference: float
    low: float
    high: float
    confidence: float
    resamples: int
    seed: int

    @property
    def significant(self) -> bool:
        """The interval excludes zero."""
        return self.low > 0.0 or self.high < 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "significant": self.significant}


def paired_bootstrap(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> PairedBootstrap:
    """Percentile bootstrap interval of ``mean(a) - mean(b)`` over questions resampled in pairs.

    ``a[i]`` and ``b[i]`` must be the two systems' scores on the same question ``i``.
    """
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired scores need equal lengths, got {a.size} and {b.size}")
    if a.size == 0:
        raise ValueError("the bootstrap needs at least one paired score")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("scores must be finite")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    diff = a - b  # (n,)
    n = diff.size
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    chunk = max(1, 4_000_000 // n)  # bound the (chunk, n) index matrix to a few tens of MB
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        picks = rng.integers(0, n, size=(stop - start, n))  # (resamples, n) question indices
        means[start:stop] = diff[picks].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return PairedBootstrap(
        n=n, mean_a=float(a.mean()), mean_b=float(b.mean()), difference=float(diff.mean()),
        low=float(low), high=float(high), confidence=confidence, resamples=resamples, seed=seed,
    )


def bootstrap_interval(
    values: Sequence[float] | np.ndarray,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(values)`` over questions resampled with replacement:
    the paired bootstrap of ``values`` against a system that scores zero everywhere."""
    zeros = np.zeros(np.asarray(values).size)
    result = paired_bootstrap(values, zeros, resamples=resamples, confidence=confidence, seed=seed)
    return result.low, result.high
