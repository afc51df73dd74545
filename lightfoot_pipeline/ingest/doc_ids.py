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

A synced file's doc id is its source's name and its path within the source, ``NAME:PATH``
(:func:`file_doc_id`). Any name a file system allows gets one: what the rule forbids is written
as ``%XX``, the percent-escapes of its UTF-8 bytes (a byte of a name that is not UTF-8 as that
byte), and so is ``%`` itself, so the escape is undone by :func:`file_path_of`. Escaped are
quotes, backslashes, control and invisible characters, whitespace at the end, and every third
dot of a run (``...`` becomes ``..%2E``); a source's name escapes ``:`` as well, so no two
sources' ids can meet.
"""

from __future__ import annotations

import os
import re
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


def _escaped(ch: str) -> str:
    """``ch`` as percent-escapes of its bytes (a surrogate-escaped byte as that byte)."""
    return "".join(f"%{b:02X}" for b in os.fsencode(ch)) if 0xDC80 <= ord(ch) <= 0xDCFF else \
        "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


# What an ASCII text may hold that escape_for_doc_id escapes: ``%``, quotes, backslash, controls,
# three dots, whitespace at the end.
_ASCII_TO_ESCAPE = re.compile(r"""[%'"\\\x00-\x1f\x7f]|\.\.\.|\s\Z""")


def escape_for_doc_id(text: str, also: str = "") -> str:
    """``text`` (a file path as :func:`os.fsdecode` gives it) with what a doc id cannot hold
    percent-escaped, and ``%`` and the characters of ``also``; :func:`unescape_doc_id` undoes it."""
    if text.isascii() and not _ASCII_TO_ESCAPE.search(text) and not any(ch in text for ch in also):
        return text  # the common case, without a look at each character
    out: list[str] = []
    dots = 0
    end = len(text.rstrip())
    for i, ch in enumerate(text):
        if ch == ".":
            dots += 1
            if dots == 3:
                out.append("%2E")
                dots = 0
                continue
        else:
            dots = 0
        if (ch == "%" or ch in also or ch in _FORBIDDEN_CHARACTERS or i >= end
                or unicodedata.category(ch) in _FORBIDDEN_CATEGORIES):
            out.append(_escaped(ch))
        else:
            out.append(ch)
    return "".join(out)


_PERCENT = re.compile(r"(?:%[0-9A-F]{2})+")


def unescape_doc_id(text: str) -> str:
    """The text :func:`escape_for_doc_id` escaped (bytes that are not UTF-8 surrogate-escaped)."""
    return _PERCENT.sub(lambda m: os.fsdecode(bytes.fromhex(m.group(0).replace("%", ""))), text)


def file_doc_id(source_name: str, path: str) -> str:
    """The doc id of the file at ``path`` (``/``-separated, relative to its source) of the source
    named ``source_name`` (a name :func:`source_name_problem` accepts)."""
    return f"{source_name}:{escape_for_doc_id(path)}"


def file_path_of(doc_id: str) -> tuple[str, str]:
    """The source name and the path of a synced file's doc id: :func:`file_doc_id` undone."""
    name, _, path = doc_id.partition(":")
    return unescape_doc_id(name), unescape_doc_id(path)


def default_source_name(folder: str) -> str:
    """A source's name when none is given: its folder's (or prefix's) last part, escaped; "" for a root."""
    return escape_for_doc_id(folder.rstrip("/").rsplit("/", 1)[-1], also=":/")


def source_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a source (the ``NAME`` of ``NAME:PATH``), or None."""
    if not isinstance(name, str) or not name:
        return "a source's name must be a non-empty string"
    if len(name) > 64:
        return f"the source name {shown(name)} is over 64 characters long"
    if ":" in name or "/" in name:
        return f"the source name {shown(name)} holds ':' or '/'"
    problem = doc_id_problem(name)
    if problem is not None:
        return "the source name" + problem.removeprefix("doc_id")
    return None
