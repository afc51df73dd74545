"""The landing area: landed documents and deletion requests under the store root."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from lightfoot_pipeline.ingest.dataset import DatasetError, Document
from lightfoot_pipeline.ingest.landing import DeletionRequest, LandedDocument, Landing, Receipt, file_key, utc_now


def landed(doc_id: str, text: str = "Some text.", extraction=None) -> LandedDocument:
    return LandedDocument(Document(doc_id, "Title", text, dt.date(2030, 1, 2), "crm/a"), extraction, utc_now(), "test")


def test_documents_round_trip_with_their_extraction(store):
    landing = Landing(store)
    record = {"doc_id": "a", "entities": [{"name": "X", "type": None, "description": None}], "facts": []}
    landing.put_documents([landed("a", extraction=record), landed("b/with slash")])
    found = landing.documents(["a", "b/with slash", "missing"])
    assert sorted(found) == ["a", "b/with slash"]
    assert found["a"].document == Document("a", "Title", "Some text.", dt.date(2030, 1, 2), "crm/a")
    assert found["a"].extraction == record
    assert found["b/with slash"].extraction is None
    assert landing.landed_ids() == ["a", "b/with slash"]


def test_awkward_ids_stay_inside_the_landing_folder(store):
    landing = Landing(store)
    long_id = "x" * 400
    landing.put_documents([landed(".."), landed("."), landed(long_id)])
    files = sorted(p.name for p in (store.local_root() / "landing" / "documents").iterdir())
    assert files == sorted(f"{file_key(d)}.json" for d in ["..", ".", long_id])
    assert all(name.startswith(("d-", "h-")) for name in files)
    assert landing.landed_ids() == sorted(["..", ".", long_id])
    assert set(landing.documents(["..", long_id])) == {"..", long_id}


def test_forget_deletes_the_text(store):
    landing = Landing(store)
    landing.put_documents([landed("a", "canary-7f3a text"), landed("b")])
    assert landing.forget(["a", "never-landed"]) == 1
    assert landing.landed_ids() == ["b"]
    for path in (store.local_root() / "landing").rglob("*"):
        if path.is_file():
            assert b"canary-7f3a" not in path.read_bytes()


def test_a_copy_that_holds_another_document_is_refused(store):
    landing = Landing(store)
    landing.put_documents([landed("a")])
    source = store.local_root() / "landing" / "documents" / f"{file_key('a')}.json"
    source.rename(source.with_name(f"{file_key('b')}.json"))
    with pytest.raises(DatasetError, match="holds document 'a', expected 'b'"):
        landing.documents(["b"])


def test_requests_are_kept_until_resolved_and_never_downgraded(store):
    landing = Landing(store)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    landing.request_deletions([DeletionRequest("a", "gdpr", True, t0, "inbox"),
                               DeletionRequest("b", "cleanup", False, t0 + dt.timedelta(hours=1), "cli")])
    landing.request_deletions([DeletionRequest("a", "again", False, t0 + dt.timedelta(hours=2), "cli")])
    pending = {r.doc_id: r for r in landing.deletion_requests()}
    assert pending["a"].erase is True and pending["a"].reason == "again"
    assert pending["b"].erase is False
    assert [r.doc_id for r in landing.deletion_requests()] == ["b", "a"]  # oldest first
    assert landing.resolve_requests(["a"]) == 1
    assert [r.doc_id for r in landing.deletion_requests()] == ["b"]


def test_hard_erase_removes_the_landed_copy(store, hashing_embedder):
    from lightfoot_pipeline import pipeline
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor

    canary = "canary-5e1d lives in Oslo."
    copies = [landed("a", canary), landed("b", "Bergen is a city.")]
    Landing(store).put_documents(copies)
    records = {"a": {"entities": [{"name": "Oslo"}], "facts": []}, "b": {"entities": [{"name": "Bergen"}], "facts": []}}
    pipeline.ingest(store, [c.document for c in copies], ReplayExtractor(records), hashing_embedder)
    report = pipeline.delete(store, ["a"], erase=True, reason="test")
    assert report.erase["landed_copies_removed"] == 1
    assert Landing(store).landed_ids() == ["b"]
    for path in store.local_root().rglob("*"):
        if path.is_file():
            assert b"canary-5e1d" not in path.read_bytes(), path


def test_landed_says_which_documents_have_a_copy(store):
    landing = Landing(store)
    landing.put_documents([landed("a"), landed("b/with slash"), landed("x" * 400)])
    assert landing.landed(["a", "b/with slash", "x" * 400, "missing"]) == {"a", "b/with slash", "x" * 400}
    assert landing.landed([]) == set()


SOURCE = {"inbox": "/in", "name": "gdpr.json", "size": 40, "mtime_ns": 1_700_000_000_000_000_000}


def request(doc_id: str, erase: bool = True, reason: str = "gdpr") -> DeletionRequest:
    return DeletionRequest(doc_id, reason, erase, utc_now(), "/in/gdpr.json")


def test_a_receipt_id_comes_from_the_drop_and_what_it_asks():
    one = Receipt.for_deletions(SOURCE, [request("a"), request("b")], "/in/gdpr.json")
    assert one.receipt_id == Receipt.for_deletions(SOURCE, [request("b"), request("a")], "elsewhere").receipt_id
    assert one.doc_ids == ("a", "b") and one.erase_ids == ("a", "b")
    others = [
        Receipt.for_deletions({**SOURCE, "name": "copy.json"}, [request("a"), request("b")], ""),
        Receipt.for_deletions({**SOURCE, "mtime_ns": SOURCE["mtime_ns"] + 1}, [request("a"), request("b")], ""),
        Receipt.for_deletions(SOURCE, [request("a"), request("b", erase=False)], ""),
        Receipt.for_deletions(SOURCE, [request("a"), request("b", reason="duplicate")], ""),
        Receipt.for_deletions(SOURCE, [request("a")], ""),
        Receipt.for_documents(SOURCE, ["a", "b"], ""),
    ]
    assert len({one.receipt_id, *(r.receipt_id for r in others)}) == 1 + len(others)
    assert others[2].erase_ids == ("a",)
    assert Receipt.for_documents(SOURCE, ["b", "a", "a"], "").doc_ids == ("a", "b")
    with pytest.raises(ValueError, match="at least one"):
        Receipt.for_deletions(SOURCE, [], "")


def test_a_receipt_is_pending_until_settled_and_known_for_good(store):
    landing = Landing(store)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    older = dataclasses.replace(Receipt.for_documents(SOURCE, ["a"], "/in/a"), taken_at=t0)
    newer = dataclasses.replace(Receipt.for_deletions(SOURCE, [request("a")], "/in/gdpr.json"),
                                taken_at=t0 + dt.timedelta(hours=1))
    later = dataclasses.replace(Receipt.for_deletions({**SOURCE, "name": "z"}, [request("b")], "/in/z"), taken_at=t0)
    assert landing.record(newer) and landing.record(later) and landing.record(older)
    assert not landing.record(newer), "a drop taken before is known"
    assert [r.receipt_id for r in landing.pending_receipts("erasure")] == [later.receipt_id, newer.receipt_id]
    assert landing.pending_receipts("documents") == [older]
    assert landing.receipt("erasure", newer.receipt_id) == newer

    done = landing.settle(newer, "run 1234 succeeded")
    assert done.is_done and done.outcome == "run 1234 succeeded"
    assert landing.receipt("erasure", newer.receipt_id) == done
    assert [r.receipt_id for r in landing.pending_receipts("erasure")] == [later.receipt_id]
    assert not landing.record(newer), "a done receipt is never pending again"
    assert landing.receipt("erasure", "0" * 32) is None
    with pytest.raises(ValueError, match="unknown receipt kind"):
        landing.receipt("ingest", newer.receipt_id)


def test_a_settlement_cut_short_is_finished_when_pending_receipts_are_listed(store):
    landing = Landing(store)
    receipt = Receipt.for_deletions(SOURCE, [request("a")], "/in/gdpr.json")
    landing.record(receipt)
    folder = store.local_root() / "landing" / "receipts" / "erasure"
    (folder / "done").mkdir(parents=True)
    settled = dataclasses.replace(receipt, done_at=utc_now(), outcome="run 1 succeeded")
    (folder / "done" / f"{receipt.receipt_id}.json").write_text(json.dumps(settled.as_json()))
    assert landing.pending_receipts("erasure") == []
    assert list((folder / "pending").iterdir()) == []
    assert landing.receipt("erasure", receipt.receipt_id).outcome == "run 1 succeeded"


def test_a_receipt_file_that_is_not_one_is_refused(store):
    landing = Landing(store)
    folder = store.local_root() / "landing" / "receipts" / "erasure" / "pending"
    folder.mkdir(parents=True)
    (folder / "bad.json").write_text(json.dumps({"kind": "erasure", "receipt_id": "bad", "doc_ids": "a"}))
    with pytest.raises(DatasetError, match="doc_ids must be a list of strings"):
        landing.pending_receipts("erasure")


def test_outstanding_deletions_say_what_is_left_of_each_document(store, hashing_embedder):
    from lightfoot_pipeline import pipeline
    from lightfoot_pipeline.index.documents import tombstone_documents
    from lightfoot_pipeline.erase import erase_history
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor

    copies = [landed("a", "Oslo is a city."), landed("b", "Bergen is a city."), landed("c", "Tromso is a city.")]
    names = {"a": "Oslo", "b": "Bergen", "c": "Tromso"}
    records = {d: {"entities": [{"name": n}], "facts": []} for d, n in names.items()}
    pipeline.ingest(store, [c.document for c in copies], ReplayExtractor(records), hashing_embedder)
    landing = Landing(store)
    requests = [request("a"), request("b", erase=False), request("c"), request("never-stored")]
    receipt = Receipt.for_deletions(SOURCE, requests, "/in/gdpr.json")
    landing.request_deletions(requests)
    assert landing.outstanding_deletions(receipt) == {
        "a": "still stored", "b": "still stored", "c": "still stored",
        "never-stored": "its deletion request waits in the landing area",
    }
    with store.transaction() as tx:
        tombstone_documents(tx, ["a", "c"], reason="gdpr", erase=True)
        tombstone_documents(tx, ["b"], reason="gdpr", erase=False)
        tx.commit("delete", {})
    landing.resolve_requests(["a", "b", "c", "never-stored"])
    assert landing.outstanding_deletions(receipt) == {
        "a": "deleted, its history not yet erased", "c": "deleted, its history not yet erased",
    }
    erase_history(store, ["a"])
    assert landing.outstanding_deletions(receipt) == {"c": "deleted, its history not yet erased"}
    erase_history(store, ["c"])
    assert landing.outstanding_deletions(receipt) == {}
