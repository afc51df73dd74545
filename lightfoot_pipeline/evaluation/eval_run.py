"""An evaluation run: index the dataset (no model call), snapshot it, run every mode, keep the run.

``lightfoot eval --run-dir DIR`` calls :func:`run_evaluation`. The steps:

1. build the dataset into the store from its recorded extractions, unless the store holds it;
2. export (or reuse) the serving snapshot and load it;
3. run every question through every mode (harness.py): Lightfoot and the baselines;
4. optionally answer through the model: the cost is estimated first (``dry_run`` stops there),
   then the calls run under the budget cap, and each is charged to the store's cost ledger;
5. write the run directory (runs.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.serving.answer import Answerer
from lightfoot_pipeline.ingest.dataset import load_questions
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.evaluation.evaluate import ensure_dataset_indexed
from lightfoot_pipeline.evaluation.harness import (
    K_VALUES, AnswerSpend, CostEstimate, HarnessError, Mode, QuestionResult, answer_rows, estimate_answer_cost,
    run_questions, select_modes, standard_modes,
)
from lightfoot_pipeline.serving.rerank import Reranker, RerankerStatus
from lightfoot_pipeline.evaluation.runs import EVAL, index_cost, results_frame, write_run
from lightfoot_pipeline.serving.snapshot import Snapshot, SnapshotInfo, load_snapshot
from lightfoot_pipeline.serving.export import export_snapshot
from lightfoot_pipeline.store.store import Store

Echo = Callable[[str], None]


@dataclass
class AnswerOptions:
    """Whether and how a run answers: the answerer, the budget cap, the modes, a dry run."""

    answerer: Answerer | None  # None: only a dry run can go ahead
    budget_usd: float | None = 1.0
    dry_run: bool = False
    modes: Sequence[str] | None = None  # default: every mode of the run

    def describe(self) -> dict:
        settings = self.answerer.client.settings if self.answerer is not None else None
        return {
            "model": settings.model if settings else None,
            "endpoint": settings.endpoint() if settings else None,
            "prices": list(settings.prices()) if settings else None,
            "budget_usd": self.budget_usd,
            "modes": list(self.modes) if self.modes else None,
            "n_facts": self.answerer.n_facts if self.answerer else None,
            "n_passages": self.answerer.n_passages if self.answerer else None,
            "max_tokens": self.answerer.max_tokens if self.answerer else None,
        }


@dataclass
class PhaseResult:
    """One snapshot's evaluation: which snapshot, and every (mode, question) result."""

    info: SnapshotInfo
    results: list[QuestionResult]
    seconds: float


@dataclass
class EvaluationOutcome:
    config: dict
    results: list[QuestionResult]
    estimate: CostEstimate | None = None
    spend: AnswerSpend | None = None
    run_dir: Path | None = None
    dry_run: bool = False


def evaluate_store(store: Store, embedder: Embedder, questions, modes: Sequence[Mode], *,
                   reranker: Reranker | None = None, reranker_status: RerankerStatus | None = None,
                   ks: Sequence[int] = K_VALUES,
                   progress: Callable[[], Callable[[int, int], None] | None] | None = None,
                   ) -> tuple[PhaseResult, Snapshot]:
    """Snapshot the store's committed state and run every mode on it.

    ``progress`` makes the per-question progress callback once the snapshot is loaded (so that
    its rate counts questions only).
    """
    started = time.perf_counter()
    info = export_snapshot(store, embedder)
    snapshot = load_snapshot(store, info.snapshot_id)
    results = run_questions(snapshot, embedder, questions, modes, reranker=reranker,
                            reranker_status=reranker_status, ks=ks, progress=progress() if progress else None)
    return PhaseResult(info=info, results=results, seconds=round(time.perf_counter() - started, 3)), snapshot


def snapshot_record(info: SnapshotInfo) -> dict:
    return {"snapshot_id": info.snapshot_id, "store_seq": info.store_seq, "fingerprint": info.fingerprint,
            "counts": info.counts, "models": info.models}


def run_evaluation(
    store: Store,
    dataset_dir: Path,
    questions_file: Path,
    embedder: Embedder,
    *,
    reranker: Reranker | None = None,
    reranker_status: RerankerStatus | None = None,
    modes: Sequence[str] | None = None,
    ks: Sequence[int] = K_VALUES,
    answers: AnswerOptions | None = None,
    run_dir: Path | None = None,
    overwrite: bool = False,
    echo: Echo = print,
    progress_factory: Callable[[str], Callable[[int, int], None] | None] = lambda label: None,
) -> EvaluationOutcome:
    questions = load_questions(questions_file)
    chosen = select_modes(standard_modes(reranker is not None), modes)
    build = ensure_dataset_indexed(store, dataset_dir, embedder, progress=progress_factory("building the store"))
    if build["built"]:
        echo(f"built {build['documents']} documents into {store.uri} in {build['seconds']}s "
             f"with {build['model_calls']} model calls")
    phase, snapshot = evaluate_store(store, embedder, questions, chosen, reranker=reranker,
                                     reranker_status=reranker_status, ks=ks,
                                     progress=lambda: progress_factory("questions"))
    results = phase.results
    config = {
        "kind": EVAL,
        "dataset": str(dataset_dir),
        "questions": str(questions_file),
        "n_questions": len({r.qid for r in results}),
        "questions_without_gold": len(questions) - len({r.qid for r in results}),
        "ks": sorted(set(ks)),
        "store": store.uri,
        "embedder": embedder.model_id,
        "reranker": (reranker_status or RerankerStatus("disabled", None, "no reranker configured")).as_dict()
        if reranker is None else RerankerStatus("available", reranker.model_id).as_dict(),
        "modes": {m.name: m.as_dict(snapshot) for m in chosen},
        "snapshots": {EVAL: snapshot_record(phase.info)},
        "index_cost": index_cost(store, build),
        "eval_seconds": phase.seconds,
        "answers": None,
    }
    outcome = EvaluationOutcome(config=config, results=results)
    if answers is not None:
        answered = [r for r in results if not answers.modes or r.mode in answers.modes]
        if answers.modes:
            missing = sorted(set(answers.modes) - {m.name for m in chosen})
            if missing:
                raise HarnessError(f"cannot answer for modes {missing}: they are not in this run")
        model, prices = _pricing(answers)
        outcome.estimate = estimate_answer_cost(answered, model, prices,
                                                answers.answerer.max_tokens if answers.answerer else 200)
        echo(("dry run: " if answers.dry_run else "answering: ") + outcome.estimate.line()
             + (f"; budget ${answers.budget_usd:g}" if answers.budget_usd is not None else "; no budget cap"))
        if answers.dry_run:
            outcome.dry_run = True
            return outcome
        if answers.answerer is None:
            raise HarnessError("answers need a language-model endpoint; set OPENAI_BASE_URL (or use --dry-run)")
        if answers.budget_usd is not None and outcome.estimate.cost_usd > answers.budget_usd:
            echo(f"the estimate passes the budget: the run stops answering at ${answers.budget_usd:g}")
        outcome.spend = answer_rows(answered, answers.answerer, budget_usd=answers.budget_usd,
                                    progress=progress_factory("answers"))
        ledger_run_id = charge_answers(store, answered, answers.answerer)
        config["answers"] = {**answers.describe(), "estimate": outcome.estimate.as_dict(),
                             "spend": outcome.spend.as_dict(), "ledger_run_id": ledger_run_id}
    if run_dir is not None:
        rows = [{"phase": EVAL, "evidence": None, **r.row()} for r in results]
        outcome.run_dir = write_run(run_dir, config, results_frame(rows, ks), overwrite=overwrite)
    return outcome


def _pricing(answers: AnswerOptions) -> tuple[str, tuple[float, float, str]]:
    if answers.answerer is not None:
        settings = answers.answerer.client.settings
        return settings.model, settings.prices()
    from lightfoot_pipeline.models.llm import LLMSettings

    settings = LLMSettings.from_env()
    return settings.model, settings.prices()


def charge_answers(store: Store, answered: Sequence[QuestionResult], answerer: Answerer) -> str:
    """Every answer call goes into the store's cost ledger (purpose ``answer``), as extraction calls do.

    Returns the ledger's run id (``lightfoot cost --run RUN_ID`` shows the run).
    """
    run_id = ledger.new_run_id("eval")
    price_in, price_out, source = answerer.client.settings.prices()
    charges = [
        ledger.Charge(
            run_id=run_id, purpose="answer", model=r.answer.model, status="error" if r.answer.error else "ok",
            attempts=1, tokens_in=r.answer.tokens_in, tokens_out=r.answer.tokens_out,
            price_in_per_mtok=price_in, price_out_per_mtok=price_out, price_source=source,
            seconds=r.answer.seconds, error_kind=(r.answer.error or "").split(":", 1)[0] or None,
        )
        for r in answered if r.answer is not None
    ]
    ledger.record(store, charges)
    return run_id


def legacy_result(outcome: EvaluationOutcome) -> dict:
    """The run in the shape of ``lightfoot eval --out`` (evaluate.py): modes, per question, run."""
    from lightfoot_pipeline.evaluation.harness import mean_recalls

    per_question: dict[str, dict] = {}
    for r in outcome.results:
        entry = per_question.setdefault(r.qid, {"qid": r.qid, "question": r.question,
                                                "gold_doc_ids": r.gold_doc_ids, "modes": {}})
        entry["modes"][r.mode] = {**r.recall, "ranked": [{"chunk_id": h.chunk_id, "doc_id": h.doc_id}
                                                         for h in r.hits]}
        if r.answer is not None:
            entry["modes"][r.mode]["answer"] = r.row()["prediction"]
    snap = outcome.config["snapshots"][EVAL]
    return {
        "n_questions": outcome.config["n_questions"],
        "modes": mean_recalls(outcome.results),
        "per_question": list(per_question.values()),
        "run": {"snapshot_id": snap["snapshot_id"], "store_seq": snap["store_seq"], "fingerprint": snap["fingerprint"],
                "embedder": outcome.config["embedder"], "reranker": outcome.config["reranker"],
                "dataset": outcome.config["dataset"], "questions": outcome.config["questions"],
                "run_dir": str(outcome.run_dir) if outcome.run_dir else None},
    }
