"""Receipts: what each drop taken from an inbox asked, pending until a run of it has succeeded."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from lightfoot_pipeline.ingest.dataset import DatasetError, Document
from lightfoot_pipeline.ingest.landing import DeletionRequest, Landing, utc_now
from lightfoot_pipeline.ingest.receipts import Receipt, ReceiptRuns, Receipts, retry_delay_s

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
    receipts = Receipts(store)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    older = dataclasses.replace(Receipt.for_documents(SOURCE, ["a"], "/in/a"), taken_at=t0)
    newer = dataclasses.replace(Receipt.for_deletions(SOURCE, [request("a")], "/in/gdpr.json"),
                                taken_at=t0 + dt.timedelta(hours=1))
    later = dataclasses.replace(Receipt.for_deletions({**SOURCE, "name": "z"}, [request("b")], "/in/z"), taken_at=t0)
    assert receipts.record(newer) and receipts.record(later) and receipts.record(older)
    assert not receipts.record(newer), "a drop taken before is known"
    assert [r.receipt_id for r in receipts.pending("erasure")] == [later.receipt_id, newer.receipt_id]
    assert receipts.pending("documents") == [older]
    assert receipts.receipt("erasure", newer.receipt_id) == newer

    done = receipts.settle(newer, "run 1234 succeeded")
    assert done.is_done and done.outcome == "run 1234 succeeded"
    assert receipts.receipt("erasure", newer.receipt_id) == done
    assert [r.receipt_id for r in receipts.pending("erasure")] == [later.receipt_id]
    assert not receipts.record(newer), "a done receipt is never pending again"
    assert receipts.receipt("erasure", "0" * 32) is None
    with pytest.raises(ValueError, match="unknown receipt kind"):
        receipts.receipt("ingest", newer.receipt_id)


def test_a_settlement_cut_short_is_finished_when_pending_receipts_are_listed(store):
    receipts = Receipts(store)
    receipt = Receipt.for_deletions(SOURCE, [request("a")], "/in/gdpr.json")
    receipts.record(receipt)
    folder = store.local_root() / "landing" / "receipts" / "erasure"
    (folder / "done").mkdir(parents=True)
    settled = dataclasses.replace(receipt, done_at=utc_now(), outcome="run 1 succeeded")
    (folder / "done" / f"{receipt.receipt_id}.json").write_text(json.dumps(settled.as_json()))
    assert receipts.pending("erasure") == []
    assert list((folder / "pending").iterdir()) == []
    assert receipts.receipt("erasure", receipt.receipt_id).outcome == "run 1 succeeded"


def test_a_receipt_file_that_is_not_one_is_refused(store):
    receipts = Receipts(store)
    folder = store.local_root() / "landing" / "receipts" / "erasure" / "pending"
    folder.mkdir(parents=True)
    (folder / "bad.json").write_text(json.dumps({"kind": "erasure", "receipt_id": "bad", "doc_ids": "a"}))
    with pytest.raises(DatasetError, match="doc_ids must be a list of strings"):
        receipts.pending("erasure")


def test_outstanding_deletions_say_what_is_left_of_each_document(store, hashing_embedder):
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.index.documents import tombstone_documents
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor
    from lightfoot_pipeline.operations.erase import erase_history

    names = {"a": "Oslo", "b": "Bergen", "c": "Tromso"}
    documents = [Document(d, "Title", f"{n} is a city.") for d, n in names.items()]
    records = {d: {"entities": [{"name": n}], "facts": []} for d, n in names.items()}
    operations.ingest(store, documents, ReplayExtractor(records), hashing_embedder)
    landing, receipts = Landing(store), Receipts(store)
    requests = [request("a"), request("b", erase=False), request("c"), request("never-stored")]
    receipt = Receipt.for_deletions(SOURCE, requests, "/in/gdpr.json")
    landing.request_deletions(requests)
    assert receipts.outstanding_deletions(receipt) == {
        "a": "still stored", "b": "still stored", "c": "still stored",
        "never-stored": "its deletion request waits in the landing area",
    }
    with store.transaction() as tx:
        tombstone_documents(tx, ["a", "c"], reason="gdpr", erase=True)
        tombstone_documents(tx, ["b"], reason="gdpr", erase=False)
        tx.commit("delete", {})
    landing.resolve_requests(["a", "b", "c", "never-stored"])
    assert receipts.outstanding_deletions(receipt) == {
        "a": "deleted, its history not yet erased", "c": "deleted, its history not yet erased",
    }
    erase_history(store, ["a"])  # and every erasure still owed: c's too
    assert receipts.outstanding_deletions(receipt) == {}


def test_the_wait_after_failures_doubles_up_to_an_hour():
    assert [retry_delay_s(n) for n in (1, 2, 3, 4)] == [0.0, 60.0, 120.0, 240.0]
    assert retry_delay_s(50) == 3600.0


def test_runs_back_off_until_their_retry_time():
    assert not ReceiptRuns().backing_off(now=0.0)
    assert ReceiptRuns(retry_at=100.0).backing_off(now=99.0) and not ReceiptRuns(retry_at=100.0).backing_off(now=100.0)
