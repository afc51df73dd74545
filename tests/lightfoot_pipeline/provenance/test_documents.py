"""explain doc: a document's contribution, and a deletion preview equal to what the deletion does."""

from __future__ import annotations

import shutil

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.provenance import ExplainError
from lightfoot_pipeline.provenance.documents import explain_document, preview_deletion
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import ENTITIES, FACTS, SYNONYM_EDGES


@pytest.fixture(scope="module")
def original(tmp_path_factory, sample_documents, sample_records):
    root = tmp_path_factory.mktemp("documents") / "store"
    operations.ingest(Store(str(root)), sample_documents[:200], ReplayExtractor(sample_records), HashingEmbedder(dim=32))
    return root


@pytest.fixture
def built(original, tmp_path):
    """A copy of the module's store, for a test to delete from."""
    shutil.copytree(original, tmp_path / "store")
    return Store(str(tmp_path / "store"))


def _rows(store, spec, columns):
    return {tuple(r) for r in store.read(spec.name, columns=columns).iter_rows()}


def _most_shared(store, n: int) -> list[str]:
    """The documents whose names other documents share most (their deletion changes entities)."""
    mentions = store.read("mentions", columns=["entity_id", "doc_id"]).unique()
    shared = mentions.join(mentions.group_by("entity_id").len().filter(pl.col("len") > 1), on="entity_id")
    return shared.group_by("doc_id").len().sort(["len", "doc_id"], descending=[True, False]).head(n) \
        .get_column("doc_id").to_list()


@pytest.mark.slow
def test_the_preview_is_what_the_deletion_then_does(built):
    store = built
    chosen = _most_shared(store, 4) + sorted(store.read("documents").get_column("doc_id").to_list())[:2]
    seen_changed = seen_edges = 0
    for doc_id in chosen:
        digest = fingerprint(store).digest
        seq = store.manifest().seq
        explanation = explain_document(store, doc_id)
        assert store.manifest().seq == seq and fingerprint(store).digest == digest, "the preview wrote"
        preview = explanation.preview
        entities = _rows(store, ENTITIES, ["entity_id", "n_aliases", "n_chunks"])
        facts = _rows(store, FACTS, ["fact_id", "n_sources"])
        edges = _rows(store, SYNONYM_EDGES, ["entity_a", "entity_b"])
        report = operations.delete(store, [doc_id])
        entities_after = _rows(store, ENTITIES, ["entity_id", "n_aliases", "n_chunks"])
        facts_after = _rows(store, FACTS, ["fact_id", "n_sources"])
        edges_after = _rows(store, SYNONYM_EDGES, ["entity_a", "entity_b"])
        ids, ids_after = {e[0] for e in entities}, {e[0] for e in entities_after}
        assert {e["entity_id"] for e in preview.entities_removed} == ids - ids_after
        assert {e["entity_id"] for e in preview.entities_added} == ids_after - ids
        assert {e["entity_id"] for e in preview.entities_changed} == {e[0] for e in entities_after - entities} & ids
        assert {f["fact_id"] for f in preview.facts_dropped} == {f[0] for f in facts} - {f[0] for f in facts_after}
        assert {f["fact_id"] for f in preview.facts_changed} == {f[0] for f in facts_after - facts}
        assert {(e["entity_a"], e["entity_b"]) for e in preview.synonym_edges_removed} == edges - edges_after
        assert {(e["entity_a"], e["entity_b"]) for e in preview.synonym_edges_added} == edges_after - edges
        assert preview.graph.as_dict() == report.graph.as_dict()
        assert preview.passages_removed == report.passages_removed == len(explanation.passages)
        seen_changed += len(preview.entities_changed)
        seen_edges += len(preview.synonym_edges_removed)
    assert seen_changed and seen_edges, "the chosen documents exercise changed entities and removed edges"


def test_what_a_document_contributed(built, sample_records):
    store = built
    doc_id = _most_shared(store, 1)[0]
    e = explain_document(store, doc_id, preview=False)
    assert e.status == "live" and e.preview is None
    forms = store.read("forms").filter(pl.col("doc_id") == doc_id)
    assert {(n["name"], n["type"]) for n in e.names} == {tuple(r) for r in forms.select("name", "type").iter_rows()}
    assert all(n["entity_id"] for n in e.names), "every live name belongs to an entity"
    assert {x["entity_id"] for x in e.entities} == {n["entity_id"] for n in e.names}
    sources = store.read("fact_sources").filter(pl.col("doc_id") == doc_id)
    assert sorted(f["fact_id"] for f in e.facts) == sorted(sources.get_column("fact_id").to_list())
    assert all(f["n_sources"] >= 1 for f in e.facts)
    assert [p["status"] for p in e.passages] == ["ok"] * len(e.passages)


def test_a_deleted_document_is_explained_by_its_deletion_and_an_unknown_one_is_refused(built):
    store = built
    doc_id = sorted(store.read("documents").get_column("doc_id").to_list())[0]
    operations.delete(store, [doc_id], reason="asked by its author")
    e = explain_document(store, doc_id)
    assert e.status == "deleted" and e.deletion["reason"] == "asked by its author" and e.names == []
    with pytest.raises(ExplainError, match="never deleted"):
        explain_document(store, "no-such-document")


def test_a_preview_of_several_documents_and_of_none(built):
    store = built
    ids = _most_shared(store, 3)
    preview = preview_deletion(store, ids)
    report = operations.delete(store, ids)
    assert preview.graph.as_dict() == report.graph.as_dict()
    assert preview_deletion(store, ids).counts() == {k: 0 for k in preview.counts()}
