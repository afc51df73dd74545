"""What the permission tests compare: a view against a snapshot of a store of its documents alone."""

from __future__ import annotations

import numpy as np

from lightfoot_pipeline.snapshot.format import Snapshot


def assert_same_snapshot(mine: Snapshot, theirs: Snapshot) -> None:
    """The same node tables, facts, evidence, graph and vectors, row for row."""
    assert mine.entities.equals(theirs.entities)
    assert mine.passages.equals(theirs.passages)
    assert mine.facts.equals(theirs.facts)
    assert mine.evidence.equals(theirs.evidence)
    assert (mine.adjacency != theirs.adjacency).nnz == 0
    assert np.array_equal(np.asarray(mine.passage_vectors), np.asarray(theirs.passage_vectors))
    assert np.array_equal(np.asarray(mine.fact_vectors), np.asarray(theirs.fact_vectors))
