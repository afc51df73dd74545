"""A principal's view equals the snapshot of a store built from its readable documents alone."""

from __future__ import annotations

import gc
import random
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from lightfoot_pipeline.ingest.dataset import load_questions
from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL
from lightfoot_pipeline.permissions.views import (
    NODE_TABLES,
    Narrowing,
    ViewCache,
    narrowed_tables,
    readable_documents,
    reader_view,
    tables_of,
    view_snapshot,
)
from lightfoot_pipeline.retrieval.explain import explain_query
from lightfoot_pipeline.retrieval.retrieve import Retriever
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.fact_index import sample_rows
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store.store import Store
from tests.lightfoot_pipeline.permissions.compare import assert_same_snapshot
from tests.lightfoot_pipeline.permissions.conftest import PRINCIPALS
from tests.lightfoot_pipeline.snapshot.test_spill import mapped_without_a_name


@pytest.fixture(scope="module")
def questions(sample_dir):
    return [q.question for q in load_questions(sample_dir / "questions-dev.jsonl")]


def _ranking(retriever: Retriever, question: str) -> dict:
    result = retriever.retrieve(question, top_k=10)
    explained = explain_query(retriever, question, top_k=10)
    for key in ("snapshot_id", "pagerank", "reranker"):
        explained.pop(key)
    return {
        "passages": [(h.chunk_id, h.pagerank_score, h.dense_score) for h in result.passages],
        "facts": [(f.fact_id, f.similarity, tuple(e["chunk_id"] for e in f.evidence)) for f in result.seed_facts],
        "explained": explained,
    }


@pytest.mark.slow
def test_a_snapshot_of_only_public_documents_keeps_no_access_tables(sample_store_built, hashing_embedder, tmp_path):
    import shutil

    shutil.copytree(sample_store_built, tmp_path / "store")
    store = Store(str(tmp_path / "store"))
    export_snapshot(store, hashing_embedder)
    snapshot = load_snapshot(store)
    assert snapshot.access is None
    assert readable_documents(snapshot, PRINCIPALS[0]) is None
    assert reader_view(snapshot, PRINCIPALS[0]).snapshot is snapshot


def test_the_operator_reads_the_whole_snapshot(served):
    snapshot = served[0]
    assert snapshot.access is not None
    assert reader_view(snapshot, OPERATOR_PRINCIPAL).snapshot is snapshot


@pytest.mark.slow
@pytest.mark.parametrize("principal", PRINCIPALS, ids=[p.name for p in PRINCIPALS])
def test_each_view_equals_a_store_of_its_readable_documents(principal, served, questions, readable_store,
                                                            hashing_embedder):
    snapshot, readers, store = served
    readable = {d for d, groups in readers.items() if principal.may_read(groups)}
    assert 0 < len(readable) < len(readers)
    view = ViewCache(snapshot).view(principal)
    assert view.documents == readable
    reference = load_snapshot(readable_store(principal))
    mine, theirs = view.snapshot, reference
    assert_same_snapshot(mine, theirs)
    # Not a view that merely hides passages: entities joined through an unreadable name split, facts
    # whose every source is unreadable are gone, and the others count only readable sources.
    whole = store.read("aliases")
    spread = (view.tables["aliases"].select("name", "type", pl.col("entity_id").alias("in_view"))
              .join(whole.select("name", "type", "entity_id"), on=["name", "type"])
              .group_by("entity_id").agg(pl.col("in_view").n_unique().alias("parts")))
    assert spread.filter(pl.col("parts") > 1).height > 0
    assert mine.facts.height < snapshot.facts.height
    counted = mine.facts.select("fact_id", "n_sources").join(
        snapshot.facts.select("fact_id", pl.col("n_sources").alias("all_sources")), on="fact_id")
    assert counted.filter(pl.col("n_sources") < pl.col("all_sources")).height > 0
    ours, fresh = Retriever(mine, hashing_embedder), Retriever(theirs, hashing_embedder)
    for question in questions:
        assert _ranking(ours, question) == _ranking(fresh, question), question


@pytest.mark.slow
def test_a_views_tables_and_graph_are_files_without_a_name_that_go_with_the_view(served):
    """A view's tables, node tables and graph arrays are read through mappings of scratch files
    whose folder is gone: nothing of them is left on disk by name, and their pages are the
    kernel's to reclaim. Letting go of the view lets go of the files."""
    snapshot, _, _ = served
    before = mapped_without_a_name()
    cache = ViewCache(snapshot)
    view = cache.view(PRINCIPALS[0])
    assert view.tables is not None and not view.whole
    files = mapped_without_a_name() - before
    folders = {Path(name.removesuffix(" (deleted)")).parent for name in files}
    assert len(folders) == 1 and next(iter(folders)).name.startswith("lightfoot-view-")
    assert not next(iter(folders)).exists()
    # 8 tables, 4 node tables and 3 graph arrays (a column's pages may be mapped more than once)
    assert len(files) == 15
    assert not view.snapshot.adjacency.data.flags.writeable
    # The same tables, node tables and graph as those derived in memory.
    tables = tables_of(snapshot.access, view.documents)
    for name, frame in tables.items():
        assert_frame_equal(_rows(view.tables[name]), _rows(frame))
    derived = view_snapshot(snapshot, view.documents, tables)
    for name in NODE_TABLES:
        assert getattr(view.snapshot, name).equals(getattr(derived, name)), name
    assert (view.snapshot.adjacency != derived.adjacency).nnz == 0
    # The base of later narrowings, derived by prepare, is in files too.
    cache.prepare()
    assert len(mapped_without_a_name() - before - files) == 8
    del view, derived, tables, cache
    gc.collect()
    assert not mapped_without_a_name() - before


def _rows(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns)


@pytest.mark.parametrize("seed", range(4))
def test_a_view_narrowed_from_a_base_equals_one_derived_from_the_access_tables(served, seed):
    """narrowed_tables takes documents from a base's tables (the whole snapshot's, or another
    view's) and derives again only the entities and facts they touched: the same tables, row for
    row, as deriving the remaining documents from the access tables. The documents taken are a
    random few, a tenth, and those sharing the most-used names (which split the largest entities)."""
    snapshot, readers, _ = served
    rng = random.Random(seed)
    every = sorted(readers)
    base_documents = frozenset(every) if seed % 2 == 0 else frozenset(rng.sample(every, len(every) * 4 // 5))
    base = tables_of(snapshot.access, base_documents)
    forms = base["forms"]
    busiest = (forms.group_by("type", "name").agg(pl.col("doc_id").n_unique().alias("n")).sort("n", descending=True)
               .head(3).join(forms, on=["type", "name"]).get_column("doc_id").unique().sort().to_list())
    pool = sorted(base_documents)
    for lost in (rng.sample(pool, 3), rng.sample(pool, len(pool) // 10), busiest[: len(busiest) // 2 + 1]):
        remaining = base_documents - frozenset(lost)
        narrowed = narrowed_tables(base, frozenset(lost), snapshot.access.settings)
        derived = tables_of(snapshot.access, remaining)
        assert set(narrowed) == set(derived)
        for name, frame in derived.items():
            assert_frame_equal(_rows(narrowed[name]), _rows(frame), check_dtypes=False)
    assert narrowed_tables(base, frozenset(), snapshot.access.settings)["entities"].equals(base["entities"])


def test_under_a_narrowing_the_cache_derives_views_from_its_bases_and_they_equal_fresh_ones(served):
    """A cache under a narrowing builds each view from the inherited view that lost documents, or
    from the whole snapshot's tables: the view is the one reader_view derives from the access
    tables (same id, fingerprint, tables and graph)."""
    snapshot, _, _ = served
    staff = next(p for p in PRINCIPALS if p.name == "staff-member")
    before = ViewCache(snapshot)
    before.prepare()
    held = before.view(staff)
    lost = sorted(held.documents)[:5]
    narrowing = Narrowing(snapshot.info.store_seq + 1, frozenset(lost[:2]),
                          tuple((d, "nobody") for d in lost[2:]))
    after = ViewCache(snapshot, narrowing=narrowing, inherit=before)
    assert after.whole is before.whole and after._base(held.documents - set(lost)) is not None
    for principal in (staff, OPERATOR_PRINCIPAL):
        mine, theirs = after.view(principal), reader_view(snapshot, principal, narrowing)
        gone = set(lost) if principal is staff else set(lost[:2])  # the operator reads what nobody does
        assert mine.documents == theirs.documents and not gone & mine.documents
        assert mine.snapshot.info.snapshot_id == theirs.snapshot.info.snapshot_id
        assert mine.snapshot.info.fingerprint == theirs.snapshot.info.fingerprint
        assert (mine.snapshot.adjacency != theirs.snapshot.adjacency).nnz == 0
        for name, frame in theirs.tables.items():
            assert_frame_equal(_rows(mine.tables[name]), _rows(frame), check_dtypes=False)


@pytest.mark.slow
def test_a_narrowed_view_keeps_its_base_fact_index_when_its_training_sample_is_unchanged(
        served, hashing_embedder, tmp_path):
    """With a fact index (every table indexed here), a view narrowed from its base keeps the base's
    centroids when the documents taken held none of the facts its centroids were trained on, and
    trains its own otherwise: either way the index a fresh derivation builds."""
    _, _, store = served
    copy = tmp_path / "store"
    shutil.copytree(store.uri, copy, ignore=shutil.ignore_patterns("snapshots"))  # exported again, indexed
    export_snapshot(Store(str(copy)), hashing_embedder, index_min_rows=1)
    snapshot = load_snapshot(Store(str(copy)))
    staff = next(p for p in PRINCIPALS if p.name == "staff-member")
    before = ViewCache(snapshot)
    before.prepare()
    held = before.view(staff)
    facts = held.tables["fact_sources"]
    trained = set(np.sort(held.snapshot.facts.get_column("fact_id").to_numpy())[
        :len(sample_rows(held.snapshot.facts.get_column("fact_id").to_numpy(), len(held.snapshot.fact_index.offsets) - 1))])
    asserting = facts.group_by("doc_id").agg(pl.col("fact_id").is_in(list(trained)).any().alias("trained"))
    untouched = sorted(asserting.filter(~pl.col("trained")).get_column("doc_id").to_list())[:3]
    alone = facts.group_by("fact_id").agg(pl.col("doc_id").unique()).filter(
        pl.col("doc_id").list.len() == 1, pl.col("fact_id").is_in(list(trained)))  # a sample fact of one document
    touched = sorted(alone.get_column("doc_id").list.first().unique().to_list())[:1]
    for lost, kept in ((untouched, True), (touched, False)):
        narrowing = Narrowing(snapshot.info.store_seq + 1, frozenset(lost))
        after = ViewCache(snapshot, narrowing=narrowing, inherit=before)
        mine, theirs = after.view(staff), reader_view(snapshot, staff, narrowing)
        assert (mine.snapshot.fact_index.centroids is held.snapshot.fact_index.centroids) is kept
        assert np.array_equal(mine.snapshot.fact_index.centroids, theirs.snapshot.fact_index.centroids)
        assert np.array_equal(mine.snapshot.fact_index.offsets, theirs.snapshot.fact_index.offsets)
        assert mine.snapshot.facts.equals(theirs.snapshot.facts)
        assert np.array_equal(np.asarray(mine.snapshot.fact_vectors), np.asarray(theirs.snapshot.fact_vectors))
