"""The landing area and inboxes on an object store (an S3-compatible server on loopback)."""

from __future__ import annotations

import json

from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.inbox import Inbox
from lightfoot_pipeline.ingest.landing import DeletionRequest, LandedDocument, Landing, utc_now
from lightfoot_pipeline.store.store import Store


def test_landed_documents_and_requests_live_under_the_store_prefix(object_store):
    store = Store(object_store.uri("lightfoot"))
    landing = Landing(store)
    landing.put_documents([LandedDocument(Document("doc/1", "T", "canary-91b2 in Oslo."), {"entities": []}, utc_now(), "t"),
                           LandedDocument(Document("doc-2", "T", "Bergen."), None, utc_now(), "t")])
    landing.request_deletions([DeletionRequest("doc/1", "gdpr", True, utc_now(), "test")])
    assert landing.landed_ids() == ["doc-2", "doc/1"]
    assert landing.documents(["doc/1"])["doc/1"].extraction == {"entities": []}
    assert [r.doc_id for r in landing.deletion_requests()] == ["doc/1"]
    files = [k for k in object_store.keys("") if not k.endswith("/")]  # the rest are folder markers
    assert sorted(files) == ["lightfoot/landing/documents/d-doc%2F1.json", "lightfoot/landing/documents/d-doc-2.json",
                             "lightfoot/landing/requests/d-doc%2F1.json"]

    assert landing.forget(["doc/1"]) == 1
    assert landing.resolve_requests(["doc/1"]) == 1
    assert object_store.objects_containing("canary-91b2") == []
    assert landing.landed_ids() == ["doc-2"]


def test_an_inbox_prefix_is_read_removed_and_rejected_like_a_folder(object_store):
    client, bucket = object_store.client, object_store.bucket
    client.put_object(Bucket=bucket, Key="inbox/docs.jsonl",
                      Body=(json.dumps({"doc_id": "a", "text": "Oslo."}) + "\n").encode())
    client.put_object(Bucket=bucket, Key="inbox/set/corpus.jsonl", Body=b"not json\n")
    client.put_object(Bucket=bucket, Key="inbox/.partial.jsonl", Body=b"{}\n")
    inbox = Inbox(object_store.uri("inbox"), Store(object_store.uri("lightfoot")).storage_options)
    items = {i.name: i for i in inbox.items()}
    assert sorted(items) == ["docs.jsonl", "set"] and items["set"].is_dir
    assert [d.doc_id for d in inbox.read_documents(items["docs.jsonl"])] == ["a"]
    inbox.remove(items["docs.jsonl"])
    inbox.reject(items["set"], "set/corpus.jsonl:1: not valid JSON")
    keys = object_store.keys("inbox/")
    assert "inbox/docs.jsonl" not in keys and "inbox/set/corpus.jsonl" not in keys
    assert any(k.startswith("inbox/rejected/") and k.endswith("set/corpus.jsonl") for k in keys)
    assert any(k.endswith("set.reason.txt") for k in keys)
    assert [i.name for i in inbox.items()] == []
