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
    assert (mine.fact_codes is None) == (theirs.fact_codes is None)
    if mine.fact_codes is not None:  # a view's codes are its snapshot's, of the rows it reads
        rows = getattr(mine.fact_vectors, "rows", slice(None))
        assert np.array_equal(mine.fact_codes.codes[rows], theirs.fact_codes.codes)
        assert np.array_equal(mine.fact_codes.scales[rows], theirs.fact_codes.scales)
