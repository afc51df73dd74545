"""Name normalisation: the one function that decides when two spellings are the same name.

The rules, applied in order (every step is deterministic and locale-independent):

1. Unicode NFKC (full-width letters, ligatures and compatibility forms fold to their plain form).
2. Typographic quotes and dashes become ASCII (``’`` -> ``'``, ``–``/``—`` -> ``-``).
3. Case folding (``str.casefold``, stronger than lower-casing: ``ß`` -> ``ss``).
4. Spaces around hyphens and slashes are removed (MuSiQue writes ``person - centered``).
5. Runs of whitespace become one space.
6. Punctuation and whitespace at either end are stripped, except closing brackets that close
   something, and a trailing ``%``, ``+`` or ``#`` (``"U.S."`` -> ``u.s``, ``"Paris,"`` ->
   ``paris``, ``"C++"`` -> ``c++``).
7. A leading English article is kept: ``the beatles`` and ``beatles`` stay distinct names and
   are joined, if at all, by embedding similarity, not by rule.

A name that is empty after these steps is not a name and produces no form.
"""

from __future__ import annotations

import re
import unicodedata

_TRANSLATE = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u2033": '"',
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2015": "-",
        "\u2212": "-",
        "\u00a0": " ",
    }
)
_JOINER_SPACES = re.compile(r"\s*([-/])\s*")
_WHITESPACE = re.compile(r"\s+")
_EDGE_PUNCTUATION = "\"'`.,;:!?*_~-/\\|<>([{"


def normalise_name(raw: str) -> str:
    """The normalised form of a name; ``""`` when nothing of a name remains."""
    text = unicodedata.normalize("NFKC", raw).translate(_TRANSLATE).casefold()
    text = _JOINER_SPACES.sub(r"\1", text)
    text = _WHITESPACE.sub(" ", text).strip()
    text = text.lstrip(_EDGE_PUNCTUATION + ")]} ")
    text = text.rstrip(_EDGE_PUNCTUATION + " ")
    return _balance_trailing_brackets(text)


def _balance_trailing_brackets(text: str) -> str:
    """Drop closing brackets at the end that close nothing (``"paris)"`` -> ``paris``)."""
    pairs = {")": "(", "]": "[", "}": "{"}
    while text and text[-1] in pairs and text.count(text[-1]) > text.count(pairs[text[-1]]):
        text = text[:-1].rstrip()
    return text


def normalise_type(raw: object, allowed: tuple[str, ...] | None = None, generic: str = "entity") -> str:
    """An entity type: lower-case, one word; unknown or missing types are the generic type."""
    if not isinstance(raw, str) or not raw.strip():
        return generic
    value = _WHITESPACE.sub("_", unicodedata.normalize("NFKC", raw).strip().casefold())
    if allowed is not None and value not in allowed:
        return generic
    return value


def normalise_predicate(raw: str) -> str:
    """A fact predicate: NFKC, ASCII punctuation, case-folded, single-spaced."""
    text = unicodedata.normalize("NFKC", raw).translate(_TRANSLATE).casefold()
    return _WHITESPACE.sub(" ", text).strip(" .,;:")


def clean_surface(raw: str) -> str:
    """A name as written, only trimmed and single-spaced: what the index shows to people."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", raw)).strip()
