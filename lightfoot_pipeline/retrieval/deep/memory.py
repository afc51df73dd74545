"""The working memory of one deep question: memory points as hyperedges over entities.

A memory point (paper §3.3) is a description the model wrote, and the entities, facts and
passages (chunks) it rests on; its entities are the hyperedge's vertices. The memory lives only
for the question it serves. It changes by three operations (§3.5), each checked here before it
takes effect:

- **insert** a new point from the step's evidence;
- **update** a point's description, optionally adding evidence to it;
- **merge** two or more points into one higher-order point, whose evidence is the union of theirs
  and which replaces them.

Operations name evidence by the references the prompt gave it (``E1``, ``F1``, ``P1``) and points
by their ids (``M1``); a reference the step did not give is dropped from the operation and noted,
and an operation left with nothing to act on is refused with its reason. Point ids count up from
``M1`` and are never reused within a question.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_DESCRIPTION_CHARS = 1000  # a description longer than this is cut (noted on the operation)


@dataclass
class MemoryPoint:
    point_id: str
    description: str
    entity_ids: list[str] = field(default_factory=list)
    fact_ids: list[str] = field(default_factory=list)
    chunk_ids: list[str] = field(default_factory=list)

    def add(self, entities: list[str], facts: list[str], chunks: list[str]) -> None:
        for mine, new in ((self.entity_ids, entities), (self.fact_ids, facts), (self.chunk_ids, chunks)):
            mine.extend(i for i in new if i not in mine)

    def as_dict(self, text: bool = True) -> dict:
        out = {"point": self.point_id, "entities": list(self.entity_ids), "facts": list(self.fact_ids),
               "chunks": list(self.chunk_ids)}
        if text:
            out["description"] = self.description
        return out


@dataclass
class Operation:
    """One memory operation as the model asked it, resolved to ids, and what came of it."""

    op: str  # "insert", "update" or "merge"
    description: str = ""
    point: str | None = None  # update: the point changed; insert and merge: the point made
    points: list[str] = field(default_factory=list)  # merge: the points merged
    entity_ids: list[str] = field(default_factory=list)
    fact_ids: list[str] = field(default_factory=list)
    chunk_ids: list[str] = field(default_factory=list)
    applied: bool = False
    reason: str = ""  # why it was refused, or what was dropped from it
    notes: list[str] = field(default_factory=list)

    def as_dict(self, text: bool = True) -> dict:
        out = {"op": self.op, "point": self.point, "points": list(self.points), "entities": list(self.entity_ids),
               "facts": list(self.fact_ids), "chunks": list(self.chunk_ids), "applied": self.applied,
               "reason": self.reason, "notes": list(self.notes)}
        if text:
            out["description"] = self.description
        return out


class Memory:
    """The memory points of one question, in the order they were made."""

    def __init__(self) -> None:
        self.points: dict[str, MemoryPoint] = {}
        self._next = 1

    def __len__(self) -> int:
        return len(self.points)

    def __contains__(self, point_id: str) -> bool:
        return point_id in self.points

    def _new_id(self) -> str:
        point_id = f"M{self._next}"
        self._next += 1
        return point_id

    def entity_ids(self) -> list[str]:
        """Every entity some point rests on, in the order the points hold them."""
        return list(dict.fromkeys(e for p in self.points.values() for e in p.entity_ids))

    def chunk_ids(self) -> list[str]:
        return list(dict.fromkeys(c for p in self.points.values() for c in p.chunk_ids))

    def apply(self, operation: Operation) -> Operation:
        """Apply one resolved operation, or refuse it; the operation records which, and why."""
        description = " ".join(operation.description.split())
        if len(description) > MAX_DESCRIPTION_CHARS:
            description = description[:MAX_DESCRIPTION_CHARS]
            operation.notes.append(f"description cut to {MAX_DESCRIPTION_CHARS} characters")
        evidence = (operation.entity_ids, operation.fact_ids, operation.chunk_ids)
        if operation.op == "insert":
            if not description:
                return _refuse(operation, "an insertion needs a description")
            if not any(evidence):
                return _refuse(operation, "an insertion must rest on at least one entity, fact or passage")
            point = MemoryPoint(self._new_id(), description)
            point.add(*evidence)
            self.points[point.point_id] = point
            operation.point = point.point_id
        elif operation.op == "update":
            point = self.points.get(operation.point or "")
            if point is None:
                return _refuse(operation, f"no memory point {operation.point!r} to update")
            if not description and not any(evidence):
                return _refuse(operation, "an update needs a new description or new evidence")
            if description:
                point.description = description
            point.add(*evidence)
        elif operation.op == "merge":
            named = list(dict.fromkeys(operation.points))
            unknown = [p for p in named if p not in self.points]
            if unknown:
                return _refuse(operation, f"no memory points {unknown} to merge")
            if len(named) < 2:
                return _refuse(operation, "a merge needs at least two memory points")
            if not description:
                return _refuse(operation, "a merge needs a description of the merged point")
            merged = MemoryPoint(self._new_id(), description)
            for point_id in named:
                old = self.points.pop(point_id)
                merged.add(old.entity_ids, old.fact_ids, old.chunk_ids)
            merged.add(*evidence)
            self.points[merged.point_id] = merged
            operation.points = named
            operation.point = merged.point_id
        else:
            return _refuse(operation, f"unknown operation {operation.op!r}")
        operation.description = description
        operation.applied = True
        return operation

    def as_list(self, text: bool = True) -> list[dict]:
        return [p.as_dict(text) for p in self.points.values()]


def _refuse(operation: Operation, reason: str) -> Operation:
    operation.applied = False
    operation.reason = reason
    return operation
