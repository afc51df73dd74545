"""The index-rule ablation: what each rule that changes which names link does to retrieval.

Two rules of the index decide which names link (and so the entities, synonym edges and the
graph the walk runs on):

- **the numbers rule** (index/numbers.py): two names link only when they carry the same numbers,
  so "1998 FIFA World Cup" never merges with "2002 FIFA World Cup";
- **banded links** (index/lsh.py): only the name pairs that share an LSH band key are compared,
  instead of every pair of a type (``exhaustive``).

:func:`run_ablation` builds the dataset's store once per setting (:data:`SETTINGS`, from the
recorded extractions, with no model call; each text is embedded once, for the first setting, and
its vector reused by the others: :class:`ReusedVectors`), runs every question set through the
chosen modes on each, and reports recall@k per setting with a bootstrap interval of its mean and a paired
bootstrap interval of its difference from the reference setting (the defaults), on each question
set and on all of them pooled. ``benchmarks/quality.py`` prints and keeps it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lightfoot_pipeline.evaluation.evaluate import ensure_dataset_indexed, plan_evaluation
from lightfoot_pipeline.evaluation.harness import QuestionResult, run_questions
from lightfoot_pipeline.evaluation.metrics import (
    BOOTSTRAP_RESAMPLES,
    PairedBootstrap,
    bootstrap_interval,
    paired_bootstrap,
)
from lightfoot_pipeline.evaluation.modes import DENSE, K_VALUES, LIGHTFOOT
from lightfoot_pipeline.ingest.dataset import Question
from lightfoot_pipeline.models.embedder import Embedder, embedding_chunks
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import ALIASES, ENTITIES, FACTS, NAME_LINKS, SYNONYM_EDGES
from lightfoot_pipeline.store.vectors import EMBED_CHUNK, VectorCache

DEFAULT = "default"
POOLED = "pooled"

# Each setting of the two rules, by the name the report gives it; the first is the reference.
SETTINGS: dict[str, IndexSettings] = {
    DEFAULT: IndexSettings(),
    "numbers-off": IndexSettings(numbers_must_agree=False),
    "exhaustive": IndexSettings(lsh_bands=0),
    "numbers-off+exhaustive": IndexSettings(numbers_must_agree=False, lsh_bands=0),
}

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Cell:
    """One setting's recall@k on one question set, for one mode."""

    setting: str
    mode: str
    metric: str
    n: int
    mean: float
    low: float
    high: float
    versus: PairedBootstrap | None = None  # the paired difference from the reference (None for the reference)

    @property
    def difference(self) -> float | None:
        return None if self.versus is None else self.versus.difference

    @property
    def significant(self) -> bool | None:
        return None if self.versus is None else self.versus.significant

    def as_dict(self) -> dict:
        versus = self.versus
        return {"setting": self.setting, "mode": self.mode, "metric": self.metric, "n": self.n,
                "mean": self.mean, "low": self.low, "high": self.high, "difference": self.difference,
                "difference_low": None if versus is None else versus.low,
                "difference_high": None if versus is None else versus.high, "significant": self.significant}


VECTOR_KINDS = ("passage", "name", "fact")  # the vector caches a store keeps (store/vectors.py)


class ReusedVectors:
    """The embedder of the settings after the first: a text's vector comes from the vector caches
    of a store already built with the same model when it is there, and is embedded otherwise.

    The link rules change which names link, never a vector, so every setting's store gets the
    vectors a build of its own would embed, and each text is embedded once in the whole ablation.
    """

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.caches: list[VectorCache] = []
        self.embedded = 0  # texts the inner embedder was given

    def add_store(self, store: Store) -> None:
        self.caches.extend(VectorCache.for_model(store, kind, self.model_id, self.dim) for kind in VECTOR_KINDS)

    def chunks(self, texts: Sequence[str]) -> list[list[int]]:
        return embedding_chunks(self.inner, texts, EMBED_CHUNK)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        todo = list(range(len(texts)))
        for cache in self.caches:
            if not todo:
                break
            found = cache.stored_vectors([texts[i] for i in todo])
            for i, vector in zip(todo, found, strict=True):
                if vector is not None:
                    out[i] = vector
            todo = [i for i, vector in zip(todo, found, strict=True) if vector is None]
        if todo:
            out[todo] = self.inner.embed([texts[i] for i in todo])
            self.embedded += len(todo)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


def index_counts(store: Store) -> dict[str, int]:
    """The rows of the tables the link rules shape: names, name links, entities, synonym edges, facts."""
    return {name: store.read(name).height for name in
            (ALIASES.name, NAME_LINKS.name, ENTITIES.name, SYNONYM_EDGES.name, FACTS.name)}


def build_setting(root: Path, name: str, settings: IndexSettings, dataset_dir: Path, embedder: Embedder) -> Store:
    """The dataset's store under these settings, at ``root/name`` (built unless it is there already;
    a store there built with other settings is refused by :func:`ensure_dataset_indexed`)."""
    store = Store(str(root / name / "store"))
    ensure_dataset_indexed(store, dataset_dir, embedder, settings=settings)
    return store


def scores_of(results: Sequence[QuestionResult], mode: str, metric: str) -> dict[str, float]:
    return {r.qid: float(r.recall[metric]) for r in results if r.mode == mode}


def compare_settings(per_setting: Mapping[str, Mapping[str, float]], *, mode: str, metric: str,
                     reference: str = DEFAULT, resamples: int = BOOTSTRAP_RESAMPLES) -> list[Cell]:
    """Each setting's mean of one metric over the same questions, with its interval and its paired
    difference from the reference's."""
    order = sorted(per_setting[reference])
    for setting, scores in per_setting.items():
        if sorted(scores) != order:
            raise ValueError(f"setting {setting!r} scored other questions than {reference!r}")
    base = np.array([per_setting[reference][q] for q in order])
    cells = []
    for setting, scores in per_setting.items():
        values = np.array([scores[q] for q in order])
        low, high = bootstrap_interval(values, resamples=resamples)
        versus = None if setting == reference else paired_bootstrap(values, base, resamples=resamples)
        cells.append(Cell(setting, mode, metric, len(order), float(values.mean()), low, high, versus))
    return cells


def run_ablation(
    dataset_dir: Path,
    question_sets: Mapping[str, Sequence[Question]],
    embedder: Embedder,
    work_dir: Path,
    *,
    settings: Mapping[str, IndexSettings] = SETTINGS,
    modes: Sequence[str] = (DENSE, LIGHTFOOT),
    ks: Sequence[int] = K_VALUES,
    resamples: int = BOOTSTRAP_RESAMPLES,
    echo: Echo = lambda line: None,
) -> dict:
    """Every question set through every mode on the dataset's store under each setting.

    The first setting is the reference. The question sets' ids must not repeat across sets (the
    pooled set is their union). Returns ``{"settings": {name: {index_settings, counts,
    build_seconds, eval_seconds}}, "sets": {set: [cell, …]}, "modes", "ks", "questions"}``.
    """
    if not settings:
        raise ValueError("the ablation needs at least one setting")
    if not question_sets:
        raise ValueError("the ablation needs at least one question set")
    qids = [q.qid for questions in question_sets.values() for q in questions if q.gold_doc_ids]
    if len(set(qids)) != len(qids):
        raise ValueError("question ids repeat across the question sets; the pooled set needs them distinct")
    plan = plan_evaluation(list(modes), ks)
    metrics = [f"recall@{k}" for k in plan.ks]
    reference = next(iter(settings))
    described: dict[str, dict] = {}
    results: dict[str, dict[str, list[QuestionResult]]] = {}
    reused = ReusedVectors(embedder)
    for name, chosen in settings.items():
        started, embedded = time.perf_counter(), reused.embedded
        store = build_setting(work_dir, name, chosen, dataset_dir, reused)
        info = export_snapshot(store, reused)
        built = time.perf_counter() - started
        reused.add_store(store)
        snapshot = load_snapshot(store, info.snapshot_id)
        started = time.perf_counter()
        results[name] = {set_name: run_questions(snapshot, embedder, questions, plan.modes, ks=plan.ks)
                         for set_name, questions in question_sets.items()}
        described[name] = {"index_settings": chosen.shape_of_index(), "counts": index_counts(store),
                           "build_seconds": round(built, 2), "texts_embedded": reused.embedded - embedded,
                           "eval_seconds": round(time.perf_counter() - started, 2), "snapshot_id": info.snapshot_id}
        echo(f"{name}: {described[name]['counts']} (built in {described[name]['build_seconds']} s)")
    names = list(question_sets) + ([POOLED] if len(question_sets) > 1 else [])
    sets: dict[str, list[dict]] = {}
    counts: dict[str, int] = {}
    for set_name in names:
        chosen_sets = list(question_sets) if set_name == POOLED else [set_name]
        cells = []
        for mode in plan.modes:
            for metric in metrics:
                per_setting = {
                    setting: {qid: value for s in chosen_sets
                              for qid, value in scores_of(results[setting][s], mode.name, metric).items()}
                    for setting in settings
                }
                cells.extend(compare_settings(per_setting, mode=mode.name, metric=metric, reference=reference,
                                              resamples=resamples))
        sets[set_name] = [c.as_dict() for c in cells]
        counts[set_name] = cells[0].n if cells else 0
    return {"reference": reference, "modes": [m.name for m in plan.modes], "ks": list(plan.ks),
            "questions": counts, "settings": described, "sets": sets}


def ablation_table(report: dict, set_name: str, mode: str) -> list[str]:
    """Markdown rows: one setting per row, recall@k as mean [interval] and its difference from the
    reference with the paired interval (``*``: the interval excludes zero)."""
    ks = report["ks"]
    head = "| setting | " + " | ".join(f"R@{k}" for k in ks) + " | " + " | ".join(f"Δ R@{k}" for k in ks) + " |"
    rows = [head, "|" + "---|" * (1 + 2 * len(ks))]
    cells = [c for c in report["sets"][set_name] if c["mode"] == mode]
    for setting in report["settings"]:
        mine = {c["metric"]: c for c in cells if c["setting"] == setting}
        values = [f"{mine[f'recall@{k}']['mean']:.3f} [{mine[f'recall@{k}']['low']:.3f}, "
                  f"{mine[f'recall@{k}']['high']:.3f}]" for k in ks]
        diffs = []
        for k in ks:
            c = mine[f"recall@{k}"]
            if c["difference"] is None:
                diffs.append("—")
            else:
                mark = " *" if c["significant"] else ""
                diffs.append(f"{c['difference']:+.3f} [{c['difference_low']:+.3f}, {c['difference_high']:+.3f}]{mark}")
        rows.append(f"| {setting} | " + " | ".join(values) + " | " + " | ".join(diffs) + " |")
    return rows
