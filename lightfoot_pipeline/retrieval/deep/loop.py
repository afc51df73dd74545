"""The deep query mode's step loop: HGMem's working memory over a Lightfoot serving snapshot.

For a question (paper §3.2–3.6), with a step cap T (``max_steps``, default 3):

1. Step 1 explores globally with the question itself (no model call before it).
2. Each step's evidence goes to the model with the memory; the model returns memory operations
   (insert, update, merge; memory.py), which are checked and applied.
3. Unless the step was the T-th, the model checks whether the memory suffices. If it does, or
   at the cap, the loop ends; otherwise its subqueries (local investigations of memory points,
   global explorations; evidence.py) are the next step's retrieval.
4. The answer is written from the memory points' descriptions and facts and the passages of
   their entities (at most ``passages``, the one-step mode's 10 by default), and names the points
   it rests on.

A question makes at most 2T model calls, each sending its stage's ``max_tokens``. Each call
reserves its worst case (the prompt at its byte bound on tokens and a full reply) against the
question's budget and the run's
(:class:`~lightfoot_pipeline.retrieval.answer.AnswerBudget`) before it is made; a call that does not
fit is not made, and the question ends there; a call settled at what the endpoint billed that
brings a budget to its cap ends it too. A model without a known price is refused before any call
(:class:`~lightfoot_pipeline.models.llm.UnpricedModelError`) unless the operator allowed it. So does a malformed or refused reply, or a call
that fails: the result keeps the memory so far and says why, and the run goes on. An endpoint
that cannot serve at all (unreachable, refusing the key, without the model) raises
:class:`DeepQueryError` at once, naming where it looked. :func:`charges` gives every call's row
for the cost ledger.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.models.llm import LLMClient, LLMError
from lightfoot_pipeline.retrieval.answer import Answer, AnswerBudget, SharedBudget, answer_charge
from lightfoot_pipeline.retrieval.deep.evidence import Evidence, SnapshotIndex, StepEvidence, explore, investigate
from lightfoot_pipeline.retrieval.deep.memory import Memory, Operation
from lightfoot_pipeline.retrieval.deep.parse import (
    Check,
    RawOperation,
    ReplyError,
    SubQuery,
    parse_check,
    parse_final,
    parse_operations,
)
from lightfoot_pipeline.retrieval.deep.prompts import answer_messages, check_messages, memory_messages
from lightfoot_pipeline.retrieval.deep.schemas import SCHEMAS
from lightfoot_pipeline.retrieval.retrieve import FactHit, PassageHit, Retriever, top_indices
from lightfoot_pipeline.settings import DEEP_VARIABLES, SettingsError, deep_environment
from lightfoot_pipeline.store import ledger

# Failures of the endpoint itself, not of one call: every later call would fail the same way.
FATAL_KINDS = frozenset({"unreachable", "auth", "not_found", "config", "bad_request"})


class DeepQueryError(LightfootError, RuntimeError):
    """The deep mode cannot run: its model endpoint cannot serve (the message says where it looked).

    ``result`` is the question as far as it went, with the calls already made (to be charged)."""

    result: DeepResult | None = None


@dataclass(frozen=True)
class DeepSettings:
    """The deep mode's bounds; ``max_steps``, ``passages`` and ``question_budget_usd`` come from
    the environment (settings.DEEP_VARIABLES)."""

    max_steps: int = 3
    passages: int = 10  # passages per step's evidence, and in the answer's prompt
    facts_per_query: int = 5
    entities_per_query: int = 10
    max_subqueries: int = 3
    question_budget_usd: float | None = 0.05
    max_tokens: tuple[tuple[str, int], ...] = (("memory", 800), ("check", 300), ("answer", 200))

    def __post_init__(self) -> None:
        if not 1 <= self.max_steps <= 10:
            raise ValueError(f"max_steps must be from 1 to 10, got {self.max_steps}")
        if not 1 <= self.passages <= 30:
            raise ValueError(f"passages must be from 1 to 30, got {self.passages}")
        for name in ("facts_per_query", "entities_per_query", "max_subqueries"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        budget = self.question_budget_usd
        if budget is not None and not (math.isfinite(budget) and budget >= 0):
            raise ValueError(f"question_budget_usd must be a non-negative number of USD, got {budget}")

    @classmethod
    def from_env(cls, environ: dict | None = None, **overrides) -> DeepSettings:
        """Settings from the environment; keyword arguments that are not None win over it."""
        values = {**deep_environment(environ), **{k: v for k, v in overrides.items() if v is not None}}
        try:
            return cls(**values)
        except ValueError as err:
            names = ", ".join(name for name, _ in DEEP_VARIABLES.values())
            raise SettingsError(f"deep mode: {err}", hint=f"see {names} in the README's settings table") from None

    def tokens(self, stage: str) -> int:
        return dict(self.max_tokens)[stage]


@dataclass
class Step:
    number: int
    evidence: list[Evidence] = field(default_factory=list)
    operations: list[Operation] = field(default_factory=list)
    check: Check | None = None
    notes: list[str] = field(default_factory=list)  # what was repaired to read the replies

    def as_dict(self, text: bool = True) -> dict:
        check = None
        if self.check is not None:
            check = {"sufficient": self.check.sufficient, "notes": list(self.check.notes),
                     "subqueries": [{"kind": q.kind, "point": q.point, **({"query": q.query} if text else {})}
                                    for q in self.check.subqueries]}
            if text:
                check["reason"] = self.check.reason
        return {"step": self.number, "subqueries": [e.as_dict(text) for e in self.evidence],
                "operations": [o.as_dict(text) for o in self.operations], "check": check, "notes": list(self.notes)}


@dataclass
class Call:
    """One model call of a question: its stage and step, and its tokens, cost and error (an Answer)."""

    stage: str  # "memory", "check" or "answer"
    step: int
    record: Answer


@dataclass
class DeepResult:
    question: str
    snapshot_id: str
    status: str = "running"  # then "answered" or "stopped"
    reason: str = ""  # why it stopped, or that the step cap ended it
    answer: str | None = None
    used_points: list[str] = field(default_factory=list)
    memory: Memory = field(default_factory=Memory)
    steps: list[Step] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    passages: list[PassageHit] = field(default_factory=list)  # the answer's passages
    facts: dict[str, FactHit] = field(default_factory=dict)  # every fact retrieved, by id
    doc_ids: dict[str, str] = field(default_factory=dict)  # every chunk retrieved: its document
    retrieved: list[str] = field(default_factory=list)  # every chunk retrieved, in order
    cap_reached: bool = False
    seconds: float = 0.0

    @property
    def cost_usd(self) -> float:
        return round(sum(c.record.cost_usd for c in self.calls), 8)

    @property
    def tokens(self) -> tuple[int, int]:
        return sum(c.record.tokens_in for c in self.calls), sum(c.record.tokens_out for c in self.calls)

    def ranked_chunk_ids(self) -> list[str]:
        """The answer's passages, then every other passage retrieved, in the order retrieved."""
        return list(dict.fromkeys([p.chunk_id for p in self.passages] + self.retrieved))

    def provenance(self, text: bool = True) -> list[dict]:
        """The points the answer used, each with its chunks (and documents) and facts."""
        out = []
        for point_id in self.used_points:
            point = self.memory.points[point_id]
            entry = {"point": point_id,
                     "chunks": [{"chunk_id": c, "doc_id": self.doc_ids.get(c)} for c in point.chunk_ids],
                     "facts": [{"fact_id": f, **({"text": self.facts[f].text} if text and f in self.facts else {})}
                               for f in point.fact_ids],
                     "entities": list(point.entity_ids)}
            if text:
                entry["description"] = point.description
            out.append(entry)
        return out

    def as_dict(self, text: bool = True) -> dict:
        """The result; with ``text=False`` ids and numbers only (no question, description or query)."""
        tokens_in, tokens_out = self.tokens
        out = {
            "snapshot_id": self.snapshot_id, "status": self.status, "reason": self.reason,
            "cap_reached": self.cap_reached, "used_points": list(self.used_points),
            "points": self.provenance(text), "memory": self.memory.as_list(text),
            "steps": [s.as_dict(text) for s in self.steps],
            "passages": [{"chunk_id": p.chunk_id, "doc_id": p.doc_id} for p in self.passages],
            "calls": [{"stage": c.stage, "step": c.step, "tokens_in": c.record.tokens_in,
                       "tokens_out": c.record.tokens_out, "cost_usd": c.record.cost_usd,
                       "seconds": c.record.seconds, "error": c.record.error} for c in self.calls],
            "tokens_in": tokens_in, "tokens_out": tokens_out, "cost_usd": self.cost_usd, "seconds": self.seconds,
        }
        if text:
            out.update(question=self.question, answer=self.answer)
        return out


class QuestionStopped(LightfootError, RuntimeError):
    """Ends a deep question early (a budget, a failed or unusable call); the message is the reason
    kept on the result, and the run goes on with the next question."""


def _unusable(result: DeepResult, reason: str) -> QuestionStopped:
    """The stop for a reply that could not be read; its call is marked unusable in the ledger."""
    if result.calls:
        result.calls[-1].record.error = reason
    return QuestionStopped(reason)


class DeepQuery:
    """Runs deep questions on one snapshot. ``budget`` is the run's (shared by threads; None: no cap)."""

    def __init__(self, retriever: Retriever, client: LLMClient, settings: DeepSettings | None = None,
                 budget: AnswerBudget | SharedBudget | None = None, rerank: bool = True) -> None:
        client.settings.require_price("deep-mode calls")
        self.retriever = retriever
        self.client = client
        self.settings = settings or DeepSettings()
        self.budget = budget or AnswerBudget(None)
        self.rerank = rerank
        self.index = SnapshotIndex(retriever.snapshot)

    @property
    def model(self) -> str:
        return self.client.settings.model

    def run(self, question: str) -> DeepResult:
        """One question through the loop; never raises for a bad reply, only for a dead endpoint."""
        s = self.settings
        started = time.perf_counter()
        vector = self.retriever.question_vector(question)
        result = DeepResult(question=question, snapshot_id=self.retriever.snapshot.snapshot_id)
        question_budget = AnswerBudget(s.question_budget_usd)
        subqueries = [SubQuery("global", question)]
        try:
            for number in range(1, s.max_steps + 1):
                step = Step(number)
                result.steps.append(step)
                per_query = max(1, s.passages // len(subqueries))
                step.evidence = [self._retrieve(q, per_query, result.memory) for q in subqueries]
                evidence = StepEvidence(step.evidence)
                result.facts.update(evidence.facts)
                for passage in evidence.passages.values():
                    result.doc_ids[passage.chunk_id] = passage.doc_id
                    result.retrieved.append(passage.chunk_id)
                reply = self._call(result, "memory", number, memory_messages(question, result.memory, evidence,
                                                                              self.index), question_budget)
                try:
                    operations, notes = parse_operations(reply)
                except ReplyError as err:
                    raise _unusable(result, f"step {number}: unusable memory reply: {err}") from None
                step.notes += notes
                for raw in operations:
                    step.operations.append(result.memory.apply(self._resolve(raw, evidence)))
                if number == s.max_steps:
                    result.cap_reached = True
                    break
                reply = self._call(result, "check", number,
                                   check_messages(question, result.memory, self.index, s.max_subqueries),
                                   question_budget)
                try:
                    step.check = parse_check(reply, set(result.memory.points), s.max_subqueries)
                except ReplyError as err:
                    raise _unusable(result, f"step {number}: unusable check reply: {err}") from None
                if step.check.sufficient:
                    break
                subqueries = step.check.subqueries
            self._answer(result, vector, question_budget)
        except QuestionStopped as stop:
            result.status, result.reason = "stopped", str(stop)
        except DeepQueryError as err:
            result.status, result.reason = "stopped", str(err)
            err.result = result
            raise
        result.seconds = round(time.perf_counter() - started, 3)
        return result

    # -- the parts ---------------------------------------------------------------------------------

    def _retrieve(self, subquery: SubQuery, n_passages: int, memory: Memory) -> Evidence:
        s = self.settings
        if subquery.kind == "local" and subquery.point in memory:
            point = memory.points[subquery.point]
            # a point resting on passages alone is anchored at the entities they mention
            entities = point.entity_ids or [self.index.entity_ids[n] for n in self.index.mentioned(
                [self.index.chunk_rows[c] for c in point.chunk_ids if c in self.index.chunk_rows])]
            return investigate(self.retriever, self.index, subquery.query, subquery.point, entities, n_passages,
                               s.facts_per_query, s.entities_per_query, self.rerank)
        return explore(self.retriever, self.index, subquery.query, n_passages, s.facts_per_query,
                       s.entities_per_query, self.rerank)

    def _resolve(self, raw: RawOperation, evidence: StepEvidence) -> Operation:
        """The operation with its references turned into ids (a fact brings the entities it joins)."""
        entities, facts, chunks, unknown = evidence.resolve(raw.refs)
        snap = self.retriever.snapshot
        for fact_id in facts:
            row = evidence.facts[fact_id].row
            for node in (int(snap.fact_subjects[row]), int(snap.fact_objects[row])):
                entity_id = self.index.entity_ids[node]
                if entity_id not in entities:
                    entities.append(entity_id)
        operation = Operation(op=raw.op, description=raw.description, point=raw.point, points=list(raw.points),
                              entity_ids=entities, fact_ids=facts, chunk_ids=chunks)
        if unknown:
            operation.notes.append(f"references this step did not give were dropped: {unknown[:10]}")
        return operation

    def _answer(self, result: DeepResult, vector: np.ndarray, question_budget: AnswerBudget) -> None:
        result.passages = self._answer_passages(result, vector)
        messages = answer_messages(result.question, result.memory, result.facts, result.passages, self.index)
        reply = self._call(result, "answer", len(result.steps), messages, question_budget)
        try:
            answer, points, notes = parse_final(reply, set(result.memory.points))
        except ReplyError as err:
            raise _unusable(result, f"unusable answer reply: {err}") from None
        if not points:
            points = list(result.memory.points)
            if points:
                notes.append("the answer named no memory point: every point is listed")
        result.answer, result.used_points, result.status = answer, points, "answered"
        if result.cap_reached:
            result.reason = f"the step cap of {self.settings.max_steps} ended the loop"
        if notes and result.steps:
            result.steps[-1].notes += [f"answer: {n}" for n in notes]

    def _answer_passages(self, result: DeepResult, vector: np.ndarray) -> list[PassageHit]:
        """The passages the points rest on, then those that mention their entities, by similarity."""
        snap, index = self.retriever.snapshot, self.index
        rows = [index.chunk_rows[c] for c in result.memory.chunk_ids() if c in index.chunk_rows]
        nodes = np.asarray([index.entity_nodes[e] for e in result.memory.entity_ids() if e in index.entity_nodes],
                           dtype=np.int64)
        if nodes.size:
            around = np.unique(snap.adjacency[nodes].indices)  # (N,) neighbours of the memory's entities
            mentioning = around[around >= snap.n_entities] - snap.n_entities
            if mentioning.size:
                dense = self.retriever.dense_scores(vector)[mentioning]  # (#mentioning,)
                rows += [int(mentioning[i]) for i in top_indices(dense, self.settings.passages)]
        rows = list(dict.fromkeys(rows))[: self.settings.passages]
        hits = [index.passage(row, rank) for rank, row in enumerate(rows, start=1)]
        for hit in hits:
            result.doc_ids.setdefault(hit.chunk_id, hit.doc_id)
        return hits

    def worst_case_usd(self, messages: list[dict], stage: str) -> float:
        """The most the stage's call can cost: the prompt's byte bound and a full ``max_tokens`` reply."""
        return self.client.settings.worst_case_usd(messages, self.settings.tokens(stage), SCHEMAS[stage])

    def _call(self, result: DeepResult, stage: str, step: int, messages: list[dict],
              question_budget: AnswerBudget) -> str:
        """The reply's text, within both budgets; raises QuestionStopped (or DeepQueryError for a dead endpoint)."""
        hold = self.worst_case_usd(messages, stage)
        if not question_budget.reserve(hold):
            raise QuestionStopped(f"budget: the {stage} call of step {step} could cost ${hold:.6f}, more than is left of "
                        f"the question's ${question_budget.limit_usd:g} (${question_budget.spent_usd:.6f} spent)")
        if not self.budget.reserve(hold):
            question_budget.settle(hold, 0.0)
            raise QuestionStopped(f"budget: the run's budget of ${self.budget.limit_usd:g} cannot hold the {stage} call "
                        f"of step {step}")
        record: Answer | None = None
        try:
            try:
                completion = self.client.complete(messages, json_schema=SCHEMAS[stage],
                                                  max_tokens=self.settings.tokens(stage))
            except LLMError as err:
                record = Answer(answer=None, model=self.model, error=str(err), error_kind=err.kind,
                                attempts=max(err.attempts, 1))
                result.calls.append(Call(stage, step, record))
                if err.kind in FATAL_KINDS:
                    raise DeepQueryError(f"deep query: the model endpoint cannot serve ({err})",
                                         hint=err.hint) from None
                raise QuestionStopped(f"the {stage} call of step {step} failed: {err}") from None
            price_in, price_out, _ = self.client.settings.prices()
            refused = completion.finish_reason == "content_filter" or not completion.text.strip()
            record = Answer(
                answer=None, model=self.model, tokens_in=completion.tokens_in, tokens_out=completion.tokens_out,
                cost_usd=round((completion.tokens_in * price_in + completion.tokens_out * price_out) / 1e6, 8),
                seconds=round(completion.seconds, 4), output_mode=completion.mode, parsed=not refused,
                error="the model refused or returned nothing" if refused else None, attempts=completion.attempts,
                usage_reported=completion.usage_reported,
            )
            result.calls.append(Call(stage, step, record))
        finally:
            cost = record.cost_usd if record is not None else 0.0
            tokens = (record.tokens_in, record.tokens_out) if record is not None else (0, 0)
            question_budget.settle(hold, cost, *tokens)
            self.budget.settle(hold, cost, *tokens)
        if refused:
            raise QuestionStopped(f"step {step}: the model refused the {stage} call or returned nothing "
                        f"(finish reason {completion.finish_reason})")
        return completion.text


def charges(result: DeepResult, run_id: str, prices: tuple[float, float, str]) -> list[ledger.Charge]:
    """Every call of a question as a cost-ledger row, purpose ``deep-<stage>``."""
    return [dataclasses.replace(answer_charge(run_id, c.record, prices), purpose=f"deep-{c.stage}")
            for c in result.calls]
