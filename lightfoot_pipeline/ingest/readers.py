"""Who may read a document: its reader groups, as documents and sources give them.

A document's readers are a set of group names. ``public`` means everyone; the empty set means
nobody but the operator (a principal of the group ``*``, permissions/principals.py). A document
that names no readers gets the default, ``$LIGHTFOOT_DEFAULT_READERS`` (``public`` unless set to
``nobody``), resolved when it is ingested; documents ingested before readers were kept have no row
and read as public.

``public``, ``nobody`` and ``*`` are reserved words, never group names: ``public`` among a
document's readers makes it everyone's; ``nobody``, alone, is the empty set (named beside a group it
is refused: it would say both); ``*`` is the operator's and is never a document's reader. A
principal is never in the group ``public`` or ``nobody`` (:func:`principal_groups`), so no token
reads a document its owner meant for no one.

Group names are lower-case letters, digits and ``. _ -``, up to 64 characters, at most 64 of them
per document, so that a name never carries a document's content and a reader set stays small.
The store keeps a set as one string (:func:`readers_text`): the names sorted, comma-joined.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.settings import default_readers

PUBLIC = "public"
NOBODY = "nobody"  # among readers: no one but the operator (the empty set)
OPERATOR = "*"  # the group that reads every document; never a document's reader
RESERVED = (PUBLIC, NOBODY, OPERATOR)
MAX_GROUP_CHARS = 64
MAX_GROUPS = 64
GROUP_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class ReadersError(LightfootError, ValueError):
    """A document's or a source's readers cannot be used (the message says where and why)."""


def parse_groups(value: object, where: str) -> tuple[str, ...]:
    """A document's readers, a list of group names (or one comma-separated string), as a sorted
    tuple without repeats: ``["nobody"]`` is ``()``, and ``public`` stays as the word for everyone.

    ReadersError names ``where`` and the first name that is not a group name, ``*``, or ``nobody``
    beside other names."""
    groups = _names(value, where, allowed=(PUBLIC, NOBODY))
    if NOBODY in groups:
        if len(groups) > 1:
            raise ReadersError(f"{where}: {NOBODY!r} means no reader and cannot be named beside "
                               f"{', '.join(repr(g) for g in groups if g != NOBODY)}")
        return ()
    return groups


def principal_groups(value: object, where: str) -> tuple[str, ...]:
    """The groups a principal reads as (``--as``, a token's, a groups file's), sorted: group names
    and ``*`` (the operator). ``public`` and ``nobody`` are refused: a principal in either would
    read documents as no owner meant (everyone reads the public ones already)."""
    return _names(value, where, allowed=(OPERATOR,))


def _names(value: object, where: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """Group names, and those of the reserved words in ``allowed``, as a sorted tuple."""
    if isinstance(value, str):
        items: Iterable[object] = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise ReadersError(f"{where}: readers must be a list of group names, got {type(value).__name__}")
    groups = set()
    for item in items:
        if not isinstance(item, str):
            raise ReadersError(f"{where}: a reader group must be a string, got {type(item).__name__}")
        name = item.strip().casefold()
        if name in RESERVED and name not in allowed:
            raise ReadersError(f"{where}: {name!r} is a reserved word ({_RESERVED_MEANING[name]}), not a group name")
        if name not in allowed and not GROUP_NAME.match(name):
            shown = item[:MAX_GROUP_CHARS] + ("…" if len(item) > MAX_GROUP_CHARS else "")
            raise ReadersError(f"{where}: {shown!r} is not a group name (lower-case letters, digits and . _ -, "
                               f"starting with a letter or digit, up to {MAX_GROUP_CHARS} characters)")
        groups.add(name)
    if len(groups) > MAX_GROUPS:
        raise ReadersError(f"{where}: {len(groups)} reader groups; at most {MAX_GROUPS}")
    return tuple(sorted(groups))


_RESERVED_MEANING = {PUBLIC: "everyone, among a document's readers", NOBODY: "no reader, alone among a "
                     "document's readers", OPERATOR: "the operator, who reads every document"}


def default_groups(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The readers of a document that names none: ``("public",)``, or ``()`` for ``nobody``."""
    return (PUBLIC,) if default_readers(environ) == PUBLIC else ()


def readers_text(groups: Iterable[str]) -> str:
    """How the store keeps a reader set: the names sorted and comma-joined (``""`` for nobody)."""
    return ",".join(sorted(set(groups)))


def readers_of_text(text: str | None) -> tuple[str, ...]:
    """The reader set a stored string holds; None (a document without a row) is public. ``nobody``,
    stored as a group before it was reserved, is no reader."""
    if text is None:
        return (PUBLIC,)
    return tuple(part for part in text.split(",") if part and part != NOBODY)
