"""Numbers must agree: two names may link only when they carry the same numbers.

Embeddings place 'August 9, 1945' next to 'August 6, 1945' and the 35th Chess Olympiad next to
the 36th; a rule over the two names keeps them apart. A name's *number signature* is the set of
numbers it carries, written canonically, and two names agree when their signatures are equal: a
function of the two names alone, as the erasure invariant requires of a link. Equality is
transitive, so every entity (a connected component of links) has one signature.

What counts as a number, in a normalised (case-folded) name:

- digit runs, with thousands separators dropped and leading zeros ignored (``1,000`` = ``1000``,
  ``007`` = ``7``), decimals kept (``3.5``), an ordinal suffix ignored (``35th`` = ``35``) and a
  decade kept apart from its year (``1990s`` is not ``1990``);
- ordinal words (``first`` … ``twentieth``, ``thirtieth`` … ``hundredth``, compounds such as
  ``twenty-first``): ``first`` = ``1st`` = ``1``;
- roman numerals after the first word (``world war ii``, ``henry viii``, ``super bowl xlv``), up to
  ``lxxxix``; a one-letter numeral (``i``, ``v``, ``x``) only as the last word (``world war i``),
  since elsewhere it is more often a pronoun or an initial;
- month names and their abbreviations next to a number (``august 9``, ``9 aug``, ``may 1945``,
  ISO ``1945-08-09``): a date's month is one of its numbers, written ``m8``. A month word alone
  (``theresa may``, ``march``) is not a number.

Cardinal words (``one``, ``two``) are left alone: they are names' words far more often than
quantities (``one direction``, ``capital one``).
"""

from __future__ import annotations

import re
from functools import lru_cache

_MONTHS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7, "august": 8,
    "september": 9, "october": 10, "november": 11, "december": 12,
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9, "oct": 10,
    "nov": 11, "dec": 12,
}
_UNIT_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9,
}
_ORDINALS = {
    **_UNIT_ORDINALS, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14,
    "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18, "nineteenth": 19, "twentieth": 20,
    "thirtieth": 30, "fortieth": 40, "fiftieth": 50, "sixtieth": 60, "seventieth": 70, "eightieth": 80,
    "ninetieth": 90, "hundredth": 100,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_ROMAN = {"i": 1, "v": 5, "x": 10, "l": 50}
_ROMAN_FORM = re.compile(r"^(xl|l?x{0,3})(ix|iv|v?i{0,3})$")  # 1 .. 89, in standard form

# Words: digit groups with separators (1,000  3.5  35th  1990s) or runs of letters.
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*(?:st|nd|rd|th|s)?(?![a-z])|\d+|[a-z]+")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")


def _roman_value(word: str) -> int | None:
    if not word or not _ROMAN_FORM.match(word):
        return None
    total = 0
    for i, letter in enumerate(word):
        value = _ROMAN[letter]
        total += -value if i + 1 < len(word) and _ROMAN[word[i + 1]] > value else value
    return total


def _digit_number(token: str) -> str:
    """``1,000`` -> ``1000``, ``007`` -> ``7``, ``35th`` -> ``35``, ``3.50`` -> ``3.5``, ``1990s`` -> ``1990s``."""
    decade = token.endswith("s") and not token.endswith(("st", "nd", "rd", "th"))
    parts = re.sub(r"(st|nd|rd|th|s)$", "", token).replace(",", "").split(".")
    if len(parts) == 2:
        fraction = parts[1].rstrip("0")
        number = str(int(parts[0])) + (f".{fraction}" if fraction else "")
    else:
        number = ".".join(str(int(part)) for part in parts)
    return number + ("s" if decade else "")


@lru_cache(maxsize=1 << 16)
def number_signature(name: str) -> str:
    """The numbers a normalised name carries, sorted and space-separated; ``""`` when it has none."""
    numbers: set[str] = set()
    text = name.casefold()
    for year, month, day in _ISO_DATE.findall(text):
        if 1 <= int(month) <= 12:
            numbers.update({str(int(year)), f"m{int(month)}", str(int(day))})
    text = _ISO_DATE.sub(" ", text)
    words = _TOKEN.findall(text)
    is_digit = [w[0].isdigit() for w in words]
    skip = -1
    for i, word in enumerate(words):
        if i == skip:
            continue
        if is_digit[i]:
            numbers.add(_digit_number(word))
        elif word in _MONTHS and ((i > 0 and is_digit[i - 1]) or (i + 1 < len(words) and is_digit[i + 1])):
            numbers.add(f"m{_MONTHS[word]}")
        elif word in _TENS and i + 1 < len(words) and words[i + 1] in _UNIT_ORDINALS:
            numbers.add(str(_TENS[word] + _UNIT_ORDINALS[words[i + 1]]))
            skip = i + 1
        elif word in _ORDINALS:
            numbers.add(str(_ORDINALS[word]))
        elif i > 0 and (len(word) > 1 or (word in "ivx" and i == len(words) - 1)) and (value := _roman_value(word)) is not None:
            numbers.add(str(value))
    return " ".join(sorted(numbers))


def numbers_agree(a: str, b: str) -> bool:
    """Whether two names carry the same numbers (both none counts as the same)."""
    return number_signature(a) == number_signature(b)
