"""Answers: the retrieved facts and passages go to the language model, which names the answer.

The model gets the ``n_facts`` (10) facts most similar to the question, each with the evidence
quotes of the passages that assert it, and the ``n_passages`` (10) best passages in ranked order.
It returns JSON ``{"answer": "..."}``: the shortest span that answers the question, and always a
best guess rather than a refusal. This is the only model call at query time, and it comes after
retrieval: the ranked passages never depend on it.

The model is reached through the project's OpenAI-compatible client (llm.py); an endpoint that
cannot be reached gives an :class:`Answer` with the error, never an exception from here.

:class:`AnswerBudget` caps what answer calls may spend: each call's worst case (the prompt at its
UTF-8 byte length, a true upper bound on its tokens, and a full ``max_tokens`` reply, which every
request sends; :meth:`~lightfoot_pipeline.models.llm.LLMSettings.worst_case_usd`) is held before the
call is made and settled by what the endpoint reports it billed. ``eval --answer`` and
``lightfoot serve`` both spend through it. A model with no known price cannot be held against a
budget, so an :class:`Answerer` refuses it (before any call) unless the operator allowed it.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from lightfoot_pipeline.models.llm import LLMClient, LLMError, UnpricedModelError
from lightfoot_pipeline.retrieval.retrieve import FactHit, PassageHit
from lightfoot_pipeline.store import ledger

N_FACTS = 10
N_PASSAGES = 10
MAX_TOKENS = 200
MAX_EVIDENCE = 2  # evidence quotes shown per fact

log = logging.getLogger(__name__)

ANSWER_SCHEMA = {
    "title": "answer",
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "the shortest span that answers the question"}},
    "required": ["answer"],
    "additionalProperties": False,
}

SYSTEM_PROMPT = (
    "You answer questions using the retrieved knowledge you are given: facts extracted from a "
    "document collection, with evidence quotes, and the most relevant passages, best first. "
    "Questions may need several steps: combine facts and passages to reach the answer.\n"
    'Reply with JSON only: {"answer": "..."}. The answer is the shortest span that answers the '
    "question (a name, a date, a number or a short phrase), copied from the passages where "
    "possible, with no explanation. Never refuse and never answer that you do not know: if the "
    "knowledge does not settle the question, give your best guess."
)


@dataclass
class Answer:
    answer: str | None
    model: str
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    output_mode: str | None = None
    parsed: bool = False  # the reply was the JSON asked for (else the answer is its first line)
    error: str | None = None
    error_kind: str | None = None  # LLMError.kind when the call failed
    attempts: int = 0  # HTTP attempts the call took (retries included)
    usage_reported: bool = True  # False: the endpoint sent no usage and the tokens are estimated

    def as_dict(self) -> dict:
        return asdict(self)


def render_prompt(question: str, facts: Sequence[FactHit], passages: Sequence[PassageHit]) -> str:
    """The user message: facts with evidence, passages in ranked order, then the question."""
    lines = ["Facts (subject; predicate; object), most relevant first:"]
    if not facts:
        lines.append("(none)")
    for number, fact in enumerate(facts, start=1):
        lines.append(f"{number}. {fact.text}")
        for quote in [e for e in fact.evidence if e.get("evidence")][:MAX_EVIDENCE]:
            lines.append(f'   evidence: "{quote["evidence"]}"')
    lines.append("")
    lines.append("Passages, most relevant first:")
    if not passages:
        lines.append("(none)")
    for number, passage in enumerate(passages, start=1):
        heading = f"[{number}] {passage.title}" if passage.title else f"[{number}]"
        if passage.location:
            heading += f" (source: {passage.location})"
        lines.append(heading)
        lines.append(passage.text.strip())
        lines.append("")
    lines.append(f"Question: {question.strip()}")
    return "\n".join(lines)


_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def parse_answer(text: str) -> tuple[str | None, bool]:
    """The answer in a reply, and whether the reply was the JSON asked for.

    A reply that is not JSON (an endpoint without structured output may wrap it in prose or a
    code fence) yields the ``answer`` of the first JSON object in it, else its first non-empty
    line: the model's best guess is kept rather than thrown away.
    """
    stripped = text.strip()
    candidates = [stripped]
    match = _JSON_OBJECT.search(stripped)
    if match and match.group(0) != stripped:
        candidates.append(match.group(0))
    for candidate in candidates:
        try:
            payload = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(payload, dict) and isinstance(payload.get("answer"), (str, int, float)):
            return str(payload["answer"]).strip(), True
    first = next((line.strip() for line in stripped.splitlines() if line.strip()), "")
    first = first.strip("`").strip()
    return (first or None), False


class Answerer:
    """Answer calls to one model. Raises :class:`~lightfoot_pipeline.models.llm.UnpricedModelError`
    when the model has no known price and its settings do not allow spending without one."""

    def __init__(self, client: LLMClient, n_facts: int = N_FACTS, n_passages: int = N_PASSAGES,
                 max_tokens: int = MAX_TOKENS) -> None:
        client.settings.require_price("answers")
        self.client = client
        self.n_facts = n_facts
        self.n_passages = n_passages
        self.max_tokens = max_tokens

    @property
    def model(self) -> str:
        return self.client.settings.model

    def messages(self, question: str, facts: Sequence[FactHit], passages: Sequence[PassageHit],
                 history: Sequence[dict] = ()) -> list[dict]:
        """The system prompt and the user message for one question; ``history``, a conversation's
        earlier turns (``{"role": "user" | "assistant", "content": str}``, bounded by the caller:
        service/chat.py), between them, so that a follow-up question is read in its context."""
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            *({"role": turn["role"], "content": turn["content"]} for turn in history),
            {"role": "user", "content": render_prompt(question, facts[: self.n_facts], passages[: self.n_passages])},
        ]

    def worst_case_usd(self, messages: Sequence[dict]) -> float:
        """The most a call with these messages can cost: the prompt's byte bound on its tokens and
        a reply of ``max_tokens``, at the configured (or list) prices."""
        return self.client.settings.worst_case_usd(list(messages), self.max_tokens, ANSWER_SCHEMA)

    def answer(self, question: str, facts: Sequence[FactHit], passages: Sequence[PassageHit]) -> Answer:
        return self.ask(self.messages(question, facts, passages))

    def ask(self, messages: list[dict]) -> Answer:
        """One call with messages from :meth:`messages`; failures come back as the Answer's error."""
        try:
            completion = self.client.complete(messages, json_schema=ANSWER_SCHEMA, max_tokens=self.max_tokens)
        except LLMError as err:
            return Answer(answer=None, model=self.model, error=str(err), error_kind=err.kind,
                          attempts=max(err.attempts, 1))
        price_in, price_out, _ = self.client.settings.prices()
        text, parsed = parse_answer(completion.text)
        return Answer(
            answer=text,
            model=self.model,
            tokens_in=completion.tokens_in,
            tokens_out=completion.tokens_out,
            cost_usd=round((completion.tokens_in * price_in + completion.tokens_out * price_out) / 1e6, 8),
            seconds=round(completion.seconds, 4),
            output_mode=completion.mode,
            parsed=parsed,
            error=None if text else "the model returned no answer",
            attempts=completion.attempts,
            usage_reported=completion.usage_reported,
        )


class AnswerBudget:
    """A cap in USD on what answer calls spend, shared by the threads that make them.

    :meth:`reserve` holds a call's worst case before the call; a call whose worst case does not
    fit beside what is spent and held is refused, and from then on every call is refused (the
    budget is spent). :meth:`settle` releases the hold and charges what the endpoint billed,
    whatever that is: a call whose cost brings the spend to the cap ends every later call.

    An endpoint that keeps to ``max_tokens`` is never billed past a hold, so the cap holds. One
    that bills past it (``overbilled``) could overshoot by every call in flight at once, so a
    capped budget lets one call at a time through (:meth:`reserve` waits) until a call has been
    billed within its hold, and again for good after any call billed past it: the spend then
    passes the cap by at most one call's bill, and by the calls in flight only where an endpoint
    billed honestly first and then did not. A budget of ``None`` refuses nothing and only counts.
    """

    def __init__(self, limit_usd: float | None) -> None:
        if limit_usd is not None and not (math.isfinite(limit_usd) and limit_usd >= 0):
            raise ValueError(f"the budget must be a non-negative number of USD, got {limit_usd}")
        self.limit_usd = limit_usd
        self.spent_usd = 0.0
        self.held_usd = 0.0
        self.calls = 0
        self.refused = 0
        self.overbilled = 0  # calls settled above their hold
        self.tokens_in = 0
        self.tokens_out = 0
        self.exhausted = False
        self._in_flight = 0
        self._one_at_a_time = limit_usd is not None  # until a call is billed within its hold
        self._lock = threading.Condition()

    def reserve(self, worst_case_usd: float) -> bool:
        """Hold ``worst_case_usd`` for a call about to be made; False: the call must not be made.
        While the budget lets one call at a time through, this waits for the call in flight."""
        with self._lock:
            while self._one_at_a_time and self._in_flight and not self.exhausted:
                self._lock.wait()
            over = self.limit_usd is not None and self.spent_usd + self.held_usd + worst_case_usd > self.limit_usd
            if self.exhausted or over:
                self.exhausted = True
                self.refused += 1
                self._lock.notify_all()
                return False
            self.held_usd += worst_case_usd
            self._in_flight += 1
            return True

    def release(self, worst_case_usd: float) -> None:
        """Let go of a hold whose call will not be made (another budget refused it): no call is counted."""
        with self._lock:
            self.held_usd = max(0.0, self.held_usd - worst_case_usd)
            self._in_flight = max(0, self._in_flight - 1)
            self._lock.notify_all()

    def count_refused(self) -> None:
        """Count a call that another budget refused."""
        with self._lock:
            self.refused += 1

    def spent(self) -> bool:
        """Whether the budget refuses every call now; asking counts as a refused call when it does."""
        with self._lock:
            if self.exhausted:
                self.refused += 1
            return self.exhausted

    def settle(self, worst_case_usd: float, cost_usd: float, tokens_in: int = 0, tokens_out: int = 0) -> None:
        """Release a call's hold and charge what it cost; at the cap, the budget is spent."""
        with self._lock:
            self.held_usd = max(0.0, self.held_usd - worst_case_usd)
            self._in_flight = max(0, self._in_flight - 1)
            self.spent_usd += cost_usd
            self.tokens_in += tokens_in
            self.tokens_out += tokens_out
            self.calls += 1
            if cost_usd > worst_case_usd + 1e-8:  # (costs are rounded to 8 places)
                self.overbilled += 1
                self._one_at_a_time = self.limit_usd is not None
                log.warning("a model call was billed $%.6f, above the $%.6f held for it: the endpoint "
                            "bills past the request's max_tokens", cost_usd, worst_case_usd)
            elif self.overbilled == 0 and (cost_usd > 0 or worst_case_usd == 0):  # billed within its hold
                self._one_at_a_time = False
            if self.limit_usd is not None and self.spent_usd >= self.limit_usd:
                self.exhausted = True
            self._lock.notify_all()

    def as_dict(self) -> dict:
        with self._lock:
            return {"budget_usd": self.limit_usd, "spent_usd": round(self.spent_usd, 8),
                    "held_usd": round(self.held_usd, 8), "calls": self.calls, "refused": self.refused,
                    "overbilled": self.overbilled, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
                    "exhausted": self.exhausted}


class SharedBudget:
    """One spender's budget within a budget shared by all (a service's principals within its
    process's), with :class:`AnswerBudget`'s interface: a call is held against its own budget,
    then against the shared one, and made only when both hold it; each counts what it is billed.

    The spender's counters are its own calls alone. The shared budget counts every spender's,
    and once it is spent every spender's calls are refused (``shared_spent`` says so).
    """

    def __init__(self, own: AnswerBudget, shared: AnswerBudget) -> None:
        self.own = own
        self.shared = shared

    @property
    def limit_usd(self) -> float | None:
        """The cap that holds this spender: its own or the shared one, the lower (None: neither caps)."""
        caps = [cap for cap in (self.own.limit_usd, self.shared.limit_usd) if cap is not None]
        return min(caps) if caps else None

    @property
    def spent_usd(self) -> float:
        return self.own.spent_usd

    @property
    def exhausted(self) -> bool:
        return self.own.exhausted or self.shared.exhausted

    @property
    def shared_spent(self) -> bool:
        """Whether the shared budget, not this spender's own, is what refuses calls now."""
        return self.shared.exhausted and not self.own.exhausted

    def reserve(self, worst_case_usd: float) -> bool:
        if not self.own.reserve(worst_case_usd):
            return False
        if not self.shared.reserve(worst_case_usd):
            self.own.release(worst_case_usd)
            self.own.count_refused()
            return False
        return True

    def release(self, worst_case_usd: float) -> None:
        self.own.release(worst_case_usd)
        self.shared.release(worst_case_usd)

    def spent(self) -> bool:
        if self.own.spent():
            return True
        if self.shared.spent():
            self.own.count_refused()  # refused by the shared cap: a refusal of this spender's too
            return True
        return False

    def settle(self, worst_case_usd: float, cost_usd: float, tokens_in: int = 0, tokens_out: int = 0) -> None:
        self.own.settle(worst_case_usd, cost_usd, tokens_in, tokens_out)
        self.shared.settle(worst_case_usd, cost_usd, tokens_in, tokens_out)

    def as_dict(self) -> dict:
        return self.own.as_dict()


def answer_settings(environ: dict | None = None, *, allow_unpriced: bool = False):
    """The answer model's settings from the environment; ``allow_unpriced`` (``--allow-unpriced``)
    allows a model without a known price whatever ``LIGHTFOOT_LLM_ALLOW_UNPRICED`` says."""
    from lightfoot_pipeline.models.llm import LLMSettings

    return LLMSettings.from_env(environ, **({"allow_unpriced": True} if allow_unpriced else {}))


def build_answerer(environ: dict | None = None, *, allow_unpriced: bool = False) -> tuple[Answerer | None, str]:
    """The answerer for the configured endpoint, or None and why there is none (one line: a
    refused model's reason names the model and the settings that price it, never the endpoint)."""
    try:
        settings = answer_settings(environ, allow_unpriced=allow_unpriced)
        client = LLMClient(settings)
    except UnpricedModelError as err:
        return None, err.line()
    except (LLMError, ValueError) as err:
        return None, f"answers need a language-model endpoint ({err}); retrieval works without one"
    try:
        return Answerer(client), f"available: {settings.model} at {settings.endpoint()}"
    except UnpricedModelError as err:
        return None, err.line()


def answer_charge(run_id: str, answer: Answer, prices: tuple[float, float, str]) -> ledger.Charge:
    """An answer call's row in the cost ledger: every HTTP attempt it took, its tokens at the prices.

    A call that failed is an ``error``; one that came back without an answer is ``unusable``.
    """
    price_in, price_out, source = prices
    status = "error" if answer.error_kind else ("unusable" if answer.error else "ok")
    return ledger.Charge(
        run_id=run_id, purpose="answer", model=answer.model, status=status, attempts=max(answer.attempts, 1),
        tokens_in=answer.tokens_in, tokens_out=answer.tokens_out, price_in_per_mtok=price_in,
        price_out_per_mtok=price_out, price_source=source, seconds=answer.seconds, error_kind=answer.error_kind,
        usage_reported=answer.usage_reported,
    )
