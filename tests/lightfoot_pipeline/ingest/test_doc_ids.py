"""One rule for doc ids, checked the same way by every way in: datasets, inboxes, delete, retention."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from lightfoot_pipeline.cli import main
from lightfoot_pipeline.ingest.dataset import DatasetError, load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.doc_ids import MAX_DOC_ID_CHARS, doc_id_problem
from lightfoot_pipeline.ingest.inbox import Inbox
from lightfoot_pipeline.ingest.retention import PolicyError, RetentionPolicy

VALID = ["musique-0001", "a", "Report 2024/Q1 (final)", "naïve-café", "文書-7", "a..b", "x" * MAX_DOC_ID_CHARS]
INVALID = {
    "": "non-empty",
    "   ": "non-empty",
    " lead": "whitespace at its start or end",
    "trail\u00a0": "whitespace at its start or end",
    "nul\x00id": "U+0000",
    "esc\x1b[31mred": "U+001B",
    "tab\tid": "U+0009",
    "del\x7fid": "U+007F",
    "c1\x85id": "U+0085",
    "zero\u200bwidth": "U+200B",
    "bidi\u202eid": "U+202E",
    "line\u2028sep": "U+2028",
    "lone\ud800": "U+D800",
    "it's": "quote or backslash",
    'say "hi"': "quote or backslash",
    "back\\slash": "quote or backslash",
    "a...b": "'...'",
    "x" * (MAX_DOC_ID_CHARS + 1): "over the limit",
}


@pytest.mark.parametrize("doc_id", VALID)
def test_valid_ids(doc_id):
    assert doc_id_problem(doc_id) is None


@pytest.mark.parametrize("doc_id, reason", list(INVALID.items()), ids=[repr(k)[:20] for k in INVALID])
def test_invalid_ids_say_why(doc_id, reason):
    assert reason in doc_id_problem(doc_id)


@pytest.mark.parametrize("value", [None, 7, ["a"], {"a": 1}, True])
def test_ids_are_strings(value):
    assert doc_id_problem(value).startswith("doc_id must be a")


def dagster_refuses(key: str) -> bool:
    try:
        dg.StaticPartitionsDefinition([key])
    except dg.DagsterInvalidDefinitionError:
        return True
    return False


# Every ASCII character and the first of each other Unicode block of interest, alone and in an id,
# and the dotted runs Dagster reserves.
CANDIDATES = [f"doc{chr(c)}id" for c in [*range(128), 0x85, 0xA0, 0x200B, 0x2028, 0x2029, 0x202E, 0xFEFF]]
CANDIDATES += ["doc..id", "doc...id", "doc....id", *INVALID]


def test_the_rule_refuses_whatever_dagster_refuses_in_a_partition_key():
    # One test over every candidate (not one per candidate: a case Dagster accepts has nothing to
    # check). The probe must see Dagster refuse what it is known to refuse, or it checks nothing.
    refused = [key for key in CANDIDATES if dagster_refuses(key)]
    assert {"doc\x00id", "doc\nid", "doc...id"} <= set(refused)
    assert [key for key in refused if doc_id_problem(key) is None] == []


# -- every way in -------------------------------------------------------------------------------

ESC_ID = "esc\x1bid"
REASON = doc_id_problem(ESC_ID)


def test_the_dataset_reader_refuses_it(tmp_path):
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"doc_id": ESC_ID, "text": "x"}) + "\n")
    with pytest.raises(DatasetError) as err:
        load_corpus(tmp_path)
    assert str(err.value) == f"{tmp_path / 'corpus.jsonl'}:1: {REASON}"


def test_the_extraction_records_reader_refuses_it(tmp_path):
    (tmp_path / "extractions.jsonl").write_text(
        json.dumps({"doc_id": "ok", "entities": []}) + "\n" + json.dumps({"doc_id": ESC_ID, "entities": []}) + "\n"
    )
    with pytest.raises(DatasetError) as err:
        load_recorded_extractions(tmp_path)
    assert str(err.value) == f"{tmp_path / 'extractions.jsonl'}:2: {REASON}"


def test_ingest_and_delete_on_the_command_line_refuse_it_alike(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "corpus.jsonl").write_text(json.dumps({"doc_id": ESC_ID, "text": "x"}) + "\n")
    store = str(tmp_path / "store")
    assert main(["ingest", "--dataset", str(tmp_path / "data"), "--store", store, "--embedder", "hashing"]) == 2
    assert REASON in capsys.readouterr().err
    assert main(["delete", ESC_ID, "--store", store]) == 2
    assert REASON in capsys.readouterr().err


def test_the_document_inbox_refuses_it(tmp_path):
    inbox = Inbox(str(tmp_path / "in"))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "drop.jsonl").write_text(json.dumps({"doc_id": ESC_ID, "text": "x"}) + "\n")
    (item,) = inbox.items()
    with pytest.raises(DatasetError, match="U\\+001B") as err:
        inbox.read_documents(item)
    assert str(err.value).endswith(f"drop.jsonl:1: {REASON}")


@pytest.mark.parametrize(
    "name, content, line",
    [
        ("ids.txt", f"# erase these\nfine-id\n{ESC_ID}\n", 3),
        ("ids.txt", "fine-id\n  \u200bhidden  \n", 2),
        ("request.json", json.dumps({"doc_ids": ["fine-id", ESC_ID]}), 1),
        ("request.jsonl", json.dumps({"doc_id": "fine-id"}) + "\n" + json.dumps({"doc_id": " padded"}) + "\n", 2),
    ],
)
def test_the_erasure_inbox_refuses_it(tmp_path, name, content, line):
    inbox = Inbox(str(tmp_path / "in"))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_text(content)
    (item,) = inbox.items()
    with pytest.raises(DatasetError) as err:
        inbox.read_requests(item)
    assert f"{name}:{line}: doc_id " in str(err.value)


def test_erasure_request_lines_keep_their_ids_exactly(tmp_path):
    inbox = Inbox(str(tmp_path / "in"))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "ids.txt").write_bytes(b"\xef\xbb\xbfa\r\n\tb \n\n# c\n")
    (item,) = inbox.items()
    assert [r.doc_id for r in inbox.read_requests(item)] == ["a", "b"]


def test_a_retention_rule_whose_pattern_no_id_can_match_is_refused():
    with pytest.raises(PolicyError, match=r"can match no document: doc_id .* U\+001B"):
        RetentionPolicy.parse(json.dumps({"rules": [{"doc_id": "draft-\x1b*", "keep_days": 3}]}), "policy.json")
    assert RetentionPolicy.parse(json.dumps({"rules": [{"doc_id": "draft-*", "keep_days": 3}]})).rules
