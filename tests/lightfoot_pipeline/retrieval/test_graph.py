"""The retrieval graph: adjacency construction and Personalized PageRank against known answers."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from lightfoot_pipeline.retrieval.graph import RetrievalGraph
from lightfoot_pipeline.snapshot.adjacency import build_adjacency

EMPTY = (np.array([], dtype=np.int64), np.array([], dtype=np.int64), np.array([], dtype=np.float64))


def exact_ppr(adjacency: np.ndarray, seeds: np.ndarray, damping: float) -> np.ndarray:
    """PPR by a direct solve: walkers on edgeless nodes jump to the seeds, like the power iteration."""
    s = seeds / seeds.sum()
    degree = adjacency.sum(axis=1)
    transition = np.where(degree[:, None] > 0, adjacency / np.where(degree > 0, degree, 1)[:, None], s[None, :])
    n = adjacency.shape[0]
    # x = (1-d) s + d x G  <=>  x (I - d G) = (1-d) s
    return np.linalg.solve((np.eye(n) - damping * transition).T, (1 - damping) * s)


def test_two_nodes_have_the_closed_form_answer():
    # One edge a–b, all seed mass on a: x_a = (1-d) + d x_b and x_b = d x_a, so x_a = 1/(1+d).
    graph = RetrievalGraph(sp.csr_matrix(np.array([[0.0, 1.0], [1.0, 0.0]])), n_entities=1)
    result = graph.personalized_pagerank(np.array([1.0, 0.0]), damping=0.9, tolerance=1e-10, max_iterations=1000)
    np.testing.assert_allclose(result.scores, [1 / 1.9, 0.9 / 1.9], atol=1e-9)
    assert result.converged and result.delta < 1e-10


def test_power_iteration_matches_a_direct_solve_on_a_graph_with_an_edgeless_node():
    rng = np.random.default_rng(3)
    n = 12
    dense = np.triu(rng.random((n, n)) * (rng.random((n, n)) < 0.3), k=1)
    dense = dense + dense.T
    dense[7, :] = dense[:, 7] = 0.0  # node 7 has no edge
    seeds = np.zeros(n)
    seeds[[0, 7, 9]] = [0.5, 0.2, 0.3]
    graph = RetrievalGraph(sp.csr_matrix(dense), n_entities=8)
    result = graph.personalized_pagerank(seeds, damping=0.9, tolerance=1e-12, max_iterations=2000)
    np.testing.assert_allclose(result.scores, exact_ppr(dense, seeds, 0.9), atol=1e-9)
    assert result.scores.sum() == pytest.approx(1.0)
    assert graph.passage_scores(result.scores).shape == (4,)


def test_the_tolerance_bounds_the_error_and_iterations_are_reported():
    rng = np.random.default_rng(5)
    n = 40
    dense = np.triu((rng.random((n, n)) < 0.15).astype(float), k=1)
    dense = dense + dense.T
    seeds = rng.random(n)
    graph = RetrievalGraph(sp.csr_matrix(dense), n_entities=20)
    exact = exact_ppr(dense, seeds, 0.9)
    loose = graph.personalized_pagerank(seeds, tolerance=1e-3)
    tight = graph.personalized_pagerank(seeds, tolerance=1e-8, max_iterations=1000)
    assert loose.iterations < tight.iterations
    # the L1 change bounds the error by damping / (1 - damping) times itself
    assert np.abs(loose.scores - exact).sum() <= 9 * 1e-3
    assert np.abs(tight.scores - exact).sum() <= 1e-6
    capped = graph.personalized_pagerank(seeds, tolerance=1e-12, max_iterations=3)
    assert capped.iterations == 3 and not capped.converged


def test_walks_reach_passages_through_shared_entities():
    # entity 0 is mentioned by passages 0 and 1; entity 1 by passage 2 only; seeds on passage 0.
    adjacency = build_adjacency(2, 3, (np.array([0, 0, 1]), np.array([0, 1, 2])), EMPTY, EMPTY)
    graph = RetrievalGraph(adjacency, n_entities=2)
    seeds = np.zeros(5)
    seeds[2] = 1.0
    passages = graph.passage_scores(graph.personalized_pagerank(seeds).scores)
    assert passages[1] > 0.0 and passages[2] == 0.0  # passage 2 shares no entity: unreachable


def test_adjacency_is_symmetric_and_sums_fact_and_synonym_weights():
    adjacency = build_adjacency(
        3, 2,
        (np.array([0, 1, 2]), np.array([0, 0, 1])),
        (np.array([0]), np.array([1]), np.array([2.0])),  # two facts link entities 0 and 1
        (np.array([0, 1]), np.array([1, 2]), np.array([0.85, 0.9])),  # synonym edges
    ).toarray()
    assert np.array_equal(adjacency, adjacency.T)
    assert adjacency[0, 1] == pytest.approx(2.85)
    assert adjacency[1, 2] == pytest.approx(0.9)
    assert adjacency[0, 3] == adjacency[1, 3] == adjacency[2, 4] == 1.0
    assert adjacency[3, 4] == 0.0 and np.trace(adjacency) == 0.0


def test_bad_graphs_and_seeds_are_refused():
    with pytest.raises(ValueError, match="self-loops"):
        build_adjacency(2, 0, (np.array([]), np.array([])), (np.array([1]), np.array([1]), np.array([1.0])), EMPTY)
    with pytest.raises(ValueError, match="outside"):
        build_adjacency(1, 1, (np.array([0]), np.array([5])), EMPTY, EMPTY)
    with pytest.raises(ValueError, match="positive"):
        build_adjacency(2, 0, (np.array([]), np.array([])), (np.array([0]), np.array([1]), np.array([0.0])), EMPTY)
    graph = RetrievalGraph(sp.csr_matrix(np.array([[0.0, 1.0], [1.0, 0.0]])), n_entities=1)
    with pytest.raises(ValueError, match="all zero"):
        graph.personalized_pagerank(np.zeros(2))
    with pytest.raises(ValueError, match="2 nodes"):
        graph.personalized_pagerank(np.ones(3))
    with pytest.raises(ValueError, match="non-negative"):
        graph.personalized_pagerank(np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="damping"):
        graph.personalized_pagerank(np.ones(2), damping=1.0)
