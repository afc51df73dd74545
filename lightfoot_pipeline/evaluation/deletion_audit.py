"""The deletion audit as an evaluation (paper §4): what deleting documents does to retrieval.

1. Build the store of the whole dataset from its recorded extractions (no model call) and run
   every question through every mode (phase ``before``).
2. Delete a seeded random fraction of the documents through the engine's own deletion path
   (``pipeline.delete``), timing it and counting the model and embedder calls it makes.
3. Run every question again on the store after the deletion (phase ``after``).
4. Build a fresh store of the surviving documents only, compare the two stores' fingerprints and
   tables, and run every question on it too (phase ``fresh``): an exact deletion gives the same
   ranking for every question as the fresh build.

A question's evidence was *deleted* when any of its gold documents was deleted, else it is
*intact*. Recall is reported for both groups, before and after: intact questions should keep
their recall (their evidence is all there), deleted ones lose what was deleted. No ranking after
the deletion may name a deleted document.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from lightfoot_pipeline import pipeline
from lightfoot_pipeline.evaluation.audit import choose_deletions
from lightfoot_pipeline.ingest.dataset import (
    DatasetError, has_recorded_extractions, load_corpus, load_questions, load_recorded_extractions,
)
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.evaluation.eval_run import Echo, evaluate_store, snapshot_record
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.evaluation.harness import K_VALUES, QuestionResult, select_modes, standard_modes
from lightfoot_pipeline.models.llm import LLMClient
from lightfoot_pipeline.serving.rerank import Reranker, RerankerStatus
from lightfoot_pipeline.evaluation.runs import DELETION_FILE, index_cost, remove_tree, results_frame, write_run
from lightfoot_pipeline.store.store import Store

KIND = "deletion-audit"
BEFORE, AFTER, FRESH = "before", "after", "fresh"
INTACT, DELETED = "intact", "deleted"


class CountingEmbedder:
    """An embedder that counts the texts it is asked to embed (and passes everything else on)."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.calls = 0
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        return self._inner.embed(texts)

    def __getattr__(self, name: str):
        attribute = getattr(self._inner, name)  # AttributeError when the inner embedder lacks it
        if name == "embed_query":
            def embed_query(text: str) -> np.ndarray:
                self.calls += 1
                self.texts += 1
                return attribute(text)
            return embed_query
        return attribute


@contextlib.contextmanager
def counting_model_calls() -> Iterator[list[int]]:
    """Count calls to the project's language-model client (every model call goes through it)."""
    counter = [0]
    original = LLMClient.complete

    def counted(self, *args, **kwargs):
        counter[0] += 1
        return original(self, *args, **kwargs)

    LLMClient.complete = counted  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        LLMClient.complete = original  # type: ignore[method-assign]


def evidence_split(results: Sequence[QuestionResult], deleted_doc_ids: set[str]) -> dict[str, str]:
    """``qid -> "deleted"`` when any gold document of the question was deleted, else ``"intact"``."""
    split: dict[str, str] = {}
    for r in results:
        split[r.qid] = DELETED if deleted_doc_ids.intersection(r.gold_doc_ids) else INTACT
    return split


def group_recalls(rows: Sequence[dict], metrics: Sequence[str]) -> dict:
    """Mean recall by mode, evidence group and phase: ``{mode: {group: {phase: {metric: mean}}}}``."""
    out: dict = {}
    for row in rows:
        out.setdefault(row["mode"], {}).setdefault(row["evidence"], {}).setdefault(row["phase"], []).append(row)
    summary: dict = {}
    for mode, groups in out.items():
        summary[mode] = {}
        for group, phases in groups.items():
            summary[mode][group] = {
                phase: {"n": len(rs), **{m: round(float(np.mean([r[m] for r in rs])), 4) for m in metrics}}
                for phase, rs in phases.items()
            }
    return summary


@dataclass
class AuditOutcome:
    deletion: dict
    rows: list[dict]
    config: dict
    run_dir: Path | None = None


def run_deletion_audit(
    dataset_dir: Path,
    questions_file: Path,
    embedder: Embedder,
    *,
    reranker: Reranker | None = None,
    reranker_status: RerankerStatus | None = None,
    fraction: float = 0.1,
    seed: int = 0,
    modes: Sequence[str] | None = None,
    ks: Sequence[int] = K_VALUES,
    work_dir: Path | None = None,
    run_dir: Path | None = None,
    overwrite: bool = False,
    echo: Echo = print,
    progress_factory: Callable[[str], Callable[[int, int], None] | None] = lambda label: None,
) -> AuditOutcome:
    dataset_dir = Path(dataset_dir)
    if not has_recorded_extractions(dataset_dir):
        raise DatasetError(f"{dataset_dir} has no extractions.jsonl: the audit builds its stores with no model call")
    documents = load_corpus(dataset_dir)
    records = load_recorded_extractions(dataset_dir)
    questions = load_questions(questions_file)
    chosen = select_modes(standard_modes(reranker is not None), modes)
    doomed = choose_deletions([d.doc_id for d in documents], fraction, seed)
    doomed_set = set(doomed)
    scratch = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="lightfoot-deletion-audit-"))
    made_scratch = work_dir is None
    full, fresh = Store(str(scratch / "store")), Store(str(scratch / "fresh-store"))
    for store in (full, fresh):
        if store.exists():
            raise DatasetError(f"the audit builds its own stores; {store.uri} already holds one")
    counting = CountingEmbedder(embedder)
    try:
        started = time.perf_counter()
        built = pipeline.ingest(full, documents, ReplayExtractor(records), counting)
        build_seconds = round(time.perf_counter() - started, 3)
        echo(f"built {len(documents)} documents in {build_seconds}s with {built.model_calls} model calls")
        before, snapshot = evaluate_store(full, counting, questions, chosen, reranker=reranker,
                                          reranker_status=reranker_status, ks=ks,
                                          progress=lambda: progress_factory("before"))
        cost = index_cost(full, {"seconds": build_seconds, "model_calls": built.model_calls})

        embeds_before = counting.calls
        with counting_model_calls() as model_calls:
            deleted = pipeline.delete(full, doomed, reason=f"deletion audit (fraction {fraction}, seed {seed})")
        embedder_calls = counting.calls - embeds_before
        echo(f"deleted {len(deleted.deleted)} of {len(documents)} documents in {deleted.seconds:.2f}s with "
             f"{model_calls[0]} model calls and {embedder_calls} embedder calls")
        after, _ = evaluate_store(full, counting, questions, chosen, reranker=reranker,
                                  reranker_status=reranker_status, ks=ks, progress=lambda: progress_factory("after"))

        survivors = [d for d in documents if d.doc_id not in doomed_set]
        started = time.perf_counter()
        fresh_report = pipeline.ingest(fresh, survivors, ReplayExtractor(records), counting)
        fresh_seconds = round(time.perf_counter() - started, 3)
        mine, theirs = pipeline.fingerprint(full), pipeline.fingerprint(fresh)
        rebuilt, _ = evaluate_store(fresh, counting, questions, chosen, reranker=reranker,
                                    reranker_status=reranker_status, ks=ks, progress=lambda: progress_factory("fresh"))
    except BaseException:
        if made_scratch:
            remove_tree(scratch)
        raise
    split = evidence_split(before.results, doomed_set)
    leaks = sorted({(r.mode, r.qid) for r in after.results if doomed_set.intersection(r.ranked_doc_ids)})
    after_rankings = {(r.mode, r.qid): r.ranked_chunk_ids for r in after.results}
    differing = sorted((r.mode, r.qid) for r in rebuilt.results
                       if after_rankings.get((r.mode, r.qid)) != r.ranked_chunk_ids)
    rows = [{"phase": phase, "evidence": split[r.qid], **r.row()}
            for phase, result in ((BEFORE, before), (AFTER, after), (FRESH, rebuilt)) for r in result.results]
    metrics = [f"recall@{k}" for k in sorted(set(ks))]
    deletion = {
        "fraction": fraction,
        "seed": seed,
        "documents": len(documents),
        "deleted_docs": len(deleted.deleted),
        "surviving_docs": len(survivors),
        "deleted_doc_ids": deleted.deleted,
        "passages_removed": deleted.passages_removed,
        "delete_seconds": round(deleted.seconds, 3),
        "model_calls": model_calls[0],
        "reported_model_calls": deleted.model_calls,
        "embedder_calls": embedder_calls,
        "build_seconds": build_seconds,
        "build_model_calls": built.model_calls,
        "fresh_build_seconds": fresh_seconds,
        "fresh_build_model_calls": fresh_report.model_calls,
        "fingerprint_equal": mine.digest == theirs.digest,
        "fingerprint_after_delete": mine.digest,
        "fingerprint_fresh": theirs.digest,
        "tables_differing": mine.differences(theirs),
        "counts_after_delete": mine.counts(),
        "counts_fresh": theirs.counts(),
        "graph_change": deleted.graph.as_dict(),
        "questions": {"intact": sum(1 for v in split.values() if v == INTACT),
                      "deleted": sum(1 for v in split.values() if v == DELETED)},
        "leaks": [{"mode": m, "qid": q} for m, q in leaks],
        "rankings_equal_fresh": not differing,
        "rankings_differing_fresh": [{"mode": m, "qid": q} for m, q in differing],
        "recall": group_recalls(rows, metrics),
    }
    config = {
        "kind": KIND,
        "dataset": str(dataset_dir),
        "questions": str(questions_file),
        "n_questions": len(split),
        "questions_without_gold": len(questions) - len(split),
        "ks": sorted(set(ks)),
        "embedder": embedder.model_id,
        "reranker": (RerankerStatus("available", reranker.model_id) if reranker is not None
                     else reranker_status or RerankerStatus("disabled", None, "no reranker configured")).as_dict(),
        "modes": {m.name: m.as_dict(snapshot) for m in chosen},
        "snapshots": {BEFORE: snapshot_record(before.info), AFTER: snapshot_record(after.info),
                      FRESH: snapshot_record(rebuilt.info)},
        "index_cost": cost,
        "answers": None,
        "fraction": fraction,
        "seed": seed,
    }
    outcome = AuditOutcome(deletion=deletion, rows=rows, config=config)
    if run_dir is not None:
        outcome.run_dir = write_run(run_dir, config, results_frame(rows, ks), overwrite=overwrite,
                                    extra_files={DELETION_FILE: deletion})
    if made_scratch:
        remove_tree(scratch)
    return outcome
