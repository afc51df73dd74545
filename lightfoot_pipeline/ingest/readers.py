"""Who may read a document: its reader groups, as documents and sources give them.

A document's readers are a set of group names. ``public`` means everyone; the empty set means
nobody but the operator (a principal of the group ``*``, permissions/principals.py). A document
that names no readers gets the default, ``$LIGHTFOOT_DEFAULT_READERS`` (``public`` unless set to
``nobody``), resolved when it is ingested; documents ingested before readers were kept have no row
and read as public.

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
OPERATOR = "*"  # the group that reads every document; never a document's reader
MAX_GROUP_CHARS = 64
MAX_GROUPS = 64
GROUP_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class ReadersError(LightfootError, ValueError):
    """A document's or a source's readers cannot be used (the message says where and why)."""


def parse_groups(value: object, where: str) -> tuple[str, ...]:
    """A list of group names (or one comma-separated string) as a sorted tuple without repeats.

    ReadersError names ``where`` and the first name that is not a group name."""
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
        if not GROUP_NAME.match(name):
            shown = item[:MAX_GROUP_CHARS] + ("…" if len(item) > MAX_GROUP_CHARS else "")
            raise ReadersError(f"{where}: {shown!r} is not a group name (lower-case letters, digits and . _ -, "
                               f"starting with a letter or digit, up to {MAX_GROUP_CHARS} characters)")
        groups.add(name)
    if len(groups) > MAX_GROUPS:
        raise ReadersError(f"{where}: {len(groups)} reader groups; at most {MAX_GROUPS}")
    return tuple(sorted(groups))


def default_groups(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The readers of a document that names none: ``("public",)``, or ``()`` for ``nobody``."""
    return (PUBLIC,) if default_readers(environ) == PUBLIC else ()


def readers_text(groups: Iterable[str]) -> str:
    """How the store keeps a reader set: the names sorted and comma-joined (``""`` for nobody)."""
    return ",".join(sorted(set(groups)))


def readers_of_text(text: str | None) -> tuple[str, ...]:
    """The reader set a stored string holds; None (a document without a row) is public."""
    if text is None:
        return (PUBLIC,)
    return tuple(part for part in text.split(",") if part)
