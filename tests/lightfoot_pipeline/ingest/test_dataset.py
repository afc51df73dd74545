import datetime as dt
import json
import subprocess
import sys
from collections import Counter

import pytest

from lightfoot_pipeline.ingest.dataset import (
    DatasetError,
    load_corpus,
    load_questions,
    load_recorded_extractions,
    unmatched_records,
)
from lightfoot_pipeline.ingest.passages import Passage


def test_bundled_sample_loads(sample_documents, sample_records, sample_dir):
    assert len(sample_documents) == 1890 and len(sample_records) == 1890
    questions = load_questions(sample_dir / "questions-dev.jsonl")
    assert len(questions) == 50 and all(q.gold_doc_ids for q in questions)


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"title": "t", "text": "x"}), "doc_id must be a non-empty string"),
        (json.dumps({"doc_id": "a", "text": "  "}), "has no text"),
        (json.dumps({"doc_id": "a", "text": "x", "retention_until": "soon"}), "not an ISO 8601 date"),
        (json.dumps({"doc_id": "a'b", "text": "x"}), "holds a quote or backslash"),
    ],
)
def test_malformed_documents_are_refused_with_line_and_reason(tmp_path, line, message):
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"doc_id": "ok", "text": "fine"}) + "\n" + line + "\n")
    with pytest.raises(DatasetError, match=message) as err:
        load_corpus(tmp_path)
    assert "corpus.jsonl:2" in str(err.value)


def test_duplicate_doc_ids_are_refused(tmp_path):
    row = json.dumps({"doc_id": "a", "text": "x"})
    (tmp_path / "corpus.jsonl").write_text(row + "\n" + row + "\n")
    with pytest.raises(DatasetError, match="already on line 1"):
        load_corpus(tmp_path)


def _corpus_with_second_line(tmp_path, second: bytes):
    (tmp_path / "corpus.jsonl").write_bytes(b'{"doc_id": "ok", "text": "fine"}\n' + second + b"\n")


@pytest.mark.parametrize(
    "second, message",
    [
        (b'{"doc_id": "b", "text": "caf\xe9"}', "not valid UTF-8 (byte 0xe9 at byte 29)"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON nested deeper than 32 levels"),
        (b'{"doc_id": "b", "text": "x", "source": ' + b"[" * 40 + b"]" * 40 + b"}", "nested deeper than 32 levels"),
        (b'["b", "text"]', "expected a JSON object, got an array"),
        (b'"just a string"', "expected a JSON object, got a string"),
        (b"42", "expected a JSON object, got a number"),
        (b'{"doc_id": 7, "text": "x"}', "doc_id must be a string, not int"),
        (b'{"doc_id": "b", "text": ["x"]}', "text that is not a string (an array)"),
        (b'{"doc_id": "b", "text": "x", "title": 3}', "title that is not a string (a number)"),
        (b'{"doc_id": "b", "text": "x", "source": {"a": 1}}', "source that is not a string (an object)"),
        (b'{"doc_id": "b", "text": "x", "retention_until": 20240101}', "20240101 is not a date"),
        (b'{"doc_id": "b", "text": "x", "retention_until": "2024-01-01 garbage"}', "not an ISO 8601 date"),
    ],
    ids=["utf8", "deep-recursion", "deep-walk", "array", "string", "number", "id-type", "text-type", "title-type",
         "source-type", "retention-type", "retention-garbage"],
)
def test_unreadable_corpus_lines_say_file_line_and_reason(tmp_path, second, message):
    _corpus_with_second_line(tmp_path, second)
    with pytest.raises(DatasetError) as err:
        load_corpus(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'corpus.jsonl'}:2: ")
    assert message in str(err.value)


def test_a_byte_order_mark_and_windows_line_ends_are_read(tmp_path):
    (tmp_path / "corpus.jsonl").write_bytes(
        b'\xef\xbb\xbf{"doc_id": "a", "text": "one"}\r\n\r\n{"doc_id": "b", "text": "two \xe2\x80\xa8 lines"}\r\n'
    )
    assert [(d.doc_id, d.text) for d in load_corpus(tmp_path)] == [("a", "one"), ("b", "two \u2028 lines")]


@pytest.mark.parametrize(
    "second, message",
    [
        (b'{"doc_id": "b", "entities": ["\xff"]}', "not valid UTF-8 (byte 0xff"),
        (b"{" * 3 + b"", "not valid JSON"),
        (b'{"doc_id": "b", "facts": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested deeper than 32 levels"),
        (b'[{"doc_id": "b"}]', "expected an extraction record (a JSON object), got an array"),
        (b'{"entities": []}', "doc_id must be a non-empty string"),
        (b'{"doc_id": "b", "chunk_ordinal": "first"}', "chunk_ordinal must be a whole number from 0"),
        (b'{"doc_id": "b", "chunk_ordinal": -1}', "chunk_ordinal must be a whole number from 0"),
        (b'{"doc_id": "b", "model": 5}', "model must be a string"),
        (b'{"doc_id": "a"}', "a second extraction for 'a'"),
    ],
    ids=["utf8", "json", "deep", "array", "no-id", "ordinal-type", "ordinal-negative", "model-type", "duplicate"],
)
def test_unreadable_extraction_record_lines_say_file_line_and_reason(tmp_path, second, message):
    (tmp_path / "extractions.jsonl").write_bytes(b'{"doc_id": "a", "entities": [], "facts": []}\n' + second + b"\n")
    with pytest.raises(DatasetError) as err:
        load_recorded_extractions(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'extractions.jsonl'}:2: ")
    assert message in str(err.value)


def test_retention_dates_are_read_strictly(tmp_path):
    rows = [{"doc_id": "date", "text": "x", "retention_until": "2026-06-30"},
            {"doc_id": "utc", "text": "x", "retention_until": "2026-06-30T23:30:00Z"},
            {"doc_id": "east", "text": "x", "retention_until": "2026-07-01T01:00+02:00"},
            {"doc_id": "west", "text": "x", "retention_until": "2026-06-30T20:00:00.5-05:00"},
            {"doc_id": "none", "text": "x"}]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    dates = {d.doc_id: d.retention_until for d in load_corpus(tmp_path)}
    assert dates == {"date": dt.date(2026, 6, 30), "utc": dt.date(2026, 6, 30), "east": dt.date(2026, 6, 30),
                     "west": dt.date(2026, 7, 1), "none": None}


def test_unmatched_records_are_counted_by_reason():
    passages = [Passage("c1", "a", 0, "", "x"), Passage("c2", "a", 1, "", "y"), Passage("c3", "b", 0, "", "z")]
    records = {"a": [{"chunk_ordinal": 0}, {"chunk_ordinal": 1}, {"chunk_ordinal": 5}], "b": {},
               "gone": {}, "also-gone": [{"chunk_ordinal": 0}, {"chunk_ordinal": 1}]}
    assert unmatched_records(records, passages) == Counter(
        {"unknown document": 3, "no passage with its chunk_ordinal": 1})
    assert unmatched_records({}, passages) == Counter()


@pytest.mark.slow
def test_the_command_line_reports_an_unreadable_corpus_without_a_traceback(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "corpus.jsonl").write_bytes(b'{"doc_id": "a", "text": "ok"}\n{"doc_id": "b", "text": "\xc3"}\n')
    done = subprocess.run([sys.executable, "-m", "lightfoot_pipeline.cli", "ingest", "--dataset", str(tmp_path / "bad"),
                           "--store", str(tmp_path / "s"), "--embedder", "hashing"], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"error: {tmp_path / 'bad' / 'corpus.jsonl'}:2: not valid UTF-8 (byte 0xc3 at byte 26); "
                                   f"{DatasetError.hint}")
    assert not (tmp_path / "s").exists()


def test_a_corpus_line_names_its_readers_as_a_list_or_a_comma_separated_string(tmp_path):
    lines = [{"doc_id": "a", "text": "x", "readers": ["Legal", "hr", "legal"]},
             {"doc_id": "b", "text": "x", "readers": "public, staff"},
             {"doc_id": "c", "text": "x", "readers": []},
             {"doc_id": "d", "text": "x"},
             {"doc_id": "e", "text": "x", "readers": ["Nobody"]}]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [d.readers for d in load_corpus(tmp_path)] == [("hr", "legal"), ("public", "staff"), (), None, ()]


@pytest.mark.parametrize("readers, message", [
    (["Legal Team"], r"'Legal Team' is not a group name"),
    ([3], "a reader group must be a string"),
    ({"legal": True}, "readers must be a list of group names"),
    (["*"], r"'\*' is a reserved word \(the operator, who reads every document\), not a group name"),
    (["nobody", "legal"], r"'nobody' means no reader and cannot be named beside 'legal'"),
])
def test_readers_that_are_not_group_names_are_refused_with_file_and_line(tmp_path, readers, message):
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"doc_id": "ok", "text": "fine"}) + "\n"
                                           + json.dumps({"doc_id": "a", "text": "x", "readers": readers}) + "\n")
    with pytest.raises(DatasetError, match=message) as err:
        load_corpus(tmp_path)
    assert "corpus.jsonl:2: document 'a' has readers" in str(err.value)
