"""The landing area: landed documents and deletion requests under the store root."""

from __future__ import annotations

import datetime as dt

import pytest

from lightfoot_pipeline.ingest.dataset import DatasetError, Document
from lightfoot_pipeline.ingest.landing import DeletionRequest, LandedDocument, Landing, file_key, utc_now


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


def test_a_landed_document_keeps_its_readers_or_that_it_named_none(store):
    landing = Landing(store)
    named = LandedDocument(Document("a", "Title", "Text.", readers=("hr", "legal")), None, utc_now(), "test")
    nobody = LandedDocument(Document("b", "Title", "Text.", readers=()), None, utc_now(), "test")
    landing.put_documents([named, nobody, landed("c")])
    found = landing.documents(["a", "b", "c"])
    assert [found[d].document.readers for d in "abc"] == [("hr", "legal"), (), None]


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
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
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
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor

    canary = "canary-5e1d lives in Oslo."
    copies = [landed("a", canary), landed("b", "Bergen is a city.")]
    Landing(store).put_documents(copies)
    records = {"a": {"entities": [{"name": "Oslo"}], "facts": []}, "b": {"entities": [{"name": "Bergen"}], "facts": []}}
    operations.ingest(store, [c.document for c in copies], ReplayExtractor(records), hashing_embedder)
    report = operations.delete(store, ["a"], erase=True, reason="test")
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
