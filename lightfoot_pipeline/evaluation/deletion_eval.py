"""The deletion evaluation (paper §4): what deleting documents does to retrieval.

It is the deletion trial (deletion_trial.py), both stores built in this process, with every
question run through every mode of the plan at each of its phases:

1. the store of the whole dataset, built from its recorded extractions (phase ``before``);
2. the same store after ``pipeline.delete`` of a seeded random fraction of the documents, timed,
   with the model and embedder calls it makes counted (phase ``after``);
3. a fresh store of the surviving documents only (phase ``fresh``): the two stores' fingerprints
   and tables must be equal, and an exact deletion gives every question the same ranking as the
   fresh build.

A question's evidence was *deleted* when any of its gold documents was deleted, else it is
*intact*. Recall is reported for both groups, before and after: intact questions should keep
their recall (their evidence is all there), deleted ones lose what was deleted. No ranking after
the deletion may name a deleted document.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lightfoot_pipeline.evaluation.deletion_trial import AFTER, BEFORE, FRESH, run_trial
from lightfoot_pipeline.evaluation.evaluate import (
    Echo,
    EvalPlan,
    PhaseResult,
    ProgressFactory,
    evaluate_store,
    plan_evaluation,
    snapshot_record,
)
from lightfoot_pipeline.evaluation.harness import HarnessError, QuestionResult
from lightfoot_pipeline.evaluation.runs import DELETION_FILE, index_cost, remove_tree, results_frame, write_run
from lightfoot_pipeline.ingest.dataset import load_questions
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.store.scratch import new_scratch
from lightfoot_pipeline.store.store import Store

KIND = "deletion-audit"
INTACT, DELETED = "intact", "deleted"


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


def run_deletion_audit(dataset_dir: Path, questions_file: Path, embedder: Embedder, plan: EvalPlan | None = None, *,
                       fraction: float = 0.1, seed: int = 0, work_dir: Path | None = None,
                       run_dir: Path | None = None, overwrite: bool = False, echo: Echo = print,
                       progress_factory: ProgressFactory = lambda label: None) -> AuditOutcome:
    """The deletion audit (audit.run_trial, both stores built here) with the plan's questions run
    at each phase; the stores go with a temporary ``work_dir``, and the run goes to ``run_dir``."""
    plan = plan or plan_evaluation()
    deep = [m.name for m in plan.modes if m.deep]
    if deep:  # its rankings come from model calls, which a model-free audit does not make
        raise HarnessError(f"the deletion audit runs retrieval modes only; {', '.join(deep)} calls the model")
    dataset_dir = Path(dataset_dir)
    questions = load_questions(questions_file)
    scratch = Path(work_dir) if work_dir is not None else new_scratch("deletion-audit")
    phases: dict[str, PhaseResult] = {}
    seen: dict = {}

    def observe(phase: str, store: Store) -> None:
        if phase == BEFORE:  # what the whole dataset's index cost, before the deletion changes it
            seen["cost"] = index_cost(store)
        phases[phase], snapshot = evaluate_store(store, embedder, questions, plan,
                                                 progress=lambda: progress_factory(phase))
        seen.setdefault("snapshot", snapshot)

    try:
        trial = run_trial(dataset_dir, Store(str(scratch / "store")), Store(str(scratch / "fresh-store")), embedder,
                          fraction=fraction, seed=seed, observe=observe, echo=echo)
    finally:
        if work_dir is None:
            remove_tree(scratch)
    before, after, rebuilt = phases[BEFORE], phases[AFTER], phases[FRESH]
    doomed = set(trial.doomed)
    split = evidence_split(before.results, doomed)
    leaks = sorted({(r.mode, r.qid) for r in after.results if doomed.intersection(r.ranked_doc_ids)})
    after_rankings = {(r.mode, r.qid): r.ranked_chunk_ids for r in after.results}
    differing = sorted((r.mode, r.qid) for r in rebuilt.results
                       if after_rankings.get((r.mode, r.qid)) != r.ranked_chunk_ids)
    rows = [{"phase": phase, "evidence": split[r.qid], **r.row()}
            for phase, result in ((BEFORE, before), (AFTER, after), (FRESH, rebuilt)) for r in result.results]
    deleted = trial.deleted
    deletion = {
        "fraction": fraction,
        "seed": seed,
        "documents": len(trial.documents),
        "deleted_docs": len(deleted.deleted),
        "surviving_docs": len(trial.survivors),
        "deleted_doc_ids": deleted.deleted,
        "passages_removed": deleted.passages_removed,
        "delete_seconds": round(deleted.seconds, 3),
        "model_calls": trial.model_calls,
        "reported_model_calls": deleted.model_calls,
        "embedder_calls": trial.embedder_calls,
        "build_seconds": trial.build_seconds,
        "build_model_calls": trial.built.model_calls,
        "fresh_build_seconds": trial.fresh_seconds,
        "fresh_build_model_calls": trial.fresh_model_calls,
        "fingerprint_equal": trial.fingerprint_equal,
        "fingerprint_after_delete": trial.mine.digest,
        "fingerprint_fresh": trial.theirs.digest,
        "tables_differing": trial.mine.differences(trial.theirs),
        "counts_after_delete": trial.mine.counts(),
        "counts_fresh": trial.theirs.counts(),
        "graph_change": deleted.graph.as_dict(),
        "questions": {"intact": sum(1 for v in split.values() if v == INTACT),
                      "deleted": sum(1 for v in split.values() if v == DELETED)},
        "leaks": [{"mode": m, "qid": q} for m, q in leaks],
        "rankings_equal_fresh": not differing,
        "rankings_differing_fresh": [{"mode": m, "qid": q} for m, q in differing],
        "recall": group_recalls(rows, [f"recall@{k}" for k in plan.ks]),
    }
    config = {
        "kind": KIND,
        "dataset": str(dataset_dir),
        "questions": str(questions_file),
        "n_questions": len(split),
        "questions_without_gold": len(questions) - len(split),
        "embedder": embedder.model_id,
        **plan.record(seen["snapshot"]),
        "snapshots": {BEFORE: snapshot_record(before.info), AFTER: snapshot_record(after.info),
                      FRESH: snapshot_record(rebuilt.info)},
        "index_cost": {**seen["cost"], "build": {"seconds": trial.build_seconds,
                                                  "model_calls": trial.built.model_calls}},
        "answers": None,
        "fraction": fraction,
        "seed": seed,
    }
    outcome = AuditOutcome(deletion=deletion, rows=rows, config=config)
    if run_dir is not None:
        outcome.run_dir = write_run(run_dir, config, results_frame(rows, plan.ks), overwrite=overwrite,
                                    extra_files={DELETION_FILE: deletion})
    return outcome
