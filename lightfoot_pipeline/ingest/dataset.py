"""Datasets on disk: a corpus, optional recorded extractions, optional question files.

A dataset directory holds

- ``corpus.jsonl``: one document per line, ``{doc_id, title, text}`` and optionally
  ``retention_until`` (an ISO 8601 date, see :func:`lightfoot_pipeline.ingest.retention.parse_retention_date`),
  ``source`` and ``readers`` (the groups that may read it: a list of group names or one
  comma-separated string, see :mod:`lightfoot_pipeline.ingest.readers`; ``[]`` is nobody);
- ``extractions.jsonl`` (optional): recorded extraction output per document,
  ``{doc_id, model?, chunk_ordinal?, entities: [{name, type, description}], facts: [[s, p, o, evidence?]]}``;
- ``questions*.jsonl`` (optional): ``{qid, question, answer, answer_aliases, gold_doc_ids}``.

Files are UTF-8, one JSON value per line. A line that cannot be read (bytes that are not UTF-8,
invalid JSON, JSON nested deeper than MAX_JSON_DEPTH, a value that is not an object, a field of
the wrong type, a doc id against the rule of :mod:`lightfoot_pipeline.ingest.doc_ids`, readers that are
not group names) is refused with
the file, line and reason before anything is written. The content of an extraction record
(its entities and facts) is checked later, leniently, by :mod:`lightfoot_pipeline.ingest.records`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.ingest.chunking import Chunk
from lightfoot_pipeline.ingest.doc_ids import doc_id_problem
from lightfoot_pipeline.ingest.readers import ReadersError, parse_groups
from lightfoot_pipeline.ingest.retention import parse_retention_date

CORPUS_FILE = "corpus.jsonl"
EXTRACTIONS_FILE = "extractions.jsonl"
# Documents and extraction records are a few levels deep; anything far deeper is not one of them,
# and would overflow the stack of code that walks it.
MAX_JSON_DEPTH = 32


class DatasetError(LightfootError, ValueError):
    """A dataset file that cannot be read as the documented layout."""

    hint = 'correct it (a dataset\'s layout is in the README, "The index and exact deletion")'


@dataclass(frozen=True)
class Document:
    doc_id: str
    title: str
    text: str
    retention_until: dt.date | None = None
    source: str = ""
    # The groups that may read it, sorted (ingest/readers.py; () is nobody). None: the input named
    # none, and ingesting it resolves them (a new document gets the default, a stored one keeps its own).
    readers: tuple[str, ...] | None = None
    # A file's passages as chunking.py cut them (with their locations); empty for a corpus line,
    # whose text is split by passages.py.
    chunks: tuple[Chunk, ...] = ()


@dataclass(frozen=True)
class Question:
    qid: str
    question: str
    answer: str
    answer_aliases: tuple[str, ...] = ()
    gold_doc_ids: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict, compare=False)


def bundled_sample_dir() -> Path:
    """The MuSiQue sample shipped inside the package: the embedded default dataset."""
    return Path(str(resources.files("lightfoot_pipeline") / "data" / "musique-sample"))


def parse_json_lines(lines: Iterable[str | bytes], where: str) -> Iterator[tuple[int, object]]:
    """(line number, value) of every non-blank JSON line; a DatasetError names the bad line and why.

    Lines given as bytes (a file opened in binary mode, or ``data.split(b"\\n")``) are decoded as
    UTF-8 one at a time, so bytes that are not UTF-8 are reported at their line.
    """
    for number, line in enumerate(lines, start=1):
        if isinstance(line, bytes):
            line = _decode(line, f"{where}:{number}", first=number == 1)
        if not line.strip():
            continue
        yield number, parse_json_value(line, f"{where}:{number}")


def text_lines(data: bytes, where: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line of UTF-8 bytes; a DatasetError names a line that is not UTF-8."""
    for number, raw in enumerate(data.split(b"\n"), start=1):
        yield number, _decode(raw.rstrip(b"\r"), f"{where}:{number}", first=number == 1)


def parse_json_value(text: str | bytes, where: str) -> object:
    """One JSON value, or a DatasetError saying where (``where``, and the line within a text of
    several lines) and why it cannot be read."""
    if isinstance(text, bytes):
        text = _decode(text, where, first=True)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        at = f"line {err.lineno} column {err.colno}" if "\n" in text.strip() else f"column {err.colno}"
        raise DatasetError(f"{where}: not valid JSON ({err.msg} at {at})") from err
    except RecursionError as err:
        raise DatasetError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from err
    if _depth_over(value, MAX_JSON_DEPTH):
        raise DatasetError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def _decode(data: bytes, where: str, first: bool) -> str:
    """UTF-8 bytes as text (a leading byte-order mark dropped when ``first``)."""
    try:
        return data.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as err:
        line_start = data.rfind(b"\n", 0, err.start) + 1
        at = f"byte {err.start - line_start + 1}"
        if b"\n" in data.rstrip(b"\r\n"):
            line = data.count(b"\n", 0, err.start) + 1
            at = f"line {line}, {at}"
        raise DatasetError(f"{where}: not valid UTF-8 (byte 0x{data[err.start]:02x} at {at})") from err


def _depth_over(value: object, limit: int) -> bool:
    """Whether arrays and objects nest deeper than ``limit`` in ``value`` (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _json_lines(path: Path) -> Iterator[tuple[int, object]]:
    with path.open("rb") as handle:
        yield from parse_json_lines(handle, str(path))


def parse_document(row: object, where: str = "document") -> Document:
    """One document from its JSON object, or a DatasetError saying what is wrong with it."""
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {_json_type(row)}")
    doc_id = row.get("doc_id")
    if problem := doc_id_problem(doc_id):
        raise DatasetError(f"{where}: {problem}")
    text = row.get("text")
    if text is not None and not isinstance(text, str):
        raise DatasetError(f"{where}: document {doc_id!r} has a text that is not a string ({_json_type(text)})")
    if text is None or not text.strip():
        raise DatasetError(f"{where}: document {doc_id!r} has no text")
    title = row.get("title") or ""
    if not isinstance(title, str):
        raise DatasetError(f"{where}: document {doc_id!r} has a title that is not a string ({_json_type(title)})")
    retention = row.get("retention_until")
    retention_date = None
    if retention not in (None, ""):
        try:
            retention_date = parse_retention_date(retention)
        except ValueError as err:
            raise DatasetError(f"{where}: document {doc_id!r} has retention_until {err}") from err
    source = row.get("source") or ""
    if not isinstance(source, str):
        raise DatasetError(f"{where}: document {doc_id!r} has a source that is not a string ({_json_type(source)})")
    readers = row.get("readers")
    groups = None
    if readers is not None:
        try:
            groups = parse_groups(readers, f"{where}: document {doc_id!r} has readers")
        except ReadersError as err:
            raise DatasetError(str(err)) from err
    return Document(doc_id=doc_id, title=title.strip(), text=text, retention_until=retention_date, source=source,
                    readers=groups)


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "true or false", type(None): "null"}
    return names.get(type(value), "a number")


def load_corpus(dataset_dir: Path | str) -> list[Document]:
    path = Path(dataset_dir) / CORPUS_FILE
    if not path.exists():
        raise DatasetError(f"{path}: no corpus file")
    documents: list[Document] = []
    seen: dict[str, int] = {}
    for number, row in _json_lines(path):
        doc = parse_document(row, where=f"{path}:{number}")
        if doc.doc_id in seen:
            raise DatasetError(f"{path}:{number}: doc_id {doc.doc_id!r} already on line {seen[doc.doc_id]}")
        seen[doc.doc_id] = number
        documents.append(doc)
    return documents


def load_recorded_extractions(dataset_dir: Path | str) -> dict[str, dict]:
    """Recorded extraction output by doc_id (content validated later by :mod:`lightfoot_pipeline.ingest.records`)."""
    path = Path(dataset_dir) / EXTRACTIONS_FILE
    if not path.exists():
        return {}
    return parse_recorded_extractions(_json_lines(path), str(path))


def parse_recorded_extractions(rows: Iterable[tuple[int, object]], where: str) -> dict[str, dict]:
    """Extraction records by doc_id from (line number, value) pairs, one record per document."""
    records: dict[str, dict] = {}
    for number, row in rows:
        at = f"{where}:{number}"
        if not isinstance(row, dict):
            raise DatasetError(f"{at}: expected an extraction record (a JSON object), got {_json_type(row)}")
        if problem := doc_id_problem(row.get("doc_id")):
            raise DatasetError(f"{at}: {problem}")
        ordinal = row.get("chunk_ordinal", 0)
        if not isinstance(ordinal, int) or isinstance(ordinal, bool) or ordinal < 0:
            raise DatasetError(f"{at}: chunk_ordinal must be a whole number from 0, not {ordinal!r}")
        if "model" in row and not isinstance(row["model"], str):
            raise DatasetError(f"{at}: model must be a string, not {_json_type(row['model'])}")
        if row["doc_id"] in records:
            raise DatasetError(f"{at}: a second extraction for {row['doc_id']!r}")
        records[row["doc_id"]] = row
    return records


def unmatched_records(records: Mapping[str, dict | list], passages: Sequence) -> Counter:
    """How many recorded extractions match no passage, by reason.

    ``passages`` are the passages being ingested (anything with ``doc_id`` and ``ordinal``). A
    record applies to the passage of its document with its ``chunk_ordinal`` (0 when absent), as
    the replay extractor reads it; the others are ignored, and counted here.
    """
    ordinals: dict[str, set[int]] = {}
    for passage in passages:
        ordinals.setdefault(passage.doc_id, set()).add(passage.ordinal)
    ignored: Counter = Counter()
    for doc_id, value in records.items():
        for record in value if isinstance(value, list) else [value]:
            ordinal = record.get("chunk_ordinal", 0) if isinstance(record, dict) else 0
            if doc_id not in ordinals:
                ignored["unknown document"] += 1
            elif ordinal not in ordinals[doc_id]:
                ignored["no passage with its chunk_ordinal"] += 1
    return ignored


def has_recorded_extractions(dataset_dir: Path | str) -> bool:
    return (Path(dataset_dir) / EXTRACTIONS_FILE).exists()


def load_questions(path: Path | str) -> list[Question]:
    path = Path(path)
    questions: list[Question] = []
    for number, row in _json_lines(path):
        if not isinstance(row, dict) or not isinstance(row.get("question"), str):
            raise DatasetError(f"{path}:{number}: expected an object with a question")
        known = {"qid", "question", "answer", "answer_aliases", "gold_doc_ids"}
        questions.append(
            Question(
                qid=str(row.get("qid", number)),
                question=row["question"],
                answer=str(row.get("answer", "")),
                answer_aliases=tuple(str(a) for a in row.get("answer_aliases") or ()),
                gold_doc_ids=tuple(str(d) for d in row.get("gold_doc_ids") or ()),
                extra={k: v for k, v in row.items() if k not in known},
            )
        )
    return questions


def default_questions_file(dataset_dir: Path | str) -> Path | None:
    candidates = sorted(Path(dataset_dir).glob("questions*.jsonl"))
    return candidates[0] if candidates else None
