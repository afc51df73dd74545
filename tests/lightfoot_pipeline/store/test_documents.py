"""The documents a store holds, as of a commit."""

from __future__ import annotations

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.store import Store


def test_live_doc_ids_as_of_a_commit_and_among_some(tmp_path, hashing_embedder):
    store = Store(str(tmp_path / "store"))
    assert live_doc_ids(store) == set()
    documents = [Document(doc_id=f"d{i}", title=f"T{i}", text=f"Alpha {i} met Beta {i}.") for i in range(3)]
    records = {d.doc_id: {"doc_id": d.doc_id, "entities": [], "facts": []} for d in documents}
    operations.ingest(store, documents, ReplayExtractor(records), hashing_embedder)
    before = store.manifest()
    operations.delete(store, ["d1"])
    assert live_doc_ids(store) == {"d0", "d2"}
    assert live_doc_ids(store, before) == {"d0", "d1", "d2"}
    assert live_doc_ids(store, among=["d1", "d2", "d9"]) == {"d2"}
