"""The graph stage asks for name vectors only when added names need them.

``reconcile_graph`` takes the name-vector cache or a function that returns it: the function is
called once when the change adds names, never for a change that only removes (a deletion), so
the graph step of a deletion run loads no embedder. Either way the store ends where a linking
ingest and delete end.
"""

from __future__ import annotations

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.index.reconcile import reconcile_graph
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.vectors import name_vector_cache


def _graph_stage(store: Store, embedder, asked: list[str]) -> None:
    settings = IndexSettings()
    with store.transaction() as tx:
        operations.check_config(tx, settings, None)

        def vectors():
            asked.append("vectors")
            operations.check_config(tx, settings, embedder)
            return name_vector_cache(store, embedder)

        reconcile_graph(tx, settings, vectors)
        tx.commit("graph", {})


@pytest.mark.slow
def test_the_vectors_are_asked_for_once_for_added_names_and_never_for_a_deletion(
        tmp_path, sample_documents, sample_records, hashing_embedder):
    documents = sample_documents[:12]
    deferred, linked = Store(str(tmp_path / "deferred")), Store(str(tmp_path / "linked"))
    extractor = ReplayExtractor(sample_records)
    asked: list[str] = []

    operations.ingest(deferred, documents, extractor, None, link=False)
    _graph_stage(deferred, hashing_embedder, asked)
    assert asked == ["vectors"]

    operations.delete(deferred, [documents[0].doc_id, documents[5].doc_id], link=False)
    _graph_stage(deferred, hashing_embedder, asked)
    assert asked == ["vectors"]  # removed names need no vector

    operations.ingest(linked, documents, extractor, hashing_embedder)
    operations.delete(linked, [documents[0].doc_id, documents[5].doc_id])
    assert fingerprint(deferred).digest == fingerprint(linked).digest
