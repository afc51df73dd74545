"""The deep mode's prompts: memory operations, the sufficiency check, and the answer from memory.

Each prompt is the system message below and a plain-text user message. Memory points appear by
id (``M1``) with their descriptions and the names of their entities; a step's evidence by
reference (``E1`` entities, ``F1`` facts with their evidence quotes, ``P1`` passages in full), so
that the model's operations can name exactly what they rest on.
"""

from __future__ import annotations

from collections.abc import Sequence

from lightfoot_pipeline.retrieval.deep.evidence import SnapshotIndex, StepEvidence
from lightfoot_pipeline.retrieval.deep.memory import Memory
from lightfoot_pipeline.retrieval.retrieve import FactHit, PassageHit

MAX_QUOTES = 1  # evidence quotes shown per fact

MEMORY_SYSTEM = (
    "You keep a working memory for answering a question over a document collection. The memory is "
    "a set of memory points; each point is a short description of what is known, resting on the "
    "entities, facts and passages that support it. You are given the memory and newly retrieved "
    "evidence: entities (E1, E2, ...), facts (F1, ...) and passages (P1, ...).\n"
    "Return the operations that bring the memory up to date, as JSON only:\n"
    '{"operations": [{"op": "insert" | "update" | "merge", "point": "", "points": [], '
    '"description": "...", "entities": ["E1"], "facts": ["F1"], "passages": ["P1"]}]}\n'
    "- insert: a new point from the evidence that bears on the question; name the evidence it rests on.\n"
    "- update: revise the description of an existing point (\"point\": \"M1\") and add evidence to it.\n"
    "- merge: join existing points (\"points\": [\"M1\", \"M2\"]) into one point with a new description, "
    "when together they form one line of reasoning.\n"
    "Record only what bears on the question; keep descriptions short and factual, with names and dates "
    "as the passages give them. An empty list means nothing new."
)

CHECK_SYSTEM = (
    "You decide whether a working memory suffices to answer a question over a document collection. "
    "If it does not, ask for what is missing with at most {max_subqueries} subqueries, each either "
    "local (investigate one memory point's entities further: \"kind\": \"local\", \"point\": \"M1\") or "
    "global (look for something no memory point covers: \"kind\": \"global\", \"point\": \"\"). "
    "A subquery is a short search query naming what to find.\n"
    'Reply with JSON only: {{"sufficient": true | false, "reason": "...", "subqueries": '
    '[{{"kind": "local" | "global", "point": "", "query": "..."}}]}}'
)

ANSWER_SYSTEM = (
    "You answer a question from a working memory: memory points (descriptions with their facts) and "
    "the passages their entities appear in. Questions may need several steps: combine the points and "
    "passages to reach the answer.\n"
    'Reply with JSON only: {"answer": "...", "points": ["M1"]}. The answer is the shortest span that '
    "answers the question (a name, a date, a number or a short phrase), copied from the passages where "
    "possible; points lists the memory points the answer rests on. Never refuse: if the memory does not "
    "settle the question, give your best guess."
)


def render_memory(memory: Memory, index: SnapshotIndex) -> list[str]:
    if not len(memory):
        return ["(the memory is empty)"]
    lines = []
    for point in memory.points.values():
        names = [index.entity_names[index.entity_nodes[e]] for e in point.entity_ids if e in index.entity_nodes]
        lines.append(f"{point.point_id}: {point.description}")
        if names:
            lines.append(f"   entities: {'; '.join(names[:12])}")
    return lines


def _fact_lines(ref: str, fact: FactHit) -> list[str]:
    lines = [f"{ref}. {fact.text}"]
    for quote in [e for e in fact.evidence if e.get("evidence")][:MAX_QUOTES]:
        lines.append(f'   evidence: "{quote["evidence"]}"')
    return lines


def _passage_lines(ref: str, passage: PassageHit) -> list[str]:
    heading = f"[{ref}] {passage.title}" if passage.title else f"[{ref}]"
    return [heading, passage.text.strip(), ""]


def memory_messages(question: str, memory: Memory, evidence: StepEvidence, index: SnapshotIndex) -> list[dict]:
    lines = [f"Question: {question.strip()}", "", "Memory:", *render_memory(memory, index), ""]
    lines.append("Retrieved for the subqueries: " + "; ".join(
        f"{item.kind} \"{item.query}\"" + (f" on {item.point}" if item.point else "") for item in evidence.items))
    lines += ["", "Entities:"]
    lines += [f"{evidence.ref_of[e.entity_id]}. {e.name}" for e in evidence.entities.values()] or ["(none)"]
    lines += ["", "Facts (subject; predicate; object):"]
    facts = [line for f in evidence.facts.values() for line in _fact_lines(evidence.ref_of[f.fact_id], f)]
    lines += facts or ["(none)"]
    lines += ["", "Passages:"]
    passages = [line for p in evidence.passages.values() for line in _passage_lines(evidence.ref_of[p.chunk_id], p)]
    lines += passages or ["(none)", ""]
    lines.append("Return the memory operations.")
    return [{"role": "system", "content": MEMORY_SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


def check_messages(question: str, memory: Memory, index: SnapshotIndex, max_subqueries: int) -> list[dict]:
    lines = [f"Question: {question.strip()}", "", "Memory:", *render_memory(memory, index), "",
             "Does the memory suffice to answer the question?"]
    return [{"role": "system", "content": CHECK_SYSTEM.format(max_subqueries=max_subqueries)},
            {"role": "user", "content": "\n".join(lines)}]


def answer_messages(question: str, memory: Memory, facts: dict[str, FactHit], passages: Sequence[PassageHit],
                    index: SnapshotIndex) -> list[dict]:
    lines = ["Memory points:"]
    if not len(memory):
        lines.append("(the memory is empty)")
    for point in memory.points.values():
        lines.append(f"{point.point_id}: {point.description}")
        lines += [f"   fact: {facts[f].text}" for f in point.fact_ids if f in facts]
    lines += ["", "Passages of the memory's entities:"]
    for number, passage in enumerate(passages, start=1):
        lines += _passage_lines(str(number), passage)
    if not passages:
        lines += ["(none)", ""]
    lines.append(f"Question: {question.strip()}")
    return [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": "\n".join(lines)}]
