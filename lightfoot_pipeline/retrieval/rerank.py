"""The cross-encoder reranker and reciprocal rank fusion.

PageRank's top passages are scored against the question by a sentence-transformers CrossEncoder
(default bge-reranker-base, from a configured name or local path), and the cross-encoder's ranking
is fused with PageRank's by reciprocal rank fusion (RRF): a passage at rank r_i in ranking i gets
``Σ_i 1 / (k + r_i)`` with ranks counted from 1 and k = 60.

The reranker is the only model besides the embedder that retrieval runs, and it runs locally. No
package ships its weights here, so loading it may fail: :func:`load_reranker` then returns no
reranker and a status that says why, and retrieval keeps the PageRank order and reports it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.settings import RERANKER_ENV, keep_model_hub_offline, reranker_spec

DEFAULT_RERANKER = "BAAI/bge-reranker-base"
KNOWN_RERANKERS = {"bge-reranker-base": DEFAULT_RERANKER, "baai/bge-reranker-base": DEFAULT_RERANKER}
DISABLED = frozenset({"none", "off", "no", "false", "0"})
RRF_K = 60

T = TypeVar("T", bound=Hashable)


class RerankerUnavailable(LightfootError, RuntimeError):
    """The configured cross-encoder cannot be loaded here (the message says what to do)."""


class Reranker(Protocol):
    model_id: str

    def score(self, question: str, passages: Sequence[str]) -> np.ndarray:
        """(len(passages),) relevance scores, higher is more relevant."""
        ...


class CrossEncoderReranker:
    """A sentence-transformers CrossEncoder loaded from a local directory or the local model cache."""

    def __init__(self, model: str = DEFAULT_RERANKER, device: str = "cpu", max_length: int = 512,
                 batch_size: int = 32) -> None:
        keep_model_hub_offline()
        from sentence_transformers import CrossEncoder

        path = Path(model).expanduser()
        location = str(path.resolve()) if path.exists() else KNOWN_RERANKERS.get(model.casefold(), model)
        try:
            self._model = CrossEncoder(location, device=device, max_length=max_length,
                                       local_files_only=not path.exists())
        except Exception as err:  # the library raises many kinds for a missing or broken model
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise RerankerUnavailable(
                f"cannot load cross-encoder {model!r} from {location!r} ({reason}); "
                f"download its files to a directory and set {RERANKER_ENV} to that path"
            ) from err
        if int(self._model.num_labels) != 1:
            raise RerankerUnavailable(
                f"cross-encoder {model!r} has {self._model.num_labels} output labels; a reranker has one score")
        self._model.eval()
        self.batch_size = batch_size
        self.model_id = path.name if path.exists() else location

    def score(self, question: str, passages: Sequence[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0, dtype=np.float32)
        pairs = [(question, text) for text in passages]
        scores = self._model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(scores, dtype=np.float32).reshape(len(passages))


@dataclass(frozen=True)
class RerankerStatus:
    """Whether retrieval reranks, with which model, and if not, why."""

    state: str  # "available", "unavailable" or "disabled"
    model: str | None = None
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.state == "available"

    def as_dict(self) -> dict:
        return asdict(self)


def load_reranker(spec: str | None = None) -> tuple[Reranker | None, RerankerStatus]:
    """The configured cross-encoder (argument, else ``$LIGHTFOOT_RERANKER``, else the default).

    ``none`` (or ``off``) disables reranking. A model that cannot be loaded gives no reranker and
    an ``unavailable`` status with the reason, never an exception.
    """
    chosen = reranker_spec(spec) or DEFAULT_RERANKER
    if chosen.strip().casefold() in DISABLED:
        return None, RerankerStatus("disabled", None, "reranking is turned off")
    try:
        reranker = CrossEncoderReranker(chosen)
    except RerankerUnavailable as err:
        return None, RerankerStatus("unavailable", chosen, str(err))
    return reranker, RerankerStatus("available", reranker.model_id)


def ranking_from_scores(items: Sequence[T], scores: np.ndarray) -> list[T]:
    """Items by descending score; equal scores keep the input order."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return [items[i] for i in order]


def reciprocal_rank_fusion(rankings: Sequence[Sequence[T]], k: int = RRF_K) -> list[tuple[T, float]]:
    """Items of several rankings by descending RRF score ``Σ 1/(k + rank)``, ranks from 1.

    An item absent from a ranking gets nothing from it. Ties go to the item that ranks best in the
    first ranking, then to the order of first appearance.
    """
    if k < 0:
        raise ValueError(f"k must not be negative, got {k}")
    scores: dict[T, float] = {}
    first_seen: dict[T, tuple[int, int]] = {}
    for which, ranking in enumerate(rankings):
        if len(set(ranking)) != len(ranking):
            raise ValueError(f"ranking {which} lists an item twice")
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            first_seen.setdefault(item, (which, rank))
    return sorted(scores.items(), key=lambda pair: (-pair[1], first_seen[pair[0]]))
