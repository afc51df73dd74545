"""The ``hgmem`` mode in an evaluation: every question through the deep mode (retrieval/deep).

Its rows start as the first step's retrieval (the question's own global exploration, which needs
no model), so the dry run can price them; :func:`deep_rows` then runs each question's loop under
the run's budget, puts its answer on the row, and ranks the row's passages as the answer's
passages first, then the rest it retrieved, in order; recall@k is computed again from that
ranking. :func:`estimate_deep_cost` prices the questions before any call (estimate.py), and
:func:`deep_record` is what the run directory keeps: ids and numbers, and text only when traces
were asked for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

from lightfoot_pipeline.evaluation.harness import AnswerSpend, CostEstimate, QuestionResult
from lightfoot_pipeline.evaluation.metrics import distinct, recall_at_k
from lightfoot_pipeline.retrieval.answer import Answer
from lightfoot_pipeline.retrieval.deep import DeepQuery, DeepQueryError, DeepSettings
from lightfoot_pipeline.retrieval.deep.estimate import estimate_question
from lightfoot_pipeline.retrieval.deep.evidence import SnapshotIndex
from lightfoot_pipeline.retrieval.retrieve import Retriever

DEEP_FILE = "deep.json"


def estimate_deep_cost(results: Sequence[QuestionResult], retriever: Retriever, settings: DeepSettings,
                       model: str, prices: tuple[float, float, str]) -> CostEstimate:
    """What the deep questions would cost at most within the step cap, before a call is made."""
    price_in, price_out, source = prices
    index = SnapshotIndex(retriever.snapshot)
    estimates = [estimate_question(retriever, settings, r.question, index=index, rerank=False) for r in results]
    tokens_in = sum(e.tokens_in for e in estimates)
    reserved = sum(e.tokens_in_reserved for e in estimates)
    typical = sum(e.tokens_out_typical for e in estimates)
    ceiling = sum(e.tokens_out_max for e in estimates)
    return CostEstimate(
        calls=sum(e.calls for e in estimates), model=model, price_in_per_mtok=price_in,
        price_out_per_mtok=price_out, price_source=source, tokens_in=tokens_in, tokens_out_typical=typical,
        tokens_out_max=ceiling, cost_usd=round((tokens_in * price_in + typical * price_out) / 1e6, 6),
        cost_usd_max=round((reserved * price_in + ceiling * price_out) / 1e6, 6),
    )


def add_estimates(a: CostEstimate, b: CostEstimate) -> CostEstimate:
    """Two estimates of calls to the same model, as one."""
    return CostEstimate(
        calls=a.calls + b.calls, model=a.model, price_in_per_mtok=a.price_in_per_mtok,
        price_out_per_mtok=a.price_out_per_mtok, price_source=a.price_source, tokens_in=a.tokens_in + b.tokens_in,
        tokens_out_typical=a.tokens_out_typical + b.tokens_out_typical,
        tokens_out_max=a.tokens_out_max + b.tokens_out_max, cost_usd=round(a.cost_usd + b.cost_usd, 6),
        cost_usd_max=round(a.cost_usd_max + b.cost_usd_max, 6),
    )


def add_spends(a: AnswerSpend, b: AnswerSpend) -> AnswerSpend:
    return AnswerSpend(
        budget_usd=a.budget_usd, calls=a.calls + b.calls, failed=a.failed + b.failed, skipped=a.skipped + b.skipped,
        tokens_in=a.tokens_in + b.tokens_in, tokens_out=a.tokens_out + b.tokens_out,
        cost_usd=round(a.cost_usd + b.cost_usd, 8), stopped_by_budget=a.stopped_by_budget or b.stopped_by_budget,
        seconds=round(a.seconds + b.seconds, 3),
    )


def deep_rows(results: Sequence[QuestionResult], engine: DeepQuery, ks: Sequence[int], depth: int, *,
              budget_usd: float | None, progress: Callable[[int, int], None] | None = None) -> AnswerSpend:
    """Each question through the deep loop, ``concurrency`` at a time, within the engine's budget.

    A question the budget stops is *skipped*, one stopped otherwise *failed* (its reason on the
    row); an endpoint that cannot serve stops the run (DeepQueryError) once the questions in flight
    are done, and no question after it is asked.
    """
    spend = AnswerSpend(budget_usd=budget_usd)
    index = SnapshotIndex(engine.retriever.snapshot)
    lock = threading.Lock()
    dead = threading.Event()
    started = time.perf_counter()
    done = 0

    def one(result: QuestionResult) -> None:
        nonlocal done
        if dead.is_set():
            return
        try:
            deep = engine.run(result.question)
        except DeepQueryError as err:
            result.deep = err.result  # its calls are charged
            dead.set()
            raise
        tokens_in, tokens_out = deep.tokens
        budget_stop = deep.status == "stopped" and deep.reason.startswith("budget:")
        with lock:
            result.deep = deep
            result.answer = Answer(
                answer=deep.answer, model=engine.model, tokens_in=tokens_in, tokens_out=tokens_out,
                cost_usd=deep.cost_usd, seconds=deep.seconds, parsed=deep.status == "answered",
                error=None if deep.status == "answered" else deep.reason,
                attempts=sum(c.record.attempts for c in deep.calls),
            )
            if deep.status == "answered":
                result.answer_status = "answered"
            elif budget_stop:
                result.answer_status = f"skipped: {deep.reason}"
                spend.skipped += 1
                spend.stopped_by_budget = True
            else:
                result.answer_status = f"failed: {deep.reason}"
                spend.failed += 1
            spend.calls += len(deep.calls)
            spend.tokens_in += tokens_in
            spend.tokens_out += tokens_out
            spend.cost_usd += deep.cost_usd
            ranked = deep.ranked_chunk_ids()[:depth]
            result.hits = [index.passage(index.chunk_rows[c], rank) for rank, c in enumerate(ranked, start=1)]
            result.ranked_chunk_ids = ranked
            result.ranked_doc_ids = distinct([h.doc_id for h in result.hits])
            done += 1
            if progress is not None:
                progress(done, len(results))

    workers = max(1, int(engine.client.settings.concurrency))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, results))
    for mode in dict.fromkeys(r.mode for r in results):
        mine = [r for r in results if r.mode == mode]
        scores = recall_at_k({r.qid: r.ranked_doc_ids for r in mine}, {r.qid: r.gold_doc_ids for r in mine}, ks)
        for i, r in enumerate(mine):
            r.recall = {metric: float(values[i]) for metric, values in scores.items()}
    spend.cost_usd = round(spend.cost_usd, 8)
    spend.seconds = round(time.perf_counter() - started, 3)
    return spend


def deep_record(results: Sequence[QuestionResult], settings: DeepSettings, traces: bool) -> dict:
    """The deep questions as the run directory keeps them (deep.json): ids and numbers; with
    ``traces``, the subqueries, memory descriptions and answers too (which erasure does not reach)."""
    return {
        "traces": traces,
        "settings": asdict(settings),
        "questions": {f"{r.mode}/{r.qid}": r.deep.as_dict(text=traces) for r in results if r.deep is not None},
        "note": None if traces else "ids and numbers only; run with --traces to keep the text of each step",
    }
