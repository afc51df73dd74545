"""The engine's operations: the index config a store is built with, adopted once and then kept."""

from __future__ import annotations

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.settings import IndexSettings


def test_a_new_store_adopts_the_config_only_with_an_embedder(store):
    settings = IndexSettings()
    with store.transaction() as tx:
        operations.check_config(tx, settings)
        assert tx.config == {}, "a graph update that embeds nothing adopts nothing"
        operations.check_config(tx, settings, HashingEmbedder(dim=32))
        assert tx.config == operations.index_config(HashingEmbedder(dim=32).model_id, 32, settings)


def test_a_store_refuses_other_settings_with_or_without_an_embedder_and_another_embedder(store):
    built = HashingEmbedder(dim=32)
    with store.transaction() as tx:
        operations.check_config(tx, IndexSettings(), built)
        tx.commit("config", {})
    other = IndexSettings(entity_threshold=0.95)
    with store.transaction() as tx:
        operations.check_config(tx, IndexSettings())
        operations.check_config(tx, IndexSettings(), built)
        with pytest.raises(operations.IndexConfigError, match="built with settings"):
            operations.check_config(tx, other)
        with pytest.raises(operations.IndexConfigError, match="built with settings"):
            operations.check_config(tx, other, built)
        with pytest.raises(operations.IndexConfigError, match="name vectors come from"):
            operations.check_config(tx, IndexSettings(), HashingEmbedder(dim=64))


def test_an_ingest_reports_the_seconds_of_each_stage(store, sample_documents, sample_records):
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor

    report = operations.ingest(store, sample_documents[:40], ReplayExtractor(sample_records), HashingEmbedder(dim=32))
    stages = report.stage_seconds
    assert set(stages) == {"extract", "documents", "graph", "links", "commit"}
    assert all(v >= 0 for v in stages.values())
    assert stages["links"] <= stages["graph"]
    assert sum(v for k, v in stages.items() if k != "links") <= report.seconds + 0.01
    assert report.as_dict()["stage_seconds"] == stages


def test_graph_changes_in_pieces_add_up_and_keep_the_sizes_at_their_ends():
    from lightfoot_pipeline.index.reconcile import GraphChange

    first = GraphChange(names_removed=3, entities_before=10, entities_after=8, facts_before=5, facts_after=4)
    later = GraphChange(names_removed=2, entities_before=8, entities_after=7, facts_before=4, facts_after=2)
    both = first.then(later)
    assert (both.names_removed, both.entities_before, both.entities_after, both.facts_before, both.facts_after) == (
        5, 10, 7, 5, 2)


@pytest.mark.slow  # 2.3 s: three small builds; the fast tier keeps GraphChange.then's own test
def test_a_deletion_larger_than_a_piece_commits_in_pieces_each_exact(tmp_path, sample_documents, sample_records,
                                                                      monkeypatch):
    """Seven documents with pieces of three: three commits, each leaving what a fresh build of the
    documents left then gives; the report counts them all, and the erasure runs once, after the last."""
    import json

    from lightfoot_pipeline.ingest.extraction import ReplayExtractor
    from lightfoot_pipeline.settings import DELETION_PIECE_ENV
    from lightfoot_pipeline.store.fingerprint import fingerprint
    from lightfoot_pipeline.store.store import Store
    from lightfoot_pipeline.store.transaction import Transaction

    embedder, documents = HashingEmbedder(dim=32), sample_documents[:24]

    def built(name: str, docs) -> Store:
        made = Store(str(tmp_path / name))
        operations.ingest(made, docs, ReplayExtractor(sample_records), embedder)
        return made

    store = built("store", documents)
    before = store.manifest().seq
    after_each: list[str] = []
    commit = Transaction.commit

    def noting(tx, operation, details=None):
        manifest = commit(tx, operation, details)
        if operation == "delete":
            after_each.append(fingerprint(Store(store.uri), manifest).digest)
        return manifest

    monkeypatch.setattr(Transaction, "commit", noting)
    monkeypatch.setenv(DELETION_PIECE_ENV, "3")
    doomed = [d.doc_id for d in documents[:7]]
    report = operations.delete(store, [*doomed, "not-there", doomed[0]], erase=True)
    assert sorted(report.deleted) == sorted(doomed) and report.not_found == ["not-there"]
    history = store.history().filter(pl.col("seq") > before)
    assert history.get_column("operation").to_list()[:3] == ["delete"] * 3
    assert [json.loads(d).get("piece") for d in history.get_column("details").to_list()[:3]] == [1, 2, 3]
    assert "delete" not in history.get_column("operation").to_list()[3:]  # the erasure's commits come after
    assert report.erase is not None and sorted(report.erase["documents"]) == sorted(doomed)
    # The pieces are [d0 d1 d2], [d3 d4 d5], [d6 not-there]: each commit is a fresh build of the rest.
    assert after_each[0] == fingerprint(built("fresh-3", documents[3:])).digest
    assert after_each[2] == fingerprint(built("fresh-7", documents[7:])).digest
    assert fingerprint(Store(store.uri)).digest == after_each[2]
    assert report.graph.entities_after < report.graph.entities_before
