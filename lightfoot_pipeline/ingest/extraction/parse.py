"""Tolerant parsing of a model's extraction answer into a validated record.

Models wrap, pad, cut and bend the requested JSON in known ways. Each is repaired when the repair
is unambiguous and recorded as an issue on the record (``repaired record …``):

- code fences (```json … ```) and prose before or after the object;
- an answer cut short (the token limit): open strings, arrays and objects are closed, and the
  incomplete last item (an entity or fact that was being written) is dropped;
- malformed JSON further in (a missing comma, a stray token): what came before the fault is kept;
- trailing commas, single-quoted strings and Python literals (``True``, ``None``);
- wrong shapes: entities as ``[name, type, description]`` arrays or as a ``{name: type}`` map,
  facts as ``{subject, predicate, object, evidence}`` objects, capitalised or synonymous keys;
- an answer far longer than any valid one (it is cut before parsing);
- descriptions over the word limit (cut to it).

Then :func:`lightfoot_pipeline.ingest.records.validate_record` checks the record against the passage
(entity and fact limits, types, evidence quotes). An answer with no JSON object at all, or one with
neither entities nor facts, is unusable: the result says why, and the caller records the passage
as failed with that reason and the raw answer; so is one that broke off (cut short or malformed)
before its first complete entity or fact. Parsing never raises on any input.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from lightfoot_pipeline.ingest.records import Issue, ValidatedRecord, validate_record
from lightfoot_pipeline.settings import MAX_ENTITIES_PER_PASSAGE, MAX_FACTS_PER_PASSAGE

# About 20 times the longest valid answer (12 entities and 12 facts at their word limits).
MAX_ANSWER_CHARS = 32_000
# Items of the entities and facts arrays sit at depth 2; an incomplete one there is dropped.
_ITEM_DEPTH = 2

_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\r?\n?(.*?)(?:```|\Z)", re.DOTALL)
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_LITERALS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}

_CUT_REASONS = ("truncated JSON closed", "malformed JSON cut at the fault")
_ENTITY_KEYS = ("entities", "entity", "nodes", "named_entities")
_FACT_KEYS = ("facts", "fact", "triples", "triplets", "relations", "relationships", "edges")
_FACT_FIELDS = (
    ("subject", "head", "source", "s"),
    ("predicate", "relation", "relationship", "p", "verb"),
    ("object", "tail", "target", "o"),
    ("evidence", "quote", "evidence_quote", "support"),
)


@dataclass
class ParsedAnswer:
    """A validated record, or why the answer could not be used."""

    record: ValidatedRecord | None = None
    reason: str = ""
    issues: list[Issue] = field(default_factory=list)  # repairs made before validation

    @property
    def ok(self) -> bool:
        return self.record is not None


def parse_answer(
    text: str | None,
    passage_text: str | None = None,
    *,
    entity_types: tuple[str, ...] | None = None,
    max_entities: int | None = MAX_ENTITIES_PER_PASSAGE,
    max_facts: int | None = MAX_FACTS_PER_PASSAGE,
    description_words: int | None = None,
    truncated: bool = False,
    max_chars: int = MAX_ANSWER_CHARS,
) -> ParsedAnswer:
    """Parse and validate one answer. ``truncated``: the endpoint said it stopped at the token limit."""
    issues: list[Issue] = []
    try:
        data = _extract_object(text, issues, truncated, max_chars)
    except RecursionError:
        return ParsedAnswer(reason="unusable answer: JSON nested too deeply", issues=issues)
    if isinstance(data, str):
        return ParsedAnswer(reason=f"unusable answer: {data}", issues=issues)
    data = _normalise_shape(data, issues, description_words)
    if "entities" not in data and "facts" not in data:
        keys = ", ".join(sorted(str(k) for k in data)[:5]) or "none"
        return ParsedAnswer(reason=f"unusable answer: an object with neither entities nor facts (keys: {keys})",
                            issues=issues)
    record = validate_record(data, passage_text, entity_types=entity_types, max_entities=max_entities,
                             max_facts=max_facts, evidence_fourth=True)
    cut = [i.reason for i in issues if i.reason in _CUT_REASONS]
    if cut and not record.entities and not record.facts:
        # Not an empty extraction: the answer broke off before its first complete item.
        return ParsedAnswer(reason=f"unusable answer: {cut[0]} before any complete entity or fact", issues=issues)
    record.issues[:0] = issues
    return ParsedAnswer(record=record, issues=issues)


# -- finding the object ---------------------------------------------------------------------


def _extract_object(text: str | None, issues: list[Issue], truncated: bool, max_chars: int) -> dict | str:
    """The answer's JSON object, or a string saying why there is none."""
    if text is None or not text.strip():
        return "empty answer"
    if len(text) > max_chars:
        issues.append(Issue("repaired", "record", "answer too long, cut", f"{len(text)} characters, kept {max_chars}"))
        text = text[:max_chars]
        truncated = True
    fenced = [m.group(1) for m in _FENCE.finditer(text) if "{" in m.group(1)]
    if fenced:
        issues.append(Issue("repaired", "record", "code fence removed"))
        text = fenced[0]
    starts = [m.start() for m in re.finditer(r"\{", text)][:8]
    if not starts:
        return "no JSON object in the answer"
    decoder = json.JSONDecoder()
    fallback: dict | None = None
    for start in starts:
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            value = _read_leniently(text, start, issues, truncated)
            if value is not None:
                return value
            continue
        if isinstance(value, dict):
            if _has_record_keys(value):
                _note_prose(text, start, end, issues)
                return value
            fallback = fallback if fallback is not None else value
    return fallback if fallback is not None else "no JSON object in the answer"


def _has_record_keys(value: dict) -> bool:
    return any(str(k).strip().casefold() in _ENTITY_KEYS + _FACT_KEYS for k in value)


def _read_leniently(text: str, start: int, issues: list[Issue], truncated: bool) -> dict | None:
    """The object starting at ``start``, read past faults and early ends; None if not a record."""
    reader = _LenientReader(text, start)
    value, complete = reader.value(0)
    if not isinstance(value, dict) or not _has_record_keys(value):
        return None
    if not complete:
        if reader.fault is None:
            detail = "the endpoint stopped at its token limit" if truncated else "the answer ends mid-object"
            issues.append(Issue("repaired", "record", "truncated JSON closed", detail))
        else:
            issues.append(Issue("repaired", "record", "malformed JSON cut at the fault", reader.fault))
    elif reader.lenient:
        issues.append(Issue("repaired", "record", "non-standard JSON read", ", ".join(sorted(reader.lenient))))
    _note_prose(text, start, reader.pos if complete else len(text), issues)
    return value


def _note_prose(text: str, start: int, end: int, issues: list[Issue]) -> None:
    if text[:start].strip():
        issues.append(Issue("repaired", "record", "prose before JSON", text[:start].strip()[:80]))
    if text[end:].strip():
        issues.append(Issue("repaired", "record", "prose after JSON", text[end:].strip()[:80]))


class _LenientReader:
    """A JSON reader that keeps what it could read when the text ends early or goes wrong.

    ``value(depth)`` returns ``(value, complete)``. An incomplete container is kept with its
    incomplete last member dropped, except at item depth (an entity or a fact), where the whole
    incomplete item is dropped by its parent.
    """

    def __init__(self, text: str, pos: int) -> None:
        self.text = text
        self.pos = pos
        self.fault: str | None = None  # where and why reading stopped, if not at the end
        self.lenient: set[str] = set()

    def _skip(self) -> None:
        n = len(self.text)
        while self.pos < n and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def _stop(self, why: str) -> None:
        if self.fault is None:
            self.fault = f"{why} at character {self.pos}"
        self.pos = len(self.text)

    def _at_end(self) -> bool:
        self._skip()
        return self.pos >= len(self.text)

    def value(self, depth: int) -> tuple[object, bool]:
        if self._at_end():
            return None, False
        ch = self.text[self.pos]
        if ch == "{":
            return self._object(depth)
        if ch == "[":
            return self._array(depth)
        if ch in "\"'":
            return self._string()
        match = _NUMBER.match(self.text, self.pos)
        if match:
            self.pos = match.end()
            # A number at the very end may have been cut mid-digits.
            complete = self.pos < len(self.text)
            number = match.group()
            return (float(number) if any(c in number for c in ".eE") else int(number)), complete
        for word, literal in _LITERALS.items():
            if self.text.startswith(word, self.pos):
                if word[0].isupper():
                    self.lenient.add("Python literals")
                self.pos += len(word)
                return literal, True
        self._stop(f"unexpected {ch!r}")
        return None, False

    def _string(self) -> tuple[object, bool]:
        quote = self.text[self.pos]
        if quote == "'":
            self.lenient.add("single quotes")
        i = self.pos + 1
        n = len(self.text)
        while i < n:
            c = self.text[i]
            if c == "\\":
                i += 2
                continue
            if c == quote:
                body = self.text[self.pos + 1 : i]
                self.pos = i + 1
                if quote == "'":
                    body = body.replace('\\"', '"').replace("\\'", "'").replace('"', '\\"')
                try:
                    return json.loads(f'"{body}"'), True
                except json.JSONDecodeError:
                    # Raw control characters or a bad escape: keep the text as written.
                    return body.replace("\\n", "\n").replace('\\"', '"'), True
            i += 1
        self.pos = n
        return None, False

    def _object(self, depth: int) -> tuple[object, bool]:
        self.pos += 1
        result: dict = {}
        while True:
            if self._at_end():
                return result, False
            ch = self.text[self.pos]
            if ch == "}":
                self.pos += 1
                return result, True
            if ch == ",":
                self.pos += 1
                if not self._at_end() and self.text[self.pos] == "}":
                    self.lenient.add("trailing comma")
                continue
            if ch not in "\"'":
                self._stop(f"expected a key, found {ch!r}")
                return result, False
            key, complete = self._string()
            if not complete:
                return result, False
            if self._at_end():
                return result, False
            if self.text[self.pos] != ":":
                self._stop(f"expected ':' after key {key!r}")
                return result, False
            self.pos += 1
            value, complete = self.value(depth + 1)
            if complete or (isinstance(value, (dict, list)) and depth + 1 < _ITEM_DEPTH):
                result[str(key)] = value
            if not complete:
                return result, False
            if not self._at_end() and self.text[self.pos] not in ",}":
                self._stop(f"expected ',' or '}}', found {self.text[self.pos]!r}")
                return result, False

    def _array(self, depth: int) -> tuple[object, bool]:
        self.pos += 1
        result: list = []
        while True:
            if self._at_end():
                return result, False
            ch = self.text[self.pos]
            if ch == "]":
                self.pos += 1
                return result, True
            if ch == ",":
                self.pos += 1
                if not self._at_end() and self.text[self.pos] == "]":
                    self.lenient.add("trailing comma")
                continue
            value, complete = self.value(depth + 1)
            if complete or (isinstance(value, (dict, list)) and depth + 1 < _ITEM_DEPTH):
                result.append(value)
            if not complete:
                return result, False
            if not self._at_end() and self.text[self.pos] not in ",]":
                self._stop(f"expected ',' or ']', found {self.text[self.pos]!r}")
                return result, False


# -- shape ------------------------------------------------------------------------------------


def _normalise_shape(data: dict, issues: list[Issue], description_words: int | None) -> dict:
    """Bring known near-misses of the schema to its shape; leave the rest to validation."""
    folded = {str(k).strip().casefold(): v for k, v in data.items()}
    out: dict = {}
    for wanted, aliases in (("entities", _ENTITY_KEYS), ("facts", _FACT_KEYS)):
        for alias in aliases:
            if alias in folded:
                if alias != wanted or wanted not in data:
                    issues.append(Issue("repaired", "record", f"{wanted} under another key", alias))
                out[wanted] = folded[alias]
                break
    if "entities" in out:
        out["entities"] = _entities(out["entities"], issues, description_words)
    if "facts" in out:
        out["facts"] = _facts(out["facts"], issues)
    return out


def _entities(value: object, issues: list[Issue], description_words: int | None) -> object:
    if isinstance(value, dict):
        issues.append(Issue("repaired", "record", "entities as a map of name to type"))
        value = [{"name": k, "type": v if isinstance(v, str) else None} for k, v in value.items()]
    if not isinstance(value, list):
        return value
    items = []
    for item in value:
        if isinstance(item, list) and 1 <= len(item) <= 3:
            issues.append(Issue("repaired", "entity", "array instead of object", repr(item)[:80]))
            item = dict(zip(("name", "type", "description"), item, strict=False))  # a short list gets what it has
        if isinstance(item, dict):
            item = {str(k).strip().casefold(): v for k, v in item.items()}
            for alias in ("entity", "entity_name", "text"):
                if "name" not in item and alias in item:
                    item["name"] = item[alias]
            if "type" not in item and "entity_type" in item:
                item["type"] = item["entity_type"]
            description = item.get("description")
            if description_words and isinstance(description, str) and len(description.split()) > description_words:
                issues.append(Issue("repaired", "entity", "description over the word limit", description[:80]))
                item["description"] = " ".join(description.split()[:description_words])
        items.append(item)
    return items


def _facts(value: object, issues: list[Issue]) -> object:
    if not isinstance(value, list):
        return value
    items = []
    for item in value:
        if isinstance(item, dict):
            folded = {str(k).strip().casefold(): v for k, v in item.items()}
            parts = []
            for names in _FACT_FIELDS:
                found = next((folded[n] for n in names if n in folded), None)
                if found is not None:
                    parts.append(found)
                elif names[0] != "evidence":
                    parts = None
                    break
            if parts is not None:
                issues.append(Issue("repaired", "fact", "object instead of array", repr(item)[:80]))
                item = parts
        items.append(item)
    return items
