"""The local walk: forward push from the seeds against the exact walk and a direct solve."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from lightfoot_pipeline.retrieval.graph import RetrievalGraph
from lightfoot_pipeline.retrieval.retrieve import RetrievalSettings, top_indices
from tests.lightfoot_pipeline.retrieval.test_graph import exact_ppr


def random_graph(n: int, density: float, seed: int, edgeless: tuple[int, ...] = ()) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dense = np.triu(rng.random((n, n)) * (rng.random((n, n)) < density), k=1)
    dense = dense + dense.T
    for node in edgeless:
        dense[node, :] = dense[:, node] = 0.0
    return dense


def test_the_push_error_is_within_epsilon_times_the_degree():
    dense = random_graph(60, 0.1, seed=1)
    seeds = np.zeros(60)
    seeds[[2, 17, 40]] = [0.6, 0.3, 0.1]
    graph = RetrievalGraph(sp.csr_matrix(dense), n_entities=30)
    exact = exact_ppr(dense, seeds, 0.9)
    for epsilon in (1e-3, 1e-5):
        result = graph.local_pagerank(seeds, damping=0.9, epsilon=epsilon)
        error = exact - result.scores
        assert np.all(error >= -1e-12)  # push never overshoots
        assert np.all(error <= epsilon * dense.sum(axis=1) + 1e-12)
        assert result.converged and result.iterations > 0 and result.edge_visits > 0
    tight = graph.local_pagerank(seeds, epsilon=1e-9)
    np.testing.assert_allclose(tight.scores, exact, atol=1e-7)


def test_edgeless_nodes_scale_every_score_alike_so_the_ranking_is_the_exact_walks():
    dense = random_graph(30, 0.15, seed=4, edgeless=(5, 11))
    seeds = np.zeros(30)
    seeds[[0, 5, 20]] = [0.5, 0.3, 0.2]  # a seed on an edgeless node sends its walkers back
    graph = RetrievalGraph(sp.csr_matrix(dense), n_entities=15)
    exact = exact_ppr(dense, seeds, 0.9)
    local = graph.local_pagerank(seeds, epsilon=1e-10)
    np.testing.assert_allclose(local.scores, exact, atol=1e-7)
    assert list(top_indices(local.scores, 10)) == list(top_indices(exact, 10))


def test_a_smaller_epsilon_walks_more_edges_and_the_cost_does_not_follow_the_graph():
    # Two components: seeds in the small one never reach the large one.
    small = random_graph(20, 0.3, seed=2)
    large = random_graph(400, 0.05, seed=3)
    graph = RetrievalGraph(sp.block_diag([sp.csr_matrix(small), sp.csr_matrix(large)]).tocsr(), n_entities=10)
    seeds = np.zeros(420)
    seeds[[1, 3]] = 1.0
    loose = graph.local_pagerank(seeds, epsilon=1e-4)
    tight = graph.local_pagerank(seeds, epsilon=1e-7)
    assert loose.edge_visits < tight.edge_visits
    assert not tight.scores[20:].any()
    assert tight.edge_visits < 40 * sp.csr_matrix(large).nnz  # what 40 exact iterations read of the large part


def test_bad_seeds_and_settings_are_refused():
    graph = RetrievalGraph(sp.csr_matrix(random_graph(6, 0.5, seed=0)), n_entities=3)
    with pytest.raises(ValueError, match="all zero"):
        graph.local_pagerank(np.zeros(6))
    with pytest.raises(ValueError, match="entries"):
        graph.local_pagerank(np.ones(5))
    with pytest.raises(ValueError, match="epsilon"):
        graph.local_pagerank(np.ones(6), epsilon=0.0)
    with pytest.raises(ValueError, match="walk"):
        RetrievalSettings(walk="global")
    with pytest.raises(ValueError, match="seeding"):
        RetrievalSettings(seeding="approximate")
