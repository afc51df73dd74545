"""The evaluation harness: every question through every retrieval mode on one snapshot.

The modes (modes.py) run side by side in one process, on the same snapshot and question vectors,
so every comparison is paired question by question. Each (mode, question) gives one row: the
ranked documents and passages, recall@k (metrics.py) and the retrieval time.
:func:`answer_rows` then sends the top passages (and, for the Lightfoot modes, the top facts) to
the answer model with a budget cap, and scores exact match and token F1;
:func:`estimate_answer_cost` says what that would cost before a call is made.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.evaluation.metrics import distinct, exact_match, recall_at_k, token_f1
from lightfoot_pipeline.evaluation.modes import K_VALUES, Mode
from lightfoot_pipeline.ingest.dataset import Question
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.models.llm import prompt_token_bound
from lightfoot_pipeline.retrieval.answer import (
    ANSWER_SCHEMA,
    MAX_TOKENS,
    SYSTEM_PROMPT,
    Answer,
    AnswerBudget,
    Answerer,
    render_prompt,
)
from lightfoot_pipeline.retrieval.rerank import Reranker, RerankerStatus
from lightfoot_pipeline.retrieval.retrieve import FactHit, PassageHit, Retriever, query_thread_limits, top_indices
from lightfoot_pipeline.snapshot.format import Snapshot

DEPTH = 30  # ranked passages kept per (mode, question)
ANSWER_PASSAGES = 10
# Tokens an answer typically takes ({"answer": "..."} with a short span); the ceiling is max_tokens.
TYPICAL_ANSWER_TOKENS = 16
# Characters per token assumed by the estimate (the budget holds a prompt at its byte bound, llm.prompt_token_bound).
CHARS_PER_TOKEN = 4.0


class HarnessError(LightfootError, RuntimeError):
    """The evaluation cannot run as asked (the message says why)."""


def select_modes(modes: Sequence[Mode], names: Sequence[str] | None) -> list[Mode]:
    """The named modes, in the order named (all of them when none is named)."""
    if not names:
        return list(modes)
    known = {m.name: m for m in modes}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise HarnessError(f"unknown or unavailable modes {unknown}; this run has {sorted(known)}")
    return [known[n] for n in names]


@dataclass
class QuestionResult:
    """One mode's retrieval for one question (one row of a run's table)."""

    mode: str
    qid: str
    question: str
    gold_doc_ids: list[str]
    gold_answers: list[str]
    ranked_doc_ids: list[str]  # distinct documents, best first
    ranked_chunk_ids: list[str]  # passages, best first (up to DEPTH)
    recall: dict[str, float | None]
    retrieval_ms: float
    order: str
    hits: list[PassageHit] = field(default_factory=list, repr=False)
    facts: list[FactHit] = field(default_factory=list, repr=False)
    answer: Answer | None = None
    answer_status: str = "not asked"  # "answered", "failed: …", "skipped: …", "not asked"
    deep: object | None = field(default=None, repr=False)  # the deep mode's DeepResult (deep_eval.py)

    def row(self) -> dict:
        a = self.answer
        golds = self.gold_answers
        prediction = a.answer if a is not None else None
        answered = a is not None and a.error is None and prediction is not None
        return {
            "mode": self.mode,
            "qid": self.qid,
            "question": self.question,
            "gold_doc_ids": list(self.gold_doc_ids),
            "gold_answers": list(golds),
            "ranked_doc_ids": list(self.ranked_doc_ids),
            "ranked_chunk_ids": list(self.ranked_chunk_ids),
            **{k: v for k, v in self.recall.items()},
            "retrieval_ms": self.retrieval_ms,
            "order": self.order,
            "answer_status": self.answer_status,
            "prediction": prediction,
            "em": exact_match(prediction, golds) if answered and golds else None,
            "f1": token_f1(prediction, golds) if answered and golds else None,
            "answer_tokens_in": a.tokens_in if a is not None else None,
            "answer_tokens_out": a.tokens_out if a is not None else None,
            "answer_cost_usd": a.cost_usd if a is not None else None,
            "answer_error": a.error if a is not None else None,
        }


def gold_answers(question: Question) -> list[str]:
    return [a for a in (question.answer, *question.answer_aliases) if a and a.strip()]


def make_retrievers(snapshot: Snapshot, embedder: Embedder, modes: Sequence[Mode], reranker: Reranker | None,
                    reranker_status: RerankerStatus | None) -> dict[str, Retriever]:
    retrievers = {}
    for mode in modes:
        if not mode.graph:
            continue
        if mode.rerank and reranker is None:
            raise HarnessError(f"mode {mode.name} needs a cross-encoder, and none is available")
        retrievers[mode.name] = Retriever(snapshot, embedder, reranker if mode.rerank else None,
                                          reranker_status, settings=mode.settings_for(snapshot))
    return retrievers


def run_questions(
    snapshot: Snapshot,
    embedder: Embedder,
    questions: Sequence[Question],
    modes: Sequence[Mode],
    *,
    reranker: Reranker | None = None,
    reranker_status: RerankerStatus | None = None,
    ks: Sequence[int] = K_VALUES,
    progress: Callable[[int, int], None] | None = None,
) -> list[QuestionResult]:
    """Retrieval of every mode for every question that names gold documents; recall@k (metrics.py).

    The questions run as the query service runs them, with BLAS and torch on one thread each
    (``query_thread_limits``), so their latencies compare with the service's; the settings are
    restored when the loop ends.
    """
    with query_thread_limits():
        return _run_questions(snapshot, embedder, questions, modes, reranker=reranker,
                              reranker_status=reranker_status, ks=ks, progress=progress)


def _run_questions(
    snapshot: Snapshot,
    embedder: Embedder,
    questions: Sequence[Question],
    modes: Sequence[Mode],
    *,
    reranker: Reranker | None,
    reranker_status: RerankerStatus | None,
    ks: Sequence[int],
    progress: Callable[[int, int], None] | None,
) -> list[QuestionResult]:
    ks = sorted(set(int(k) for k in ks))
    if not ks or ks[0] < 1:
        raise HarnessError(f"k values must be positive, got {ks}")
    if not modes:
        raise HarnessError("no modes to evaluate")
    scored = [q for q in questions if q.gold_doc_ids]
    if not scored:
        raise HarnessError("none of the questions names gold documents (gold_doc_ids): nothing to score")
    qids = [q.qid for q in scored]
    if len(set(qids)) != len(qids):
        raise HarnessError("question ids (qid) repeat; runs are compared question by question, so they must be unique")
    retrievers = make_retrievers(snapshot, embedder, modes, reranker, reranker_status)
    any_retriever = next(iter(retrievers.values()), None) or Retriever(snapshot, embedder)
    depth = max(DEPTH, ks[-1])
    results: list[QuestionResult] = []
    for done, question in enumerate(scored, start=1):
        clock = time.perf_counter()
        vector = any_retriever.question_vector(question.question)
        embed_ms = (time.perf_counter() - clock) * 1000.0
        for mode in modes:
            clock = time.perf_counter()
            facts: list[FactHit] = []
            if mode.graph:
                retrieval = retrievers[mode.name].retrieve(question.question, rerank=mode.rerank, vector=vector)
                hits, order = retrieval.passages[:depth], retrieval.order
                if mode.answer_facts:
                    facts = retrievers[mode.name].similar_facts(vector, mode.answer_facts)
            else:
                dense = any_retriever.dense_scores(vector)
                hits = [_dense_hit(snapshot, int(i), rank, float(dense[i]))
                        for rank, i in enumerate(top_indices(dense, depth), start=1)]
                order = "dense"
            elapsed = embed_ms + (time.perf_counter() - clock) * 1000.0
            results.append(QuestionResult(
                mode=mode.name, qid=question.qid, question=question.question,
                gold_doc_ids=list(question.gold_doc_ids), gold_answers=gold_answers(question),
                ranked_doc_ids=distinct([h.doc_id for h in hits]), ranked_chunk_ids=[h.chunk_id for h in hits],
                recall={}, retrieval_ms=round(elapsed, 3), order=order, hits=hits, facts=facts,
            ))
        if progress is not None:
            progress(done, len(scored))
    gold = {q.qid: list(q.gold_doc_ids) for q in scored}
    for mode in modes:
        mine = [r for r in results if r.mode == mode.name]
        scores = recall_at_k({r.qid: r.ranked_doc_ids for r in mine}, gold, ks)
        for i, r in enumerate(mine):
            r.recall = {metric: float(values[i]) for metric, values in scores.items()}
    return results


def _dense_hit(snapshot: Snapshot, index: int, rank: int, score: float) -> PassageHit:
    row = snapshot.passages.row(index, named=True)
    return PassageHit(rank=rank, chunk_id=row["chunk_id"], doc_id=row["doc_id"], title=row["title"] or "",
                      text=row["text"], pagerank_rank=rank, pagerank_score=score, dense_score=score)


# -- answers ------------------------------------------------------------------------------------


def answer_messages(result: QuestionResult, n_passages: int = ANSWER_PASSAGES) -> list[dict]:
    """The messages the answerer sends for one (mode, question) (answer.py's prompt)."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": render_prompt(result.question, result.facts, result.hits[:n_passages])},
    ]


def _prompt_chars(result: QuestionResult) -> int:
    return sum(len(m["content"]) for m in answer_messages(result))


@dataclass(frozen=True)
class CostEstimate:
    """What an answer run would cost, before it starts."""

    calls: int
    model: str
    price_in_per_mtok: float
    price_out_per_mtok: float
    price_source: str
    tokens_in: int  # prompt characters / 4
    tokens_out_typical: int
    tokens_out_max: int
    cost_usd: float  # tokens_in and the typical answer length at the prices
    cost_usd_max: float  # tokens_in at 3 characters a token and max_tokens answers

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        priced = (f"${self.price_in_per_mtok:g}/${self.price_out_per_mtok:g} per million tokens in/out "
                  f"({self.price_source})" if self.price_source != "unpriced"
                  else "no known price (set LIGHTFOOT_LLM_PRICE_IN/_OUT)")
        return (f"{self.calls} answer calls to {self.model}: about {self.tokens_in:,} tokens in and "
                f"{self.tokens_out_typical:,} out (at most {self.tokens_out_max:,}); {priced}: "
                f"about ${self.cost_usd:.4f}, at most ${self.cost_usd_max:.4f}")


def estimate_answer_cost(results: Sequence[QuestionResult], model: str, prices: tuple[float, float, str],
                         max_tokens: int = MAX_TOKENS) -> CostEstimate:
    price_in, price_out, source = prices
    chars = [_prompt_chars(r) for r in results]
    tokens_in = sum(math.ceil(c / CHARS_PER_TOKEN) for c in chars)
    reserve_in = sum(prompt_token_bound(answer_messages(r), ANSWER_SCHEMA) for r in results)
    calls = len(results)
    typical = calls * TYPICAL_ANSWER_TOKENS
    ceiling = calls * max_tokens
    return CostEstimate(
        calls=calls, model=model, price_in_per_mtok=price_in, price_out_per_mtok=price_out, price_source=source,
        tokens_in=tokens_in, tokens_out_typical=typical, tokens_out_max=ceiling,
        cost_usd=round((tokens_in * price_in + typical * price_out) / 1e6, 6),
        cost_usd_max=round((reserve_in * price_in + ceiling * price_out) / 1e6, 6),
    )


@dataclass
class AnswerSpend:
    """What an answer run made and paid, and whether the budget stopped it."""

    budget_usd: float | None
    calls: int = 0
    failed: int = 0
    skipped: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    stopped_by_budget: bool = False
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def answer_rows(
    results: Sequence[QuestionResult],
    answerer: Answerer,
    *,
    budget_usd: float | None,
    progress: Callable[[int, int], None] | None = None,
    budget: AnswerBudget | None = None,
) -> AnswerSpend:
    """Answer each (mode, question) through the model, never letting the spend pass the budget.

    Before a call, its worst case (the prompt at its byte bound on tokens and a full ``max_tokens``
    answer) is reserved against the budget (answer.AnswerBudget); a call that does not fit is
    skipped, with the reason recorded on its row, and so is every call after it. Calls run
    ``concurrency`` at a time (the client's setting). ``budget``: one shared with other calls of
    the run (default: a new one of ``budget_usd``).
    """
    if budget_usd is not None and budget_usd < 0:
        raise HarnessError(f"the budget must not be negative, got {budget_usd}")
    budget = budget or AnswerBudget(budget_usd)
    spend = AnswerSpend(budget_usd=budget_usd)
    lock = threading.Lock()
    started = time.perf_counter()
    done = 0

    def one(result: QuestionResult) -> None:
        nonlocal done
        messages = answerer.messages(result.question, result.facts, result.hits)
        hold = answerer.worst_case_usd(messages)
        if not budget.reserve(hold):  # once the cap stops one call, the rest stop too
            with lock:
                spend.skipped += 1
                spend.stopped_by_budget = True
                result.answer_status = f"skipped: the budget cap of ${budget_usd:g} was reached"
                done += 1
                if progress is not None:
                    progress(done, len(results))
            return
        answer = None
        try:
            answer = answerer.ask(messages)
        finally:
            budget.settle(hold, answer.cost_usd if answer is not None else 0.0,
                          answer.tokens_in if answer is not None else 0, answer.tokens_out if answer is not None else 0)
        with lock:
            result.answer = answer
            spend.calls += 1
            spend.tokens_in += answer.tokens_in
            spend.tokens_out += answer.tokens_out
            spend.cost_usd += answer.cost_usd
            if answer.error:
                spend.failed += 1
                result.answer_status = f"failed: {answer.error}"
            else:
                result.answer_status = "answered"
            done += 1
            if progress is not None:
                progress(done, len(results))

    workers = max(1, int(answerer.client.settings.concurrency))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, results))
    spend.cost_usd = round(spend.cost_usd, 8)
    spend.seconds = round(time.perf_counter() - started, 3)
    return spend


def mean_recalls(results: Sequence[QuestionResult]) -> dict[str, dict[str, float]]:
    """Mean recall@k by mode (in the order the modes appear)."""
    out: dict[str, dict[str, float]] = {}
    for mode in dict.fromkeys(r.mode for r in results):
        mine = [r for r in results if r.mode == mode]
        metrics = list(mine[0].recall)
        out[mode] = {m: round(float(np.mean([r.recall[m] for r in mine])), 4) for m in metrics}
    return out
