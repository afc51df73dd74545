"""Datasets on disk: a corpus, optional recorded extractions, optional question files.

A dataset directory holds

- ``corpus.jsonl``: one document per line, ``{doc_id, title, text}`` and optionally
  ``retention_until`` (ISO date) and ``source``;
- ``extractions.jsonl`` (optional): recorded extraction output per document,
  ``{doc_id, model?, entities: [{name, type, description}], facts: [[s, p, o, evidence?]]}``;
- ``questions*.jsonl`` (optional): ``{qid, question, answer, answer_aliases, gold_doc_ids}``.

Malformed input is refused with the file, line and reason before anything is written.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Iterator

CORPUS_FILE = "corpus.jsonl"
EXTRACTIONS_FILE = "extractions.jsonl"


class DatasetError(ValueError):
    """A dataset file that cannot be read as the documented layout."""


@dataclass(frozen=True)
class Document:
    doc_id: str
    title: str
    text: str
    retention_until: dt.date | None = None
    source: str = ""


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


def parse_json_lines(lines: Iterable[str], where: str) -> Iterator[tuple[int, object]]:
    """(line number, value) of every non-blank JSON line; a DatasetError names the bad line."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as err:
            raise DatasetError(f"{where}:{number}: not valid JSON ({err.msg})") from err


def _json_lines(path: Path) -> Iterator[tuple[int, object]]:
    with path.open(encoding="utf-8") as handle:
        yield from parse_json_lines(handle, str(path))


def parse_document(row: object, where: str = "document") -> Document:
    """One document from its JSON object, or a DatasetError saying what is wrong with it."""
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(row).__name__}")
    doc_id = row.get("doc_id")
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise DatasetError(f"{where}: doc_id must be a non-empty string")
    if doc_id != doc_id.strip() or any(ch in doc_id for ch in "\n\r\t'\"\\"):
        raise DatasetError(f"{where}: doc_id {doc_id!r} has surrounding space, quotes or control characters")
    text = row.get("text")
    if not isinstance(text, str) or not text.strip():
        raise DatasetError(f"{where}: document {doc_id!r} has no text")
    title = row.get("title") or ""
    if not isinstance(title, str):
        raise DatasetError(f"{where}: document {doc_id!r} has a title that is not a string")
    retention = row.get("retention_until")
    retention_date = None
    if retention not in (None, ""):
        try:
            retention_date = dt.date.fromisoformat(str(retention)[:10])
        except ValueError as err:
            raise DatasetError(
                f"{where}: document {doc_id!r} has retention_until {retention!r}, not an ISO date"
            ) from err
    source = row.get("source") or ""
    return Document(doc_id=doc_id, title=title.strip(), text=text, retention_until=retention_date, source=str(source))


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
    """Recorded extraction output by doc_id (raw; validated by :mod:`lightfoot_pipeline.ingest.records`)."""
    path = Path(dataset_dir) / EXTRACTIONS_FILE
    if not path.exists():
        return {}
    records: dict[str, dict] = {}
    for number, row in _json_lines(path):
        if not isinstance(row, dict) or not isinstance(row.get("doc_id"), str):
            raise DatasetError(f"{path}:{number}: expected an object with a string doc_id")
        if row["doc_id"] in records:
            raise DatasetError(f"{path}:{number}: a second extraction for {row['doc_id']!r}")
        records[row["doc_id"]] = row
    return records


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
