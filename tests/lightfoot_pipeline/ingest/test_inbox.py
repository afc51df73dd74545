"""Inboxes: what a drop may be, what happens to one that cannot be read, and how one is taken."""

from __future__ import annotations

import json
import logging

import pytest

from lightfoot_pipeline.ingest.dataset import DatasetError
from lightfoot_pipeline.ingest.inbox import Inbox, Intake, document_inbox, erasure_inbox, take_documents, take_requests
from lightfoot_pipeline.ingest.landing import Landing
from lightfoot_pipeline.ingest.receipts import ERASURE, INGESTION, Receipts
from lightfoot_pipeline.store.store import Store


@pytest.fixture
def inbox(tmp_path):
    (tmp_path / "in").mkdir()
    return Inbox(str(tmp_path / "in"))


def test_ready_items_skip_hidden_partial_and_rejected(inbox, tmp_path):
    root = tmp_path / "in"
    (root / "a.jsonl").write_text("{}\n")
    (root / ".b.jsonl").write_text("{}\n")
    (root / "_c.jsonl").write_text("{}\n")
    (root / "d.jsonl.part").write_text("{}\n")
    (root / "rejected").mkdir()
    (root / "writing").mkdir()  # a dataset folder without corpus.jsonl yet
    (root / "ready").mkdir()
    (root / "ready" / "corpus.jsonl").write_text("{}\n")
    assert [i.name for i in inbox.items()] == ["a.jsonl", "ready"]
    assert [i.is_dir for i in inbox.items()] == [False, True]


def test_document_files_and_dataset_folders(inbox, tmp_path):
    root = tmp_path / "in"
    record = {"entities": [{"name": "Oslo", "type": "location"}], "facts": []}
    (root / "one.jsonl").write_text(
        json.dumps({"doc_id": "d1", "title": "T", "text": "Oslo.", "extraction": record}) + "\n\n"
        + json.dumps({"doc_id": "d2", "text": "Bergen.", "retention_until": "2027-01-01"}) + "\n"
    )
    (root / "two.json").write_text(json.dumps([{"doc_id": "d3", "text": "Three."}]))
    (root / "set").mkdir()
    (root / "set" / "corpus.jsonl").write_text(json.dumps({"doc_id": "d4", "text": "Four."}) + "\n")
    (root / "set" / "extractions.jsonl").write_text(json.dumps({"doc_id": "d4", "entities": [], "facts": []}) + "\n")
    by_name = {i.name: inbox.read_documents(i) for i in inbox.items()}
    assert [d.doc_id for d in by_name["one.jsonl"]] == ["d1", "d2"]
    assert by_name["one.jsonl"][0].extraction == record
    assert by_name["one.jsonl"][1].document.retention_until.isoformat() == "2027-01-01"
    assert [d.doc_id for d in by_name["two.json"]] == ["d3"]
    assert by_name["set"][0].extraction == {"doc_id": "d4", "entities": [], "facts": []}
    assert all(d.origin.endswith(name) for name, docs in by_name.items() for d in docs)


def test_a_drop_carries_the_readers_its_lines_name(inbox, tmp_path):
    root = tmp_path / "in"
    (root / "one.jsonl").write_text(json.dumps({"doc_id": "d1", "text": "Oslo.", "readers": "legal,hr"}) + "\n"
                                    + json.dumps({"doc_id": "d2", "text": "Bergen."}) + "\n")
    (root / "bad.jsonl").write_text(json.dumps({"doc_id": "d3", "text": "Three.", "readers": ["No Way"]}) + "\n")
    items = {i.name: i for i in inbox.items()}
    assert [d.document.readers for d in inbox.read_documents(items["one.jsonl"])] == [("hr", "legal"), None]
    with pytest.raises(DatasetError, match=r"bad.jsonl:1: document 'd3' has readers: 'No Way' is not a group name"):
        inbox.read_documents(items["bad.jsonl"])


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("bad.jsonl", '{"doc_id": "a", "text": "x"}\nnot json\n', "bad.jsonl:2: not valid JSON"),
        ("dup.jsonl", '{"doc_id": "a", "text": "x"}\n{"doc_id": "a", "text": "y"}\n', "already on line 1"),
        ("empty.jsonl", "\n", "no documents"),
        ("notext.jsonl", '{"doc_id": "a", "text": ""}\n', "has no text"),
        ("notes.csv", "a,b\n", "not a .jsonl or .json document file"),
        ("latin1.jsonl", b'{"doc_id": "a", "text": "x"}\n{"doc_id": "b", "text": "\xe9"}\n',
         r"latin1.jsonl:2: not valid UTF-8 \(byte 0xe9 at byte 26\)"),
        ("latin1.json", b'[{"doc_id": "a",\n  "text": "\xe9"}]', r"latin1.json: not valid UTF-8 \(byte 0xe9 at line 2, byte 12\)"),
        ("broken.json", '[{"doc_id": "a",\n  "text" "x"}]', r"broken.json: not valid JSON \(.* at line 2 column 10\)"),
        ("deep.json", "[" * 50_000 + "]" * 50_000, "deep.json: JSON nested deeper than 32 levels"),
        ("deep.jsonl", '{"doc_id": "a", "text": "x", "extraction": ' + "[" * 40 + "]" * 40 + "}\n",
         "deep.jsonl:1: JSON nested deeper than 32 levels"),
        ("records/corpus.jsonl", '{"doc_id": "a", "text": "x"}\n', "extractions.jsonl:1: chunk_ordinal must be"),
    ],
)
def test_unreadable_drops_say_why(inbox, tmp_path, name, content, message):
    if name.startswith("records/"):
        (tmp_path / "in" / "records").mkdir()
        (tmp_path / "in" / "records" / "extractions.jsonl").write_text('{"doc_id": "a", "chunk_ordinal": "x"}\n')
    path = tmp_path / "in" / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    (item,) = inbox.items()
    with pytest.raises(DatasetError, match=message):
        inbox.read_documents(item)


def test_reject_moves_the_drop_aside_with_its_reason(inbox, tmp_path):
    root = tmp_path / "in"
    (root / "bad.jsonl").write_text("oops\n")
    (root / "set").mkdir()
    (root / "set" / "corpus.jsonl").write_text("oops\n")
    for item in inbox.items():
        inbox.reject(item, f"{item.name} is broken")
    assert inbox.items() == []
    rejected = sorted(p.name for p in (root / "rejected").iterdir())
    assert len(rejected) == 4
    reasons = sorted(p.read_text() for p in (root / "rejected").glob("*.reason.txt"))
    assert reasons == ["bad.jsonl is broken\n", "set is broken\n"]
    folder = next(p for p in (root / "rejected").iterdir() if p.is_dir())
    assert (folder / "corpus.jsonl").read_text() == "oops\n"


def test_remove_deletes_files_and_folders(inbox, tmp_path):
    root = tmp_path / "in"
    (root / "a.jsonl").write_text("{}\n")
    (root / "set").mkdir()
    (root / "set" / "corpus.jsonl").write_text("{}\n")
    for item in inbox.items():
        inbox.remove(item)
    assert list(root.iterdir()) == []


def test_erasure_requests_in_each_format(inbox, tmp_path):
    root = tmp_path / "in"
    (root / "ids.txt").write_text("# erase these\ndoc-1\n\n  doc-2  \n")
    (root / "one.json").write_text(json.dumps({"doc_id": "doc-3", "reason": "gdpr", "erase": False}))
    (root / "many.jsonl").write_text(json.dumps({"doc_ids": ["doc-4", "doc-5"]}) + "\n")
    found = {i.name: inbox.read_requests(i) for i in inbox.items()}
    assert [(r.doc_id, r.erase) for r in found["ids.txt"]] == [("doc-1", True), ("doc-2", True)]
    assert found["ids.txt"][0].reason == "erasure request ids.txt"
    assert [(r.doc_id, r.erase, r.reason) for r in found["one.json"]] == [("doc-3", False, "gdpr")]
    assert [r.doc_id for r in found["many.jsonl"]] == ["doc-4", "doc-5"]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("blank.txt", "# nothing\n", "names no document"),
        ("bad.json", json.dumps({"doc_ids": []}), "doc_id must be a non-empty string"),
        ("erase.json", json.dumps({"doc_id": "a", "erase": "yes"}), "erase must be true or false"),
        ("list.json", json.dumps(["a"]), "expected an object"),
        ("sheet.xlsx", "x", "not a .txt, .json or .jsonl erasure request"),
    ],
)
def test_unreadable_erasure_requests_say_why(inbox, tmp_path, name, content, message):
    (tmp_path / "in" / name).write_text(content)
    (item,) = inbox.items()
    with pytest.raises(DatasetError, match=message):
        inbox.read_requests(item)


def test_a_missing_inbox_is_empty(tmp_path):
    assert Inbox(str(tmp_path / "nowhere")).items() == []


def test_a_drop_is_known_by_its_name_size_time_and_what_it_asks(inbox, tmp_path):
    import os

    root = tmp_path / "in"
    body = json.dumps({"doc_ids": ["doc-1"], "reason": "gdpr"})
    (root / "monday.json").write_text(body)
    (root / "tuesday.json").write_text(body)
    os.utime(root / "tuesday.json", ns=(os.stat(root / "monday.json").st_mtime_ns,) * 2)
    items = {i.name: i for i in inbox.items()}
    monday, tuesday = (inbox.deletion_receipt(items[n], inbox.read_requests(items[n]))
                       for n in ("monday.json", "tuesday.json"))
    assert monday.doc_ids == tuesday.doc_ids == ("doc-1",)
    assert monday.receipt_id != tuesday.receipt_id, "the same content in two files is two requests"
    assert monday.origin == f"{inbox.uri}/monday.json"
    seen_again = inbox.deletion_receipt(items["monday.json"], inbox.read_requests(items["monday.json"]))
    assert seen_again.receipt_id == monday.receipt_id, "the same file read twice is one request"

    os.utime(root / "monday.json", ns=(1, 1))
    (rewritten,) = [i for i in inbox.items() if i.name == "monday.json"]
    assert inbox.source(rewritten)["mtime_ns"] == 1
    assert inbox.deletion_receipt(rewritten, inbox.read_requests(rewritten)).receipt_id != monday.receipt_id

    rows = [{"doc_id": "b", "text": "x"}, {"doc_id": "a", "text": "y"}]
    (root / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (drop,) = [i for i in inbox.items() if i.name == "docs.jsonl"]
    receipt = inbox.document_receipt(drop, inbox.read_documents(drop))
    assert receipt.kind == "documents" and receipt.doc_ids == ("a", "b") and receipt.erase_ids == ()


# -- taking drops -------------------------------------------------------------------------------


LOG = logging.getLogger("test-inbox")


def drop(root, name: str, *doc_ids: str):
    path = root / name
    path.write_text("".join(json.dumps({"doc_id": d, "title": d, "text": f"{d} is in Oslo."}) + "\n" for d in doc_ids))
    return path


def test_a_drop_is_landed_then_given_its_receipt_then_removed(inbox, tmp_path, store, monkeypatch):
    landing = Landing(store)
    path = drop(tmp_path / "in", "news.jsonl", "d1", "d2")
    record = Receipts.record

    def record_after_landing(self, receipt):
        assert landing.landed(["d1", "d2"]) == {"d1", "d2"} and path.exists()
        return record(self, receipt)

    monkeypatch.setattr(Receipts, "record", record_after_landing)
    intake = take_documents(inbox, landing, LOG)
    (receipt,) = intake.receipts
    assert intake.doc_ids == ["d1", "d2"] and intake.rejected == {}
    assert intake.news() == ["landed 2 documents from 1 drops"]
    assert take_documents(inbox, landing, LOG).news() == [f"nothing new in {inbox.uri}"]
    assert Receipts(store).pending(INGESTION) == [receipt] and receipt.origin == f"{inbox.uri}/news.jsonl"
    assert not path.exists()


def test_a_crash_before_the_receipt_leaves_the_drop_to_be_landed_again(inbox, tmp_path, store, monkeypatch):
    landing = Landing(store)
    path = drop(tmp_path / "in", "news.jsonl", "d1")
    with monkeypatch.context() as patch:
        patch.setattr(Receipts, "record", lambda self, receipt: (_ for _ in ()).throw(RuntimeError("killed")))
        with pytest.raises(RuntimeError, match="killed"):
            take_documents(inbox, landing, LOG)
    assert path.exists() and landing.landed_ids() == ["d1"] and Receipts(store).pending(INGESTION) == []
    (receipt,) = take_documents(inbox, landing, LOG).receipts
    assert Receipts(store).pending(INGESTION) == [receipt] and not path.exists()


def test_a_drop_that_could_not_be_removed_is_not_taken_again(inbox, tmp_path, store, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    landing = Landing(store)
    path = drop(tmp_path / "in", "news.jsonl", "d1")
    with monkeypatch.context() as patch:
        patch.setattr(Inbox, "remove", lambda self, item: (_ for _ in ()).throw(PermissionError("read-only")))
        assert len(take_documents(inbox, landing, LOG).receipts) == 1
    assert path.exists() and "could not remove it from the inbox (read-only)" in caplog.text
    landing.forget(["d1"])
    intake = take_documents(inbox, landing, LOG)
    assert intake.receipts == [] and not path.exists()
    assert landing.landed_ids() == [], "a drop known by its receipt is not landed again"
    assert "was landed before" in caplog.text


def test_erasure_requests_are_recorded_then_given_their_receipt_and_bad_files_set_aside(inbox, tmp_path, store):
    landing = Landing(store)
    root = tmp_path / "in"
    (root / "gdpr.json").write_text(json.dumps({"doc_ids": ["d1", "d2"], "reason": "gdpr", "erase": False}))
    (root / "bad.json").write_text(json.dumps({"doc_ids": []}))
    intake = take_requests(inbox, landing, LOG)
    (receipt,) = intake.receipts
    assert receipt.kind == ERASURE and receipt.doc_ids == ("d1", "d2") and receipt.erase_ids == ()
    assert [(r.doc_id, r.reason, r.erase) for r in landing.deletion_requests()] == [("d1", "gdpr", False),
                                                                                    ("d2", "gdpr", False)]
    assert list(intake.rejected) == ["bad.json"] and "doc_id must be a non-empty string" in intake.rejected["bad.json"]
    assert sorted(p.name for p in root.iterdir()) == ["rejected"]
    assert intake.news() == ["took 1 request files", "rejected 1 request files (their reasons are in the inbox's "
                             "rejected folder)"], "counts, never a request's values"
    again = take_requests(inbox, landing, LOG)
    assert again == Intake(where=inbox.uri, kind=ERASURE) and again.news() == [f"no new request file in {inbox.uri}"]


def test_a_drop_whose_readers_use_a_reserved_word_wrongly_is_rejected_whole(inbox, tmp_path, store):
    root = tmp_path / "in"
    (root / "mixed.jsonl").write_text(json.dumps({"doc_id": "d1", "text": "d1 is in Oslo.", "readers": ["legal"]})
                                      + "\n" + json.dumps({"doc_id": "d2", "text": "d2 is in Oslo.",
                                                           "readers": ["*"]}) + "\n")
    intake = take_documents(inbox, Landing(store), LOG)
    assert intake.receipts == [] and list(intake.rejected) == ["mixed.jsonl"]
    assert "'*' is a reserved word" in intake.rejected["mixed.jsonl"]
    assert Landing(store).landed_ids() == [], "nothing of the drop is landed"


def test_inbox_defaults_sit_beside_a_local_store_and_under_a_remote_one(tmp_path, monkeypatch):
    for name in ("LIGHTFOOT_INBOX", "LIGHTFOOT_ERASURE_INBOX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    local = document_inbox(Store(str(tmp_path / "store")))
    assert local.uri == str(tmp_path / ".lightfoot" / "inbox" / "documents")
    monkeypatch.setenv("LIGHTFOOT_ERASURE_INBOX", str(tmp_path / "requests"))
    assert erasure_inbox(Store(str(tmp_path / "store"))).uri == str(tmp_path / "requests")
    remote = Store("s3://bucket/lightfoot", storage_options={"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "a",
                                                              "AWS_SECRET_ACCESS_KEY": "b"})
    monkeypatch.delenv("LIGHTFOOT_ERASURE_INBOX")
    assert erasure_inbox(remote).uri == "s3://bucket/lightfoot/inbox/erasure"
