"""Tolerant reading of the deep mode's model replies, as extraction reads its answers.

A reply is read for its JSON object, repairing what models are known to do when the repair is
unambiguous: code fences and prose around the object, trailing commas, Python literals
(``True``, ``None``), single quotes, and a reply cut short (open strings and containers are
closed after the last complete member). Keys are read case-blind and under their usual synonyms
(``ops`` for ``operations``, ``queries`` for ``subqueries``, ``add`` for ``insert``, …), and
memory-point ids as ``M1``, ``m1`` or ``1``. What was repaired is noted.

A reply with no usable object, or whose object lacks what the step needs (a verdict, a list of
operations, an answer), raises :class:`ReplyError` with the reason; the step loop then ends the
question there, keeping the memory it has. Nothing here raises anything else on any input.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

from lightfoot_pipeline.errors import LightfootError

MAX_REPLY_CHARS = 40_000
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\r?\n?(.*?)(?:```|\Z)", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_POINT = re.compile(r"^\s*(?:m(?:emory)?[\s_-]*(?:point)?[\s_-]*)?(\d+)\s*$", re.IGNORECASE)
_CLOSERS = {"{": "}", "[": "]"}

_KINDS = {"local": "local", "local investigation": "local", "investigate": "local", "investigation": "local",
          "global": "global", "global exploration": "global", "explore": "global", "exploration": "global"}
_OPS = {"insert": "insert", "insertion": "insert", "add": "insert", "create": "insert", "new": "insert",
        "update": "update", "revise": "update", "modify": "update", "edit": "update",
        "merge": "merge", "merging": "merge", "combine": "merge"}
_YES, _NO = {"true", "yes", "y", "sufficient", "1"}, {"false", "no", "n", "insufficient", "0"}


class ReplyError(LightfootError, ValueError):
    """A reply the step cannot use; the message says why."""


@dataclass
class SubQuery:
    kind: str  # "local" or "global"
    query: str
    point: str | None = None  # local: the memory point investigated


@dataclass
class Check:
    sufficient: bool
    reason: str
    subqueries: list[SubQuery] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class RawOperation:
    """One operation as the model wrote it: references, not yet resolved to ids."""

    op: str
    point: str | None
    points: list[str]
    description: str
    refs: list[str]


# -- the object ---------------------------------------------------------------------------------


def find_object(text: str | None, notes: list[str] | None = None) -> dict:
    """The reply's JSON object, repaired where that is unambiguous; ReplyError when there is none."""
    notes = notes if notes is not None else []
    if text is None or not text.strip():
        raise ReplyError("the reply is empty")
    if len(text) > MAX_REPLY_CHARS:
        notes.append(f"reply cut to {MAX_REPLY_CHARS} characters")
        text = text[:MAX_REPLY_CHARS]
    fenced = [m.group(1) for m in _FENCE.finditer(text) if "{" in m.group(1)]
    if fenced:
        notes.append("code fence removed")
        text = fenced[0]
    starts = [m.start() for m in re.finditer(r"\{", text)][:8]
    if not starts:
        raise ReplyError(f"no JSON object in the reply ({len(text)} characters)")
    decoder = json.JSONDecoder()
    for start in starts:
        try:
            value, _ = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            value = _lenient(text[start:], notes)
        if isinstance(value, dict):
            if text[:start].strip():
                notes.append("prose before the JSON object")
            return value
    raise ReplyError(f"no readable JSON object in the reply ({len(text)} characters)")


def _lenient(text: str, notes: list[str]) -> dict | None:
    """The object at the start of ``text`` read past non-standard JSON or an early end."""
    repaired = _TRAILING_COMMA.sub(r"\1", text)
    for candidate, note in ((repaired, "non-standard JSON read"), *_closings(repaired)):
        value = _loads(candidate)
        if isinstance(value, dict):
            notes.append(note)
            return value
    return None


def _loads(text: str):
    try:
        return json.JSONDecoder().raw_decode(text)[0]
    except (json.JSONDecodeError, RecursionError):
        pass
    try:  # single quotes, Python literals
        return ast.literal_eval(re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False",
                                                                    re.sub(r"\bnull\b", "None", text))))
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def _closings(text: str, tries: int = 40):
    """The text cut back at its last commas and closed (dropping the member being written when the
    reply was cut short), then closed as it stands."""
    cuts = [*[m.start() for m in re.finditer(",", text)][::-1][:tries], len(text)]
    for cut in cuts:
        closed = _close(text[:cut])
        if closed is not None:
            yield closed, "truncated JSON closed"


def _close(text: str) -> str | None:
    stack: list[str] = []
    in_string, escaped = False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _CLOSERS:
            stack.append(_CLOSERS[ch])
        elif ch in "}]" and (not stack or stack.pop() != ch):
            return None
    if not stack and not in_string:
        return None  # nothing was left open: not a cut reply
    tail = text + ('"' if in_string else "")
    tail = tail.rstrip().rstrip(",:").rstrip()
    return tail + "".join(reversed(stack))


def _field(obj: dict, *names: str):
    folded = {str(k).strip().casefold().replace("-", "_").replace(" ", "_"): v for k, v in obj.items()}
    for name in names:
        if name in folded:
            return folded[name]
    return None


def _text(value) -> str:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return " ".join(str(value).split())
    return ""


def _strings(value) -> list[str]:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list):
        return []
    return [s for s in (_text(v) for v in value) if s]


def point_id(value) -> str | None:
    """A memory point's id as ``M<n>``, from ``M1``, ``m1``, ``memory point 1`` or ``1``."""
    match = _POINT.match(_text(value))
    return f"M{int(match.group(1))}" if match else None


# -- the three replies --------------------------------------------------------------------------


def parse_check(text: str | None, points: set[str], max_subqueries: int) -> Check:
    """The sufficiency verdict and, when the memory does not suffice, the subqueries to run."""
    notes: list[str] = []
    obj = find_object(text, notes)
    verdict = _field(obj, "sufficient", "is_sufficient", "sufficiency", "enough", "done")
    if isinstance(verdict, str) and verdict.strip().casefold() in _YES | _NO:
        notes.append("verdict given as text")
        verdict = verdict.strip().casefold() in _YES
    if not isinstance(verdict, bool):
        raise ReplyError("the check reply gives no sufficient: true/false verdict")
    reason = _text(_field(obj, "reason", "reasoning", "explanation", "analysis"))
    check = Check(sufficient=verdict, reason=reason, notes=notes)
    if verdict:
        return check
    raw = _field(obj, "subqueries", "sub_queries", "queries", "questions", "subquestions")
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, str):
            item = {"kind": "global", "query": item}
        if not isinstance(item, dict):
            notes.append("a subquery that is not an object was skipped")
            continue
        query = _text(_field(item, "query", "subquery", "question", "text"))
        if not query:
            notes.append("a subquery without a query was skipped")
            continue
        kind = _KINDS.get(_text(_field(item, "kind", "type", "mode", "scope")).casefold(), "")
        point = point_id(_field(item, "point", "memory_point", "target", "anchor"))
        if not kind:
            kind = "local" if point else "global"
            notes.append(f"subquery kind read as {kind}")
        if kind == "local" and point not in points:
            notes.append(f"local subquery on unknown point {point!r} run as global exploration")
            kind, point = "global", None
        check.subqueries.append(SubQuery(kind, query, point if kind == "local" else None))
    if len(check.subqueries) > max_subqueries:
        notes.append(f"{len(check.subqueries) - max_subqueries} subqueries over the limit of {max_subqueries} dropped")
        del check.subqueries[max_subqueries:]
    if not check.subqueries:
        raise ReplyError("the check reply finds the memory insufficient but asks no usable subquery")
    return check


def parse_operations(text: str | None) -> tuple[list[RawOperation], list[str]]:
    """The memory operations of a reply (possibly none), and what was repaired to read them."""
    notes: list[str] = []
    obj = find_object(text, notes)
    raw = _field(obj, "operations", "ops", "memory_operations", "actions", "updates")
    if not isinstance(raw, list):
        raise ReplyError("the memory reply has no list of operations")
    operations = []
    for item in raw:
        if not isinstance(item, dict):
            notes.append("an operation that is not an object was skipped")
            continue
        name = _text(_field(item, "op", "operation", "type", "action")).casefold()
        refs = [*_strings(_field(item, "entities", "entity", "vertices")),
                *_strings(_field(item, "facts", "fact", "relationships")),
                *_strings(_field(item, "passages", "passage", "chunks", "chunk"))]
        operations.append(RawOperation(
            op=_OPS.get(name, name or "missing"),
            point=point_id(_field(item, "point", "memory_point", "target", "id")),
            points=[p for p in (point_id(v) for v in _strings(_field(item, "points", "merge", "sources"))) if p],
            description=_text(_field(item, "description", "content", "summary", "text")),
            refs=refs,
        ))
    return operations, notes


def parse_final(text: str | None, points: set[str]) -> tuple[str, list[str], list[str]]:
    """The answer and the memory points it names; a reply without JSON gives its first line."""
    notes: list[str] = []
    try:
        obj = find_object(text, notes)
    except ReplyError:
        obj = None
    if obj is not None:
        answer = _text(_field(obj, "answer", "final_answer", "response"))
        if answer:
            named = [p for p in (point_id(v) for v in _strings(_field(obj, "points", "memory_points", "used")))
                     if p]
            unknown = [p for p in named if p not in points]
            if unknown:
                notes.append(f"unknown points {unknown} dropped")
            return answer, [p for p in dict.fromkeys(named) if p in points], notes
    first = next((line.strip().strip("`").strip() for line in (text or "").splitlines() if line.strip()), "")
    if not first or first.startswith("{"):
        raise ReplyError("the answer reply holds no answer")
    notes.append("answer read from the reply's first line")
    return first, [], notes
