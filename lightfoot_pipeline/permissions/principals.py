"""Who is asking: a principal, its groups, and which documents they let it read.

A principal reads a document when the document's readers (ingest/readers.py) hold ``public`` or
one of the principal's groups. The group ``*`` is the operator's: it reads every document, those
that name nobody among them. A principal without groups reads the public documents only.

``--as GROUP[,GROUP]`` on the command line and a token's groups in the service's tokens file name
groups with the same rule as documents do (:func:`principal_of`), but for the reserved words: a
principal may be of ``*`` and never of ``public`` or ``nobody`` (refused, so that a tokens file line
naming either fails closed); a groups file for
``lightfoot audit-permissions`` holds one principal a line (:func:`read_groups_file`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lightfoot_pipeline.ingest.readers import OPERATOR, PUBLIC, ReadersError, principal_groups

MAX_PRINCIPALS = 1000  # lines of a groups file
MAX_PRINCIPAL_CHARS = 128


@dataclass(frozen=True)
class Principal:
    """A name (for logs and the page; never a document's content) and the groups it reads as."""

    name: str
    groups: tuple[str, ...] = ()

    @property
    def is_operator(self) -> bool:
        return OPERATOR in self.groups

    def may_read(self, readers: Iterable[str]) -> bool:
        """Whether a document with these readers is one this principal reads."""
        if self.is_operator:
            return True
        held = set(readers)
        return PUBLIC in held or not held.isdisjoint(self.groups)

    def as_dict(self) -> dict:
        return {"principal": self.name, "groups": list(self.groups)}


OPERATOR_PRINCIPAL = Principal("operator", (OPERATOR,))


def principal_of(groups: str | Iterable[str] | None, name: str | None = None, where: str = "--as") -> Principal:
    """The principal reading as ``groups`` (``"staff,legal"``, a list, or ``*`` for every document).

    None or an empty value is a principal of no group: the public documents only."""
    if groups is None:
        return Principal(name or "public", ())
    items = [g.strip() for g in groups.split(",")] if isinstance(groups, str) else [str(g).strip() for g in groups]
    chosen = principal_groups([g for g in items if g], where)
    return Principal(name or (",".join(chosen) if chosen else "public"), chosen)


def read_groups_file(path: Path) -> list[Principal]:
    """The principals of a groups file: one JSON object a line, ``{"principal": NAME, "groups": [...]}``.

    ReadersError names the line of the first entry that cannot be used; blank lines are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ReadersError(f"cannot read the groups file {path}: {err}") from None
    principals: list[Principal] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as err:
            raise ReadersError(f"{where}: not JSON ({err.msg})") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("principal"), str) or not entry["principal"].strip():
            raise ReadersError(f'{where}: expected {{"principal": NAME, "groups": [...]}}')
        name = entry["principal"].strip()
        if len(name) > MAX_PRINCIPAL_CHARS:
            raise ReadersError(f"{where}: a principal's name has at most {MAX_PRINCIPAL_CHARS} characters")
        if name in seen:
            raise ReadersError(f"{where}: principal {name!r} is named twice")
        groups = entry.get("groups", [])
        if not isinstance(groups, list):
            raise ReadersError(f"{where}: groups must be a list of group names")
        principals.append(principal_of([str(g) for g in groups], name, where))
        seen.add(name)
        if len(principals) > MAX_PRINCIPALS:
            raise ReadersError(f"{path}: more than {MAX_PRINCIPALS} principals")
    if not principals:
        raise ReadersError(f"the groups file {path} names no principal")
    return principals
