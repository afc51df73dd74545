"""Document ids: the one rule that every way in checks.

A doc id is a string of 1 to 512 characters

- with no whitespace at either end;
- with no control character (C0, DEL, C1: NUL, tab, newline, ESC, …), no invisible formatting
  character (zero-width space, bidirectional overrides, a byte-order mark), no line or paragraph
  separator and no lone surrogate;
- with no quote (``'``, ``"``) and no backslash;
- without ``...`` (Dagster's partition keys cannot hold it).

So an id can be written as one line of an erasure request, passed as a command-line argument,
shown on a terminal as what it is, and used as a Dagster partition key. The dataset reader, the
document and erasure inboxes, ``lightfoot delete`` and the retention policy all check it here.
"""

from __future__ import annotations

import unicodedata

MAX_DOC_ID_CHARS = 512
# Unicode categories no id may hold: controls, formatting characters, line and paragraph
# separators, surrogates.
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_FORBIDDEN_CHARACTERS = frozenset("'\"\\")
_FORBIDDEN_SUBSTRINGS = ("...",)


def shown(doc_id: str) -> str:
    """An id for a message: its repr, cut to 80 characters."""
    text = repr(doc_id)
    return text if len(text) <= 80 else text[:77] + "..."


def doc_id_problem(value: object) -> str | None:
    """Why ``value`` is not a valid doc id (a phrase starting with ``doc_id``), or None."""
    if value is not None and not isinstance(value, str):
        return f"doc_id must be a string, not {type(value).__name__}"
    if value is None or not value.strip():
        return "doc_id must be a non-empty string"
    if len(value) > MAX_DOC_ID_CHARS:
        return f"doc_id {shown(value)} is {len(value)} characters long, over the limit of {MAX_DOC_ID_CHARS}"
    if value != value.strip():
        return f"doc_id {shown(value)} has whitespace at its start or end"
    for ch in value:
        if unicodedata.category(ch) in _FORBIDDEN_CATEGORIES:
            name = unicodedata.name(ch, "") if unicodedata.category(ch) != "Cs" else "a lone surrogate"
            label = f"U+{ord(ch):04X}" + (f" ({name.lower()})" if name else "")
            return f"doc_id {shown(value)} holds the control or invisible character {label}"
        if ch in _FORBIDDEN_CHARACTERS:
            return f"doc_id {shown(value)} holds a quote or backslash ({ch!r})"
    for substring in _FORBIDDEN_SUBSTRINGS:
        if substring in value:
            return f"doc_id {shown(value)} holds {substring!r}, which a partition key cannot hold"
    return None
