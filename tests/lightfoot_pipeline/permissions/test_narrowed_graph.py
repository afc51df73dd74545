"""A view's graph narrowed from its base's graph equals the one assembled from its own tables, and
a view holds its snapshot's vectors, not a copy of them."""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest

from lightfoot_pipeline.permissions.narrowed_graph import narrow_graph
from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL
from lightfoot_pipeline.permissions.views import (
    Narrowing,
    ViewCache,
    narrowed_tables_and_entities,
    tables_of,
    view_snapshot,
)
from lightfoot_pipeline.snapshot.shared_rows import SharedRows
from tests.lightfoot_pipeline.permissions.conftest import PRINCIPALS


def _lost_sets(tables: dict[str, pl.DataFrame], documents: frozenset[str], rng: random.Random) -> list[frozenset]:
    """A random few documents, a tenth of them, and those sharing the most-used names (which
    split the largest entities and take facts from pairs of entities that stay)."""
    forms = tables["forms"]
    busiest = (forms.group_by("type", "name").agg(pl.col("doc_id").n_unique().alias("n")).sort("n", descending=True)
               .head(3).join(forms, on=["type", "name"]).get_column("doc_id").unique().sort().to_list())
    pool = sorted(documents)
    return [frozenset(rng.sample(pool, 3)), frozenset(rng.sample(pool, len(pool) // 10)),
            frozenset(busiest[: len(busiest) // 2 + 1])]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
def test_a_graph_narrowed_from_its_base_equals_the_one_assembled_from_the_remaining_documents(served, seed):
    """From the whole snapshot's graph (seed 0) or a view's of four fifths of the documents: the
    same node tables, facts (n_sources recounted, ends resolved again), evidence, adjacency entries,
    edge counts, vectors, passage texts and evidence ranges as assembling the remaining documents'
    tables afresh."""
    snapshot, readers, _ = served
    rng = random.Random(seed)
    every = frozenset(readers)
    documents = every if seed == 0 else frozenset(rng.sample(sorted(every), len(every) * 4 // 5))
    tables = tables_of(snapshot.access, documents)
    base = snapshot if seed == 0 else view_snapshot(snapshot, documents, tables)
    for lost in _lost_sets(tables, documents, rng):
        remaining = tables_of(snapshot.access, documents - lost)
        narrowed = narrow_graph(base, lost, *narrowed_tables_and_entities(tables, lost, snapshot.access.settings))
        assert narrowed is not None
        assembled = view_snapshot(snapshot, documents - lost, remaining)
        graph = narrowed.graph
        by_id = graph.facts.get_column("fact_id").arg_sort().to_numpy()  # the base's order: by fact id here
        assert graph.entities.equals(assembled.entities)
        assert graph.passages.equals(assembled.passages)
        assert graph.facts[by_id].equals(assembled.facts)
        assert graph.evidence.equals(assembled.evidence)
        assert graph.adjacency.shape == assembled.adjacency.shape
        assert (graph.adjacency != assembled.adjacency).nnz == 0
        assert graph.edge_counts == assembled.info.counts["edges"]
        assert np.array_equal(np.asarray(narrowed.passage_vectors), np.asarray(assembled.passage_vectors))
        assert np.array_equal(narrowed.fact_vectors[by_id], np.asarray(assembled.fact_vectors))
        starts, counts = narrowed.evidence_ranges
        assert np.array_equal(starts[by_id], assembled.evidence_ranges[0])
        assert np.array_equal(counts[by_id], assembled.evidence_ranges[1])
    assert graph.entities.height < base.entities.height or graph.facts.height < base.facts.height


@pytest.mark.slow  # three views derived at the sample's size: a couple of seconds, and the fast tier has none to spare
def test_every_view_holds_rows_of_its_snapshots_vectors_not_a_copy(served):
    """A reader's view, the same view narrowed from it, and the operator's narrowed from the whole
    snapshot: their passage and fact vectors are rows of the snapshot's own (memory-mapped) matrices."""
    snapshot, _, _ = served
    staff = next(p for p in PRINCIPALS if p.name == "staff-member")
    before = ViewCache(snapshot)
    before.prepare()
    held = before.view(staff)
    after = ViewCache(snapshot, narrowing=Narrowing(snapshot.info.store_seq + 1, frozenset(sorted(held.documents)[:2])),
                      inherit=before)
    for view in (held, after.view(staff), after.view(OPERATOR_PRINCIPAL)):
        assert not view.whole
        for mine, theirs in ((view.snapshot.passage_vectors, snapshot.passage_vectors),
                             (view.snapshot.fact_vectors, snapshot.fact_vectors)):
            assert isinstance(mine, SharedRows) and mine.matrix is theirs
            assert np.shares_memory(mine.matrix, theirs)
        assert view.snapshot.fact_codes is snapshot.fact_codes  # the codes too (None below the index's size)
