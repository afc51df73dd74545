"""What a deep question would cost, estimated before any model call (``eval --dry-run``).

The first step's evidence needs no model (it is the question's own global exploration), so its
memory prompt is measured exactly. Later prompts are taken as the path that costs most within
the step cap: every step runs, each step's evidence the size of the first's, and the memory
grows by ``MEMORY_CHARS_PER_STEP`` a step. Replies count ``TYPICAL_TOKENS`` each (the estimate)
or their full ``max_tokens`` (the ceiling, with prompts at their byte bound on tokens,
``llm.prompt_token_bound``, as the budget holds them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lightfoot_pipeline.models.llm import prompt_token_bound
from lightfoot_pipeline.retrieval.deep.evidence import SnapshotIndex, StepEvidence, explore
from lightfoot_pipeline.retrieval.deep.loop import DeepSettings
from lightfoot_pipeline.retrieval.deep.memory import Memory
from lightfoot_pipeline.retrieval.deep.prompts import answer_messages, check_messages, memory_messages
from lightfoot_pipeline.retrieval.deep.schemas import SCHEMAS
from lightfoot_pipeline.retrieval.retrieve import Retriever

CHARS_PER_TOKEN = 4.0
MEMORY_CHARS_PER_STEP = 600  # about three memory points of two short sentences each
TYPICAL_TOKENS = {"memory": 250, "check": 80, "answer": 16}


@dataclass(frozen=True)
class QuestionEstimate:
    calls: int
    tokens_in: int  # prompt characters / 4
    tokens_in_reserved: int  # the prompts' byte bounds on their tokens
    tokens_out_typical: int
    tokens_out_max: int


def _chars(messages: list[dict]) -> int:
    return sum(len(m["content"]) for m in messages)


def estimate_question(retriever: Retriever, settings: DeepSettings, question: str, *,
                      index: SnapshotIndex | None = None, rerank: bool = True) -> QuestionEstimate:
    """The most a question's calls take within the step cap, from its first step's evidence."""
    s, index = settings, index or SnapshotIndex(retriever.snapshot)
    first = explore(retriever, index, question, s.passages, s.facts_per_query, s.entities_per_query, rerank)
    evidence = StepEvidence([first])
    empty = Memory()
    stages: list[tuple[str, int, int]] = []  # (stage, prompt characters, bound on its tokens)

    def stage(name: str, messages: list[dict], grown: int) -> None:
        # the memory grows in text of about a byte a character
        stages.append((name, _chars(messages) + grown, prompt_token_bound(messages, SCHEMAS[name]) + grown))

    memory = memory_messages(question, empty, evidence, index)
    check = check_messages(question, empty, index, s.max_subqueries)
    for step in range(s.max_steps):
        grown = step * MEMORY_CHARS_PER_STEP
        stage("memory", memory, grown)
        if step + 1 < s.max_steps:
            stage("check", check, grown + MEMORY_CHARS_PER_STEP)
    stage("answer", answer_messages(question, empty, {}, first.passages[: s.passages], index),
          s.max_steps * MEMORY_CHARS_PER_STEP)
    return QuestionEstimate(
        calls=len(stages),
        tokens_in=sum(math.ceil(c / CHARS_PER_TOKEN) for _, c, _ in stages),
        tokens_in_reserved=sum(bound for _, _, bound in stages),
        tokens_out_typical=sum(TYPICAL_TOKENS[name] for name, _, _ in stages),
        tokens_out_max=sum(s.tokens(name) for name, _, _ in stages),
    )
