"""The local walk: forward push from the seeds against the exact walk and a direct solve, and its proof
of a ranking."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from lightfoot_pipeline.retrieval.graph import RetrievalGraph
from lightfoot_pipeline.retrieval.localwalk import EPSILON, separated
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


def near_tie_graph() -> tuple[sp.csr_matrix, np.ndarray, int]:
    """Passages A and B whose exact scores differ by 1.5% (.001218 against .001237), which the
    push at the default epsilon ranks the wrong way round: A's seed settles through its one entity,
    while B's score comes from a thousand seeded entities, each holding a residual just under the
    default threshold (epsilon times its degree, 1), so none is ever pushed. A clique of entities
    takes the rest of the seed mass, and a large component the seeds never reach makes the graph's
    size, as a corpus would."""
    leaves, clique, far = 1000, 20, 8000
    n_entities = 1 + leaves + clique + far
    a, b = n_entities, n_entities + 1  # the two passages
    pairs = [(a, 0)] + [(b, 1 + i) for i in range(leaves)]
    members = range(1 + leaves, 1 + leaves + clique)
    pairs += [(i, j) for i in members for j in members if i < j]
    start = 1 + leaves + clique
    pairs += [(start + i, start + (i + 1) % far) for i in range(far)] + [(start + i, start + (i + 7) % far)
                                                                         for i in range(far)]
    rows, cols = np.array(pairs).T
    n = n_entities + 2
    adjacency = sp.csr_matrix((np.ones(2 * len(pairs)), (np.r_[rows, cols], np.r_[cols, rows])), shape=(n, n))
    seeds = np.zeros(n)
    seeds[1:1 + leaves] = 0.5 * EPSILON
    seeds[b] = 0.001
    true_b = (seeds[b] + 0.9 * seeds[1:1 + leaves].sum()) / 1.9  # a star: B returns to itself at 1/(1+d)
    seeds[a] = 0.985 * true_b * 1.9  # A's exact score: 1.5% under B's
    seeds[list(members)] = (1.0 - seeds.sum()) / clique
    return adjacency, seeds, n_entities


def test_the_proven_walk_ranks_a_near_tie_the_way_the_exact_walk_does():
    adjacency, seeds, n_entities = near_tie_graph()
    graph = RetrievalGraph(adjacency, n_entities=n_entities)
    exact = graph.passage_scores(graph.personalized_pagerank(seeds, tolerance=1e-12, max_iterations=1000).scores)
    assert exact[1] > exact[0] > 0.98 * exact[1]  # B before A, by 1.5%
    assert list(top_indices(exact, 2)) == list(top_indices(graph.passage_scores(
        graph.personalized_pagerank(seeds).scores), 2))  # at the retrieval's tolerance too
    plain = graph.passage_scores(graph.local_pagerank(seeds).scores)
    assert plain[0] > plain[1]  # the push at the default epsilon has them the wrong way round
    proven = graph.ranked_pagerank(seeds, count=2)
    assert list(proven.top) == [1, 0] == list(top_indices(exact, 2))
    assert proven.proof["walk"] == "local" and proven.proof["rounds"] > 1
    assert proven.proof["epsilon"] < EPSILON
    # the walk stayed near the seeds: the far component holds no score
    assert not graph.local_pagerank(seeds).scores[1 + 1000 + 20:n_entities].any()


def test_a_proof_that_would_cost_more_than_the_exact_walk_leaves_the_query_to_it():
    adjacency, seeds, n_entities = near_tie_graph()
    graph = RetrievalGraph(adjacency, n_entities=n_entities)
    ranking = graph.local.ranked(np.flatnonzero(seeds), seeds[seeds > 0] / seeds.sum(), 0.9, EPSILON, 2,
                                 max_visits=1)
    assert ranking.top is None and ranking.rounds == 1
    exact_tie = np.zeros(4)
    exact_tie[[0, 1]] = 1.0  # two passages, each on its own entity: a tie the bounds never separate
    tie = RetrievalGraph(sp.csr_matrix(np.array([[0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]],
                                                dtype=float)), n_entities=2)
    result = tie.ranked_pagerank(exact_tie, count=2)
    assert result.proof["walk"] == "exact" and result.top is None
    assert list(top_indices(tie.passage_scores(result.scores), 2)) == [0, 1]  # ties to the lower index


def test_separation_needs_every_lower_bound_above_every_later_upper_bound():
    lower = np.array([0.5, 0.3, 0.2])
    assert separated(lower, lower + 0.01, 0.1)
    assert not separated(lower, np.array([0.5, 0.51, 0.2]), 0.1)  # the second may pass the first
    assert not separated(lower, lower + 0.01, 0.25)  # something unranked may pass the third
    assert not separated(np.array([0.3, 0.3]), np.array([0.3, 0.3]), 0.0)  # a tie proves nothing


def test_every_proven_ranking_is_the_exact_one_on_random_graphs():
    proven = 0
    for seed in range(30):
        dense = random_graph(80, 0.06, seed=seed, edgeless=(3,))
        rng = np.random.default_rng(seed)
        seeds = np.zeros(80)
        seeds[rng.choice(80, size=6, replace=False)] = rng.random(6)
        graph = RetrievalGraph(sp.csr_matrix(dense), n_entities=40)
        exact = graph.passage_scores(exact_ppr(dense, seeds, 0.9))
        ranking = graph.local.ranked(np.flatnonzero(seeds), seeds[seeds > 0] / seeds.sum(), 0.9, 1e-3, 10,
                                     max_visits=10**6)
        if ranking.top is not None:
            proven += 1
            assert list(ranking.top - 40) == list(top_indices(exact, 10))
    assert proven >= 25  # the others: passages the walk never reaches, tied at zero
