"""Provenance in a view equals the provenance of a store built from the readable documents alone:
entities (by every name of the reference store, and by names only unreadable documents give),
facts and documents, readable or not; unreadable ones answer exactly as unknown ones."""

from __future__ import annotations

import random

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL
from lightfoot_pipeline.permissions.provenance import ProvenanceStores, ViewStore, provenance_store
from lightfoot_pipeline.permissions.views import ViewCache
from lightfoot_pipeline.provenance import ExplainError, explain_document, explain_entity, explain_fact
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import ALIASES, FACTS
from tests.lightfoot_pipeline.permissions.conftest import PRINCIPALS

PRINCIPAL = PRINCIPALS[1]  # staff-member: the public documents and staff's
SAMPLED = 40


@pytest.fixture(scope="module")
def stores(restricted_sample, readable_store):
    """The restricted sample's store, the principal's ViewStore of it, and a store of its
    readable documents alone."""
    root, readers = restricted_sample
    store = Store(str(root))
    readable = {d for d, groups in readers.items() if PRINCIPAL.may_read(groups)}
    reference = readable_store(PRINCIPAL)
    view = provenance_store(store, PRINCIPAL, store.manifest())
    assert isinstance(view, ViewStore) and view.documents == readable
    return store, view, reference, readers


def plain(record: dict) -> dict:
    """An explanation without what names the store rather than the documents: its commit, and
    the batches and runs that wrote each source (the two stores were written by different runs)."""
    return {k: v for k, v in record.items() if k not in ("store_seq", "sources", "batches")}


def entities(source, name: str) -> list[dict]:
    return [plain(e.as_dict()) for e in explain_entity(source, name)]


def fact(source, fact_id: str) -> dict:
    return plain(explain_fact(source, fact_id).as_dict())


def document(source, doc_id: str) -> dict:
    return plain(explain_document(source, doc_id, preview=False).as_dict())


def outcome(fn, source, key: str) -> tuple[str, object]:
    """What ``fn(source, key)`` answers, or its error's line with the store's address taken out."""
    try:
        return "found", fn(source, key)
    except ExplainError as err:
        return "error", err.line().replace(source.uri, "STORE")


@pytest.mark.slow
def test_entities_facts_and_documents_equal_those_of_a_store_of_the_readable_documents(stores):
    store, view, reference, readers = stores
    rng = random.Random(27)
    names = reference.read(ALIASES.name, columns=["name"]).get_column("name").unique().sort().to_list()
    hidden = sorted(set(store.read(ALIASES.name, columns=["name"]).get_column("name")) - set(names))
    assert hidden, "some names are given by unreadable documents only"
    asked = rng.sample(names, min(SAMPLED, len(names))) + rng.sample(hidden, min(SAMPLED, len(hidden)))
    asked += [name[:4] for name in rng.sample(hidden, 5)]  # the "names that contain it" hints
    for name in asked:
        assert outcome(entities, view, name) == outcome(entities, reference, name), name

    facts = store.read(FACTS.name, columns=["fact_id"]).get_column("fact_id").sort().to_list()
    for fact_id in rng.sample(facts, SAMPLED):
        assert outcome(fact, view, fact_id) == outcome(fact, reference, fact_id), fact_id

    for doc_id in rng.sample(sorted(readers), SAMPLED):
        mine = outcome(document, view, doc_id)
        assert mine == outcome(document, reference, doc_id), doc_id
        assert (mine[0] == "found") == PRINCIPAL.may_read(readers[doc_id])


@pytest.mark.slow
def test_a_deleted_document_is_answered_as_one_never_held_but_to_the_operator(stores, tmp_path):
    """A principal who reads every live document still never sees the deletion log."""
    import shutil

    store, _, _, _ = stores
    shutil.copytree(store.uri, tmp_path / "store")
    copy = Store(str(tmp_path / "store"))
    readers = copy.read("document_readers", columns=["doc_id", "readers"])
    restricted = readers.filter(pl.col("readers") != "public").get_column("doc_id").to_list()
    operations.delete(copy, restricted)  # every live document now public
    manifest = copy.manifest()
    every = provenance_store(copy, PRINCIPALS[0], manifest)
    assert isinstance(every, ViewStore) and every.documents is None
    assert explain_document(copy, restricted[0], preview=False).status == "deleted"
    with pytest.raises(ExplainError, match="is not in the store and was never deleted"):
        explain_document(every, restricted[0], preview=False)
    assert provenance_store(copy, OPERATOR_PRINCIPAL, manifest) is copy


@pytest.mark.slow
def test_the_snapshots_view_is_reused_at_its_commit_and_kept_per_groups(stores, hashing_embedder):
    store, derived, _, _ = stores
    export_snapshot(store, hashing_embedder)
    snapshot = load_snapshot(store)
    view = ViewCache(snapshot).view(PRINCIPAL)
    manifest = store.manifest()
    assert snapshot.info.store_seq == manifest.seq
    reused = provenance_store(store, PRINCIPAL, manifest, view)
    assert isinstance(reused, ViewStore) and reused.tables is view.tables and reused.key == derived.key
    for name, table in view.tables.items():
        assert derived.tables[name].sort(table.columns).equals(table.sort(table.columns)), name
    kept = ProvenanceStores(store)
    assert kept.get(PRINCIPAL, manifest) is kept.get(PRINCIPAL, manifest)
    assert kept.get(OPERATOR_PRINCIPAL, manifest) is store
