"""The evaluation of ``lightfoot eval``: index the dataset (no model call), snapshot it, run every mode, keep the run.

``lightfoot eval`` calls :func:`run_evaluation`. The steps:

1. build the dataset into the store from its recorded extractions, unless the store holds it
   (:func:`ensure_dataset_indexed`);
2. export (or reuse) the serving snapshot and load it, and take the principal's view of it
   (permissions/views.py; the operator, who reads everything, by default): every mode, every answer
   and the deep loop read that view only;
3. run every question through every mode (harness.py): Lightfoot and the baselines;
4. optionally answer through the model: the cost is estimated first (``dry_run`` stops there),
   then the calls run under the budget cap, and each is charged to the store's cost ledger; the
   ``hgmem`` mode's questions run the deep loop under the same cap (deep_eval.py);
5. write the run directory (runs.py), and/or the run as one JSON document (:func:`eval_json`,
   ``--out``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lightfoot_pipeline import operations
from lightfoot_pipeline.evaluation.deep_eval import (
    DEEP_FILE,
    add_estimates,
    add_spends,
    deep_record,
    deep_rows,
    estimate_deep_cost,
)
from lightfoot_pipeline.evaluation.harness import (
    DEPTH,
    AnswerSpend,
    CostEstimate,
    HarnessError,
    QuestionResult,
    answer_rows,
    estimate_answer_cost,
    mean_recalls,
    run_questions,
    select_modes,
)
from lightfoot_pipeline.evaluation.modes import K_VALUES, LIGHTFOOT, Mode, available_modes, standard_modes
from lightfoot_pipeline.evaluation.permission_audit import permission_check
from lightfoot_pipeline.evaluation.runs import EVAL, index_cost, results_frame, write_run
from lightfoot_pipeline.ingest.dataset import (
    DatasetError,
    has_recorded_extractions,
    load_corpus,
    load_questions,
    load_recorded_extractions,
)
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.ingest.passages import text_hash
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.operations.config import IndexConfigError
from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL, Principal
from lightfoot_pipeline.permissions.views import reader_view
from lightfoot_pipeline.retrieval.answer import MAX_TOKENS, AnswerBudget, Answerer, answer_charge
from lightfoot_pipeline.retrieval.deep import DeepQuery, DeepSettings
from lightfoot_pipeline.retrieval.deep import charges as deep_charges
from lightfoot_pipeline.retrieval.rerank import Reranker, RerankerStatus
from lightfoot_pipeline.retrieval.retrieve import RetrievalSettings, Retriever
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.snapshot.export import publish_checked
from lightfoot_pipeline.snapshot.format import Snapshot, SnapshotInfo, load_snapshot
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENTS

Echo = Callable[[str], None]
ProgressFactory = Callable[[str], Callable[[int, int], None] | None]


@dataclass(frozen=True)
class EvalPlan:
    """What each phase of a run evaluates: the modes, the cross-encoder they may use, the cut-offs."""

    modes: tuple[Mode, ...]
    ks: tuple[int, ...]
    reranker: Reranker | None
    reranker_status: RerankerStatus

    def record(self, snapshot: Snapshot) -> dict:
        """The plan as the run's configuration keeps it (``ks``, ``reranker``, ``modes``)."""
        return {"ks": list(self.ks), "reranker": self.reranker_status.as_dict(),
                "modes": {m.name: m.as_dict(snapshot) for m in self.modes}}


def plan_evaluation(modes: Sequence[str] | None = None, ks: Sequence[int] = K_VALUES, *,
                    reranker: Reranker | None = None, reranker_status: RerankerStatus | None = None) -> EvalPlan:
    """The named modes (default: every standard mode this reranker allows) at the given cut-offs."""
    cutoffs = tuple(sorted(set(int(k) for k in ks)))
    if not cutoffs or cutoffs[0] < 1:
        raise HarnessError(f"k values must be positive, got {list(ks)}")
    if reranker is not None:
        status = RerankerStatus("available", reranker.model_id)
    else:
        status = reranker_status or RerankerStatus("disabled", None, "no reranker configured")
    available = available_modes(reranker is not None)
    chosen = select_modes(available, modes) if modes else standard_modes(reranker is not None)
    return EvalPlan(modes=tuple(chosen), ks=cutoffs, reranker=reranker, reranker_status=status)


@dataclass
class AnswerOptions:
    """Whether and how a run answers: the answerer, the budget cap, the modes, a dry run."""

    answerer: Answerer | None  # None: only a dry run can go ahead
    budget_usd: float | None = 1.0
    dry_run: bool = False
    modes: Sequence[str] | None = None  # default: every mode of the run
    deep: DeepSettings | None = None  # the hgmem mode's bounds (default: from the environment)
    traces: bool = False  # keep the text of the hgmem mode's steps in the run directory

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
    live_doc_ids: frozenset[str] = frozenset()  # the documents the snapshot (the principal's view of it) holds
    principal: dict = field(default_factory=dict)  # whom it read as, and how many documents that reads


@dataclass
class EvaluationOutcome:
    config: dict
    results: list[QuestionResult]
    live_doc_ids: frozenset[str] = field(default_factory=frozenset)
    build: dict = field(default_factory=dict)
    estimate: CostEstimate | None = None
    spend: AnswerSpend | None = None
    run_dir: Path | None = None
    dry_run: bool = False


def ensure_dataset_indexed(store: Store, dataset_dir: Path, embedder: Embedder,
                           progress: Callable[[int, int], None] | None = None,
                           settings: IndexSettings | None = None) -> dict:
    """Build the dataset's documents into the store unless it holds them already, with no model call.

    A document counts as held when the store has it with the same title and text. Missing or
    changed ones are ingested with the dataset's recorded extractions (extractions.jsonl); a
    dataset without them is refused, since building it would take model calls. A store built
    with other index settings than ``settings`` (default: the defaults) is refused, even when it
    holds every document: a run answers for the settings it names.
    """
    settings = settings or IndexSettings()
    documents = load_corpus(dataset_dir)
    held: dict[str, str] = {}
    if store.exists():
        built_with = store.manifest().config.get("settings")
        if built_with is not None and built_with != settings.shape_of_index():
            raise IndexConfigError(
                f"{store.uri} was built with index settings {built_with}, not {settings.shape_of_index()}",
                hint="evaluate those settings in a store of their own (another --store)")
        rows = store.read(DOCUMENTS.name, columns=["doc_id", "content_hash"])
        held = dict(zip(rows.get_column("doc_id").to_list(), rows.get_column("content_hash").to_list(), strict=True))
    missing = [d for d in documents if held.get(d.doc_id) != text_hash(f"{d.title}\x00{d.text}")]
    if not missing:
        return {"built": False, "documents": 0, "model_calls": 0}
    if not has_recorded_extractions(dataset_dir):
        raise DatasetError(
            f"{dataset_dir} has no extractions.jsonl and {store.uri} does not hold its {len(missing)} documents; "
            "evaluation builds with no model call, so ingest the dataset first (`lightfoot ingest`)")
    started = time.perf_counter()
    report = operations.ingest(store, missing, ReplayExtractor(load_recorded_extractions(dataset_dir)), embedder,
                               settings, progress=progress)
    return {"built": True, "documents": len(missing), "failed": report.failed, "model_calls": report.model_calls,
            "seconds": round(time.perf_counter() - started, 2)}


def evaluate_store(store: Store, embedder: Embedder, questions, plan: EvalPlan, *,
                   progress: Callable[[], Callable[[int, int], None] | None] | None = None,
                   principal: Principal = OPERATOR_PRINCIPAL,
                   settings: IndexSettings | None = None) -> tuple[PhaseResult, Snapshot]:
    """Snapshot the store's committed state and run every mode of the plan on ``principal``'s view
    of it (the operator's: the whole snapshot); the view is returned beside the phase.

    The store may be a deployment's (``lightfoot eval --store``), which services poll: its state is
    exported as ``lightfoot snapshot`` exports it, published only if the permission check of the
    staged copy passes (at once when every document is public; its fresh builds use ``settings``,
    the store's). The evaluation reads the staged snapshot either way.

    ``progress`` makes the per-question progress callback once the snapshot is loaded (so that
    its rate counts questions only).
    """
    started = time.perf_counter()
    info = publish_checked(store, embedder, [permission_check(lambda: embedder, settings or IndexSettings())]).info
    snapshot = reader_view(load_snapshot(store, info.snapshot_id), principal).snapshot
    results = run_questions(snapshot, embedder, questions, plan.modes, reranker=plan.reranker,
                            reranker_status=plan.reranker_status, ks=plan.ks,
                            progress=progress() if progress else None)
    live = frozenset(snapshot.passages.get_column("doc_id").to_list())
    return PhaseResult(info=info, results=results, seconds=round(time.perf_counter() - started, 3),
                       live_doc_ids=live, principal={**principal.as_dict(), "documents": len(live)}), snapshot


def snapshot_record(info: SnapshotInfo) -> dict:
    return {"snapshot_id": info.snapshot_id, "store_seq": info.store_seq, "fingerprint": info.fingerprint,
            "counts": info.counts, "models": info.models}


def run_evaluation(
    store: Store,
    dataset_dir: Path,
    questions_file: Path,
    embedder: Embedder,
    plan: EvalPlan | None = None,
    *,
    answers: AnswerOptions | None = None,
    run_dir: Path | None = None,
    overwrite: bool = False,
    echo: Echo = print,
    progress_factory: ProgressFactory = lambda label: None,
    principal: Principal = OPERATOR_PRINCIPAL,
    settings: IndexSettings | None = None,
) -> EvaluationOutcome:
    """Every question of the file through every mode of the plan (default: the standard modes), on
    ``principal``'s view of the snapshot (default: the operator's, everything), over a store built
    with the index settings ``settings`` (default: the defaults)."""
    plan = plan or plan_evaluation()
    deep_modes = [m.name for m in plan.modes if m.deep]
    if deep_modes and (answers is None or (answers.modes and not set(deep_modes) <= set(answers.modes))):
        raise HarnessError(f"mode {', '.join(deep_modes)} calls the model at every step: run it with --answer "
                           "(or --dry-run to price it), and with it among the --answer-modes")
    questions = load_questions(questions_file)
    build = ensure_dataset_indexed(store, dataset_dir, embedder, progress=progress_factory("building the store"),
                                   settings=settings)
    if build["built"]:
        echo(f"built {build['documents']} documents into {store.uri} in {build['seconds']}s "
             f"with {build['model_calls']} model calls")
    phase, snapshot = evaluate_store(store, embedder, questions, plan, progress=lambda: progress_factory("questions"),
                                     principal=principal, settings=settings)
    results = phase.results
    scored = len({r.qid for r in results})
    config = {
        "kind": EVAL,
        "dataset": str(dataset_dir),
        "questions": str(questions_file),
        "n_questions": scored,
        "questions_without_gold": len(questions) - scored,
        "store": store.uri,
        "embedder": embedder.model_id,
        "index_settings": store.manifest().config.get("settings"),
        "principal": phase.principal,
        **plan.record(snapshot),
        "snapshots": {EVAL: snapshot_record(phase.info)},
        "index_cost": index_cost(store, build),
        "eval_seconds": phase.seconds,
        "answers": None,
    }
    outcome = EvaluationOutcome(config=config, results=results, live_doc_ids=phase.live_doc_ids, build=build)
    extra_files: dict[str, dict] = {}
    if answers is not None:
        answered = [r for r in results if not answers.modes or r.mode in answers.modes]
        if answers.modes:
            missing = sorted(set(answers.modes) - {m.name for m in plan.modes})
            if missing:
                raise HarnessError(f"cannot answer for modes {missing}: they are not in this run")
        model, prices = _pricing(answers)
        one_step = [r for r in answered if r.mode not in deep_modes]
        deep = [r for r in answered if r.mode in deep_modes]
        deep_settings = answers.deep or DeepSettings.from_env()
        deep_retriever = Retriever(snapshot, embedder, settings=RetrievalSettings()) if deep else None
        outcome.estimate = estimate_answer_cost(one_step, model, prices,
                                                answers.answerer.max_tokens if answers.answerer else MAX_TOKENS)
        if deep:
            outcome.estimate = add_estimates(outcome.estimate, estimate_deep_cost(
                deep, deep_retriever, deep_settings, model, prices))
        echo(("dry run: " if answers.dry_run else "answering: ") + outcome.estimate.line()
             + (f"; budget ${answers.budget_usd:g}" if answers.budget_usd is not None else "; no budget cap"))
        if answers.dry_run:
            outcome.dry_run = True
            return outcome
        if answers.answerer is None:
            raise HarnessError("answers need a language-model endpoint; set OPENAI_BASE_URL (or use --dry-run)")
        if answers.budget_usd is not None and outcome.estimate.cost_usd > answers.budget_usd:
            echo(f"the estimate passes the budget: the run stops answering at ${answers.budget_usd:g}")
        budget = AnswerBudget(answers.budget_usd)
        outcome.spend = answer_rows(one_step, answers.answerer, budget_usd=answers.budget_usd, budget=budget,
                                    progress=progress_factory("answers"))
        try:
            if deep:  # an endpoint that cannot serve stops the run here, with what was spent charged
                engine = DeepQuery(deep_retriever, answers.answerer.client, deep_settings, budget, rerank=False)
                outcome.spend = add_spends(outcome.spend, deep_rows(
                    deep, engine, plan.ks, DEPTH, budget_usd=answers.budget_usd,
                    progress=progress_factory("deep questions")))
        finally:
            ledger_run_id = charge_answers(store, answered, answers.answerer)
        config["answers"] = {**answers.describe(), "estimate": outcome.estimate.as_dict(),
                             "spend": outcome.spend.as_dict(), "ledger_run_id": ledger_run_id}
        if deep:
            config["answers"]["deep"] = {**asdict(deep_settings), "traces": answers.traces, "file": DEEP_FILE}
            extra_files[DEEP_FILE] = deep_record(deep, deep_settings, answers.traces)
    if run_dir is not None:
        rows = [{"phase": EVAL, "evidence": None, **r.row()} for r in results]
        outcome.run_dir = write_run(run_dir, config, results_frame(rows, plan.ks), overwrite=overwrite,
                                    extra_files=extra_files)
    return outcome


def _pricing(answers: AnswerOptions) -> tuple[str, tuple[float, float, str]]:
    if answers.answerer is not None:
        settings = answers.answerer.client.settings
        return settings.model, settings.prices()
    from lightfoot_pipeline.models.llm import LLMSettings

    settings = LLMSettings.from_env()
    return settings.model, settings.prices()


def charge_answers(store: Store, answered: Sequence[QuestionResult], answerer: Answerer) -> str:
    """Every answer call goes into the store's cost ledger (purpose ``answer``; ``deep-<stage>`` for
    each call of a deep question), as extraction calls do.

    Returns the ledger's run id (``lightfoot cost --run RUN_ID`` shows the run).
    """
    run_id = ledger.new_run_id("eval")
    prices = answerer.client.settings.prices()
    rows = []
    for r in answered:
        if r.deep is not None:
            rows += deep_charges(r.deep, run_id, prices)
        elif r.answer is not None:
            rows.append(answer_charge(run_id, r.answer, prices))
    ledger.record(store, rows)
    return run_id


def eval_json(outcome: EvaluationOutcome) -> dict:
    """The run as ``lightfoot eval --out`` writes it: ``{"n_questions", "modes", "per_question", "run"}``.

    ``modes`` holds each mode's mean recall@k. Each entry of ``per_question`` names the question,
    its gold documents and those of them the snapshot lacks (``gold_missing``), and for every mode
    its recall@k, its ranked passages (``{"chunk_id", "doc_id"}``, best first) and, when the run
    answered, the answer. ``run`` names the snapshot, the principal it read as (``principal``,
    ``groups``, ``documents``: how many the view holds), embedder, reranker, dataset and build, and
    the ``lightfoot`` mode's retrieval time (``retrieval_ms``: p50, p95).
    """
    per_question: dict[str, dict] = {}
    for r in outcome.results:
        entry = per_question.setdefault(r.qid, {
            "qid": r.qid, "question": r.question, "gold_doc_ids": r.gold_doc_ids,
            "gold_missing": sorted(set(r.gold_doc_ids) - outcome.live_doc_ids), "modes": {}})
        entry["modes"][r.mode] = {**r.recall, "ranked": [{"chunk_id": h.chunk_id, "doc_id": h.doc_id}
                                                         for h in r.hits]}
        if r.answer is not None:
            entry["modes"][r.mode]["answer"] = r.row()["prediction"]
    config = outcome.config
    snap = config["snapshots"][EVAL]
    timings = [r.retrieval_ms for r in outcome.results if r.mode == LIGHTFOOT]
    return {
        "n_questions": config["n_questions"],
        "modes": mean_recalls(outcome.results),
        "per_question": list(per_question.values()),
        "run": {
            "snapshot_id": snap["snapshot_id"], "store_seq": snap["store_seq"], "fingerprint": snap["fingerprint"],
            "principal": config["principal"],
            "embedder": config["embedder"], "reranker": config["reranker"], "dataset": config["dataset"],
            "questions": config["questions"], "questions_without_gold": config["questions_without_gold"],
            "build": outcome.build, "run_dir": str(outcome.run_dir) if outcome.run_dir else None,
            "retrieval_ms": {
                "p50": round(float(np.percentile(timings, 50)), 3) if timings else None,
                "p95": round(float(np.percentile(timings, 95)), 3) if timings else None,
            },
        },
    }
