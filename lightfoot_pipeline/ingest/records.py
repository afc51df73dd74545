"""Validation of extraction records: what one model call said about one passage.

A record is ``{entities: [{name, type, description}], facts: [[subject, predicate, object,
evidence?]]}``. Models and recordings get this wrong in known ways; each is counted, repaired when
the repair is unambiguous, and dropped with a reason otherwise. Validation never raises on bad
content: a record that is not even an object yields no entities, no facts and one issue.

Fact repairs (every other malformed fact is dropped):

- a non-string scalar element (a number) becomes its string;
- four elements ``[s, p, o, q]`` where ``q`` is verbatim in the passage and mentions ``s`` or
  ``o``: ``q`` is the evidence quote;
- four elements ``[s, p1, p2, o]`` where ``p2`` ends in a preposition (``["Houston", "has",
  "average temperature of", "53.1 °F"]``): the predicate was split, and is joined as ``p1 p2``.

Evidence that is not verbatim in the passage keeps its fact but is flagged
(``evidence_verified = False``).

A record keeps at most ``max_entities`` entities and ``max_facts`` facts (by default the caps in
:mod:`lightfoot_pipeline.settings`, 100 each); the rest are dropped with the reason
``over the entity limit`` or ``over the fact limit``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from lightfoot_pipeline.ingest.normalise import clean_surface, normalise_name, normalise_type
from lightfoot_pipeline.settings import MAX_ENTITIES_PER_PASSAGE, MAX_FACTS_PER_PASSAGE

_PREPOSITIONS = frozenset(
    ["of", "in", "at", "on", "for", "to", "with", "from", "by", "since", "into", "including", "as", "about", "after", "before", "during", "under", "over", "between", "among", "than", "via", "per", "near"]
)
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Entity:
    name: str  # as written (trimmed); normalised later by the forms stage
    type: str
    description: str | None = None


@dataclass(frozen=True)
class Fact:
    subject: str
    predicate: str
    object: str
    evidence: str | None = None
    evidence_verified: bool | None = None


@dataclass(frozen=True)
class Issue:
    action: str  # "repaired", "dropped" or "flagged"
    item: str  # "record", "entity" or "fact"
    reason: str
    detail: str = ""


@dataclass
class ValidatedRecord:
    entities: list[Entity] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)

    def counts(self) -> Counter:
        return Counter(f"{i.action}:{i.item}:{i.reason}" for i in self.issues)

    @property
    def n_dropped(self) -> int:
        return sum(1 for i in self.issues if i.action == "dropped")

    @property
    def n_repaired(self) -> int:
        return sum(1 for i in self.issues if i.action == "repaired")


def _squash(text: str) -> str:
    return _SPACES.sub(" ", text).strip().casefold()


def _as_text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return format(value, "g") if isinstance(value, float) else str(value)
    return None


def validate_record(
    raw: object,
    passage_text: str | None = None,
    *,
    entity_types: tuple[str, ...] | None = None,
    max_entities: int | None = MAX_ENTITIES_PER_PASSAGE,
    max_facts: int | None = MAX_FACTS_PER_PASSAGE,
    evidence_fourth: bool = False,
) -> ValidatedRecord:
    """Check one record against the schema, repairing what is unambiguous.

    ``max_entities``, ``max_facts``: the caps (None: no cap).

    ``evidence_fourth``: the record was written to a schema in which a fact's fourth element is
    always its evidence (a live extraction), so it is read as such rather than guessed at.
    """
    result = ValidatedRecord()
    if not isinstance(raw, dict):
        result.issues.append(Issue("dropped", "record", "not an object", type(raw).__name__))
        return result
    passage = _squash(passage_text) if passage_text else None

    result.entities = _valid_items(
        raw, "entities", "entity", lambda item: _validate_entity(item, entity_types, result.issues), max_entities,
        result.issues,
    )
    result.facts = _valid_items(
        raw, "facts", "fact", lambda item: _validate_fact(item, passage, result.issues, evidence_fourth), max_facts,
        result.issues,
    )
    return result


def _valid_items(raw: dict, key: str, item: str, validate, limit: int | None, issues: list[Issue]) -> list:
    """The items of ``raw[key]`` that ``validate`` keeps (it returns None for one it drops), in
    order, at most ``limit`` of them: the rest are dropped as over the limit."""
    items = raw.get(key) or []
    if not isinstance(items, list):
        issues.append(Issue("dropped", "record", f"{key} is not a list"))
        items = []
    kept = [valid for valid in map(validate, items) if valid is not None]
    if limit is not None and len(kept) > limit:
        issues.append(Issue("dropped", item, f"over the {item} limit", f"{len(kept) - limit} past {limit}"))
        del kept[limit:]
    return kept


def _validate_entity(item: object, entity_types: tuple[str, ...] | None, issues: list[Issue]) -> Entity | None:
    if isinstance(item, str):
        issues.append(Issue("repaired", "entity", "bare string", item[:80]))
        item = {"name": item}
    if not isinstance(item, dict):
        issues.append(Issue("dropped", "entity", "not an object", repr(item)[:80]))
        return None
    name = _as_text(item.get("name"))
    if name is None or not normalise_name(name):
        issues.append(Issue("dropped", "entity", "no name", repr(item)[:80]))
        return None
    description = item.get("description")
    if description is not None and not isinstance(description, str):
        issues.append(Issue("repaired", "entity", "description is not text", name[:80]))
        description = None
    return Entity(
        name=clean_surface(name),
        type=normalise_type(item.get("type"), entity_types),
        description=description.strip() if isinstance(description, str) and description.strip() else None,
    )


def _validate_fact(item: object, passage: str | None, issues: list[Issue], evidence_fourth: bool = False) -> Fact | None:
    if not isinstance(item, (list, tuple)):
        issues.append(Issue("dropped", "fact", "not an array", repr(item)[:80]))
        return None
    parts = [_as_text(value) for value in item]
    if any(part is None for part in parts):
        issues.append(Issue("dropped", "fact", "element that is not text", repr(item)[:80]))
        return None
    if any(not isinstance(value, str) for value in item):
        issues.append(Issue("repaired", "fact", "number as text", repr(item)[:80]))
    parts = [clean_surface(part) for part in parts]
    evidence: str | None = None
    if len(parts) == 4:
        subject, predicate, third, fourth = parts
        if evidence_fourth or _is_evidence(fourth, subject, third, passage):
            parts, evidence = parts[:3], fourth
        elif third.split() and third.split()[-1].casefold() in _PREPOSITIONS and predicate:
            issues.append(Issue("repaired", "fact", "predicate split in two", repr(item)[:120]))
            parts = [subject, f"{predicate} {third}", fourth]
        elif passage is None and fourth:
            # Without the passage the fourth element can only be read as the schema's evidence.
            parts, evidence = parts[:3], fourth
        else:
            issues.append(Issue("dropped", "fact", "4 elements, ambiguous", repr(item)[:120]))
            return None
    elif len(parts) != 3:
        reason = "no object" if len(parts) == 2 else f"{len(parts)} elements"
        issues.append(Issue("dropped", "fact", reason, repr(item)[:120]))
        return None
    subject, predicate, obj = parts
    if not normalise_name(subject) or not normalise_name(obj) or not predicate.strip():
        issues.append(Issue("dropped", "fact", "empty subject, predicate or object", repr(item)[:120]))
        return None
    verified: bool | None = None
    if evidence is not None:
        if not evidence.strip():
            evidence = None
        elif passage is not None:
            verified = _squash(evidence) in passage
            if not verified:
                issues.append(Issue("flagged", "fact", "evidence not in passage", evidence[:120]))
    return Fact(subject, predicate, obj, evidence, verified)


def _mentions(quote: str, subject: str, obj: str) -> bool:
    squashed = _squash(quote)
    return _squash(subject) in squashed or _squash(obj) in squashed


def _is_evidence(candidate: str, subject: str, obj: str, passage: str | None) -> bool:
    """A fourth element that is a verbatim quote naming the subject or object, longer than both."""
    if passage is None or not candidate:
        return False
    words = len(candidate.split())
    return (
        _squash(candidate) in passage
        and _mentions(candidate, subject, obj)
        and words > max(len(subject.split()), len(obj.split()))
    )
