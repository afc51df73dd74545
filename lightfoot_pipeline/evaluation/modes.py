"""The retrieval modes an evaluation compares, and the recall cut-offs it reports.

Every evaluation (``lightfoot eval``, ``eval --run-dir``, ``eval-deletion``) runs the same modes
side by side, on the same snapshot and question vectors:

- ``dense``: passages by the cosine of their vector with the question's, no graph (baseline);
- ``lightfoot``: the paper's retrieval (retrieve.py) in PageRank order;
- ``lightfoot+rerank``: the same, reranked by the cross-encoder and fused by RRF (only when a
  cross-encoder is available);
- ``hipporag2``: a HippoRAG 2-style configuration of the same graph (baseline): damping 0.5,
  every passage seeded at 0.05 × its min–max scaled similarity, the entities of the top 5 facts
  seeded, no reranker;
- ``hgmem``: the deep mode (retrieval/deep), HGMem's working memory over the same graph: model calls
  at every step, so it runs only when named and with answers (``--answer`` or ``--dry-run``). Its
  ranked passages are those its answer was written from, then the rest it retrieved, in order.

This module imports no retrieval code at load time, so that the command line can name the modes
and cut-offs without loading it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lightfoot_pipeline.retrieval.retrieve import RetrievalSettings
    from lightfoot_pipeline.snapshot.format import Snapshot

K_VALUES = (2, 5, 10)  # recall@k reported by default
ANSWER_FACTS = 10  # facts the Lightfoot modes give the answer model with the passages

DENSE, LIGHTFOOT, LIGHTFOOT_RERANK, HIPPORAG2 = "dense", "lightfoot", "lightfoot+rerank", "hipporag2"
HGMEM = "hgmem"
MODE_NAMES = (DENSE, LIGHTFOOT, LIGHTFOOT_RERANK, HIPPORAG2, HGMEM)
BASELINES = (DENSE, HIPPORAG2)


@dataclass(frozen=True)
class Mode:
    """One retrieval configuration evaluated side by side with the others."""

    name: str
    description: str
    graph: bool  # False: dense cosine ranking only
    settings: RetrievalSettings | None = None
    all_passages_seeded: bool = False  # seed every passage (seed_passages = the snapshot's count)
    rerank: bool = False
    answer_facts: int = 0  # facts given to the answer model with the passages
    deep: bool = False  # the deep mode: retrieval and memory driven by the model, step by step

    def settings_for(self, snapshot: Snapshot) -> RetrievalSettings | None:
        if self.settings is None or not self.all_passages_seeded:
            return self.settings
        return replace(self.settings, seed_passages=max(1, snapshot.passages.height))

    def as_dict(self, snapshot: Snapshot | None = None) -> dict:
        settings = self.settings_for(snapshot) if snapshot is not None else self.settings
        return {
            "name": self.name, "description": self.description, "graph": self.graph, "rerank": self.rerank,
            "all_passages_seeded": self.all_passages_seeded, "answer_facts": self.answer_facts, "deep": self.deep,
            "retrieval": asdict(settings) if settings is not None else None,
        }


def standard_modes(reranker_available: bool) -> list[Mode]:
    """Lightfoot (with the reranker when there is one) and the two baselines, in MODE_NAMES order."""
    from lightfoot_pipeline.retrieval.retrieve import RetrievalSettings

    modes = [
        Mode(DENSE, "dense-only: passages by cosine similarity with the question", graph=False),
        Mode(LIGHTFOOT, "Lightfoot: fact- and passage-seeded PageRank (damping 0.9, top-2 facts, 100 passages)",
             graph=True, settings=RetrievalSettings(), answer_facts=ANSWER_FACTS),
    ]
    if reranker_available:
        modes.append(Mode(LIGHTFOOT_RERANK, "Lightfoot with cross-encoder reranking fused by RRF (k=60)",
                          graph=True, settings=RetrievalSettings(), rerank=True, answer_facts=ANSWER_FACTS))
    modes.append(Mode(
        HIPPORAG2, "HippoRAG 2-style on the same graph: damping 0.5, every passage seeded at 0.05 x its "
        "min-max similarity, top-5 facts, no reranker",
        graph=True, settings=RetrievalSettings(top_facts=5, passage_seed_weight=0.05, damping=0.5),
        all_passages_seeded=True,
    ))
    return modes


def available_modes(reranker_available: bool) -> list[Mode]:
    """Every mode an evaluation can run: the standard ones (its default), then ``hgmem``."""
    from lightfoot_pipeline.retrieval.retrieve import RetrievalSettings

    return [*standard_modes(reranker_available), Mode(
        HGMEM, "HGMem-style deep mode: a working memory of points over the graph, local and global subqueries "
        "for up to 3 steps, the answer written from the memory (model calls at every step)",
        graph=True, settings=RetrievalSettings(), deep=True,
    )]
