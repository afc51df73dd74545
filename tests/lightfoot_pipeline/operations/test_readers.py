"""Who may read what: every ingested document gets its readers row; a change of readers alone
rewrites that row and nothing else (no model call, no graph work); deletion, rebuild and migration
keep the rows exact; ``operations.set_readers`` changes them in one commit."""

from __future__ import annotations

import dataclasses
import json

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.ingest.readers import ReadersError
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.operations.config import IndexConfigError
from lightfoot_pipeline.provenance.batches import explain_batch
from lightfoot_pipeline.provenance.documents import explain_document
from lightfoot_pipeline.store.batches import READERS, Batch, batch_log, writing_batch
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENT_READERS, GRAPH_QUEUE, INDEX_TABLES

EMBEDDER = HashingEmbedder(dim=32)


class CountingExtractor(ReplayExtractor):
    """Replays recorded extractions and counts the passages it is asked for."""

    def __init__(self, records) -> None:
        super().__init__(records)
        self.asked = 0

    def extract(self, passages, progress=None):
        self.asked += len(passages)
        return super().extract(passages, progress)


def corpus(n: int = 6) -> tuple[list[Document], dict[str, dict]]:
    names = ["Harbor Bridge", "Quarry Lane", "Orchard Hill", "Harbour Bridge", "Lantern Square", "Falcon Tower"]
    documents, records = [], {}
    for i in range(n):
        a, b = names[i % len(names)], names[(i + 1) % len(names)]
        doc_id = f"doc-{i}"
        documents.append(Document(doc_id, f"Title {i}", f"{a} stands beside {b} in passage {i}."))
        records[doc_id] = {"doc_id": doc_id, "entities": [{"name": a, "type": "place", "description": None},
                                                           {"name": b, "type": "place", "description": None}],
                           "facts": [[a, "stands beside", b]]}
    return documents, records


def readers_rows(store: Store) -> dict[str, str]:
    return dict(store.read(DOCUMENT_READERS.name).select("doc_id", "readers").iter_rows())


def index_rows(store: Store) -> dict[str, list[tuple]]:
    return {spec.name: sorted(store.read(spec.name).select(spec.columns).rows(), key=repr) for spec in INDEX_TABLES}


def test_every_ingested_document_gets_its_readers_given_or_the_default(store, monkeypatch):
    documents, records = corpus(3)
    documents[0] = dataclasses.replace(documents[0], readers=("hr", "legal"))
    documents[1] = dataclasses.replace(documents[1], readers=())
    operations.ingest(store, documents[:2], ReplayExtractor(records), EMBEDDER)
    monkeypatch.setenv("LIGHTFOOT_DEFAULT_READERS", "nobody")
    operations.ingest(store, documents[2:], ReplayExtractor(records), EMBEDDER)
    assert readers_rows(store) == {"doc-0": "hr,legal", "doc-1": "", "doc-2": ""}
    assert explain_document(store, "doc-0", preview=False).document["readers"] == ["hr", "legal"]
    assert explain_document(store, "doc-1", preview=False).document["readers"] == []


def test_a_document_that_names_no_readers_keeps_its_stored_ones(store):
    documents, records = corpus(2)
    operations.ingest(store, [dataclasses.replace(documents[0], readers=("legal",)), documents[1]],
                      ReplayExtractor(records), EMBEDDER)
    report = operations.ingest(store, documents, ReplayExtractor(records), EMBEDDER)  # readers None
    assert (report.unchanged, report.readers_changed) == (2, 0)
    assert readers_rows(store) == {"doc-0": "legal", "doc-1": "public"}


def test_a_change_of_readers_alone_rewrites_only_the_readers_row_with_no_model_call(store):
    documents, records = corpus()
    operations.ingest(store, documents, ReplayExtractor(records), EMBEDDER)
    before = store.manifest()
    rows_before = index_rows(store)
    extractor = CountingExtractor(records)
    changed = [dataclasses.replace(d, readers=("legal",)) if d.doc_id in ("doc-1", "doc-4") else d for d in documents]
    batch = Batch("test-readers-batch", "run-1")
    with writing_batch(batch):
        report = operations.ingest(store, changed, extractor, EMBEDDER, link=False)
    assert extractor.asked == 0 and report.model_calls == 0
    assert (report.ingested, report.replaced, report.readers_changed, report.unchanged) == (0, 0, 2, 4)
    assert report.readers_changed_doc_ids == ["doc-1", "doc-4"]
    after = store.manifest()
    written = {name for name, version in after.versions.items() if before.versions.get(name) != version}
    assert written == {DOCUMENT_READERS.name, "batch_documents"}, "nothing else is rewritten"
    assert store.read(GRAPH_QUEUE.name).height == 0, "nothing waits for the graph stage"
    assert after.details["readers_changed"] == 2
    rows_after = index_rows(store)
    assert {k: v for k, v in rows_after.items() if k != DOCUMENT_READERS.name} == {
        k: v for k, v in rows_before.items() if k != DOCUMENT_READERS.name}
    log = batch_log(store).filter(pl.col("batch") == batch.batch_id)
    assert sorted(log.filter(pl.col("action") == READERS).get_column("doc_id").to_list()) == ["doc-1", "doc-4"]
    explained = explain_batch(store, batch.batch_id)
    assert explained.counts[READERS] == 2
    assert {d["doc_id"]: d["status"] for d in explained.documents}["doc-1"] == "unchanged"


@pytest.mark.slow
def test_a_deletion_removes_the_readers_row_and_equals_a_fresh_build_of_the_rest(tmp_path):
    documents, records = corpus()
    documents = [dataclasses.replace(d, readers=("legal",)) if i % 2 else d for i, d in enumerate(documents)]
    full = Store(str(tmp_path / "full"))
    operations.ingest(full, documents, ReplayExtractor(records), EMBEDDER)
    operations.delete(full, ["doc-1", "doc-2"], erase=True)
    assert set(readers_rows(full)) == {"doc-0", "doc-3", "doc-4", "doc-5"}
    fresh = Store(str(tmp_path / "fresh"))
    operations.ingest(fresh, [d for d in documents if d.doc_id not in ("doc-1", "doc-2")], ReplayExtractor(records),
                      EMBEDDER)
    assert index_rows(full) == index_rows(fresh)
    assert fingerprint(full).as_dict() == fingerprint(fresh).as_dict()


@pytest.mark.slow
def test_rebuild_copies_the_readers_and_rebuilds_a_subset_as_a_fresh_index_of_it(tmp_path):
    documents, records = corpus()
    documents = [dataclasses.replace(d, readers=("legal",)) if i % 3 == 0 else d for i, d in enumerate(documents)]
    source = Store(str(tmp_path / "source"))
    operations.ingest(source, documents, ReplayExtractor(records), EMBEDDER)
    whole = Store(str(tmp_path / "whole"))
    operations.rebuild(source, whole, EMBEDDER)
    assert index_rows(whole) == index_rows(source)
    subset = ["doc-0", "doc-2", "doc-3"]
    part = Store(str(tmp_path / "part"))
    operations.rebuild(source, part, EMBEDDER, doc_ids=subset)
    fresh = Store(str(tmp_path / "fresh"))
    operations.ingest(fresh, [d for d in documents if d.doc_id in subset], ReplayExtractor(records), EMBEDDER)
    assert readers_rows(part) == {"doc-0": "legal", "doc-2": "public", "doc-3": "legal"}
    assert index_rows(part) == index_rows(fresh)
    assert fingerprint(part).as_dict() == fingerprint(fresh).as_dict()
    with pytest.raises(IndexConfigError, match="not live"):
        operations.rebuild(source, Store(str(tmp_path / "other")), EMBEDDER, doc_ids=["doc-0", "no-such-doc"])


def test_migration_keeps_the_readers(store):
    documents, records = corpus(3)
    operations.ingest(store, [dataclasses.replace(documents[0], readers=("hr",)), *documents[1:]],
                      ReplayExtractor(records), EMBEDDER)
    before = readers_rows(store)
    operations.migrate(store, EMBEDDER, n_buckets=4)
    assert readers_rows(store) == before == {"doc-0": "hr", "doc-1": "public", "doc-2": "public"}


def test_set_readers_changes_live_documents_in_one_commit_and_refuses_unknown_ones(store):
    documents, records = corpus(3)
    operations.ingest(store, documents, ReplayExtractor(records), EMBEDDER)
    seq, rows_before = store.manifest().seq, index_rows(store)
    with pytest.raises(ReadersError, match=r"not live.*'gone'"):
        operations.set_readers(store, {"doc-0": ["legal"], "gone": ["legal"]})
    with pytest.raises(ReadersError, match="not a group name"):
        operations.set_readers(store, {"doc-0": ["Legal Team!"]})
    assert store.manifest().seq == seq, "a refused change commits nothing"
    report = operations.set_readers(store, {"doc-0": ["legal", "hr"], "doc-1": "public", "doc-2": []},
                                    reason="review 12")
    assert report.changed == {"doc-0": {"before": ["public"], "after": ["hr", "legal"]},
                              "doc-2": {"before": ["public"], "after": []}}
    assert report.unchanged == {"doc-1": ["public"]} and report.model_calls == 0
    manifest = store.manifest()
    assert report.seq == manifest.seq == seq + 1 and manifest.operation == "readers"
    assert manifest.details["reason"] == "review 12" and manifest.details["readers_changed"] == 2
    assert readers_rows(store) == {"doc-0": "hr,legal", "doc-1": "public", "doc-2": ""}
    rows_after = index_rows(store)
    assert {k: v for k, v in rows_after.items() if k != DOCUMENT_READERS.name} == {
        k: v for k, v in rows_before.items() if k != DOCUMENT_READERS.name}
    again = operations.set_readers(store, {"doc-0": "hr,legal"})
    assert again.changed == {} and again.seq == 0 and store.manifest().seq == manifest.seq
    assert "Title" not in json.dumps(manifest.details, default=str), "no content in the commit"
