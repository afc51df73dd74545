"""Seeding similarities: float16 products refined in float32, and the inverted-file fact index."""

from __future__ import annotations

import numpy as np
import pytest

from lightfoot_pipeline.retrieval.retrieve import top_indices
from lightfoot_pipeline.retrieval.seeding import (
    EXACT_FLOAT_COLUMNS,
    FLOAT_BLOCK_ROWS,
    INT8_KERNELS,
    QUERY_COLUMNS,
    HalfScorer,
    InvertedFileScorer,
    code_sums,
    int8_kernel,
)
from lightfoot_pipeline.settings import SettingsError
from lightfoot_pipeline.snapshot import codes
from lightfoot_pipeline.snapshot.collect import build_fact_index
from lightfoot_pipeline.snapshot.fact_index import n_lists
from lightfoot_pipeline.snapshot.shared_rows import SharedRows


def unit_rows(n: int, dim: int, seed: int, clusters: int = 20) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    rows = centres[rng.integers(0, clusters, n)] + 0.4 * rng.standard_normal((n, dim))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float16)


def test_half_precision_scores_are_exact_float32_at_the_top():
    vectors = unit_rows(3000, 64, seed=1)
    q = vectors[17].astype(np.float32) + 0.1
    q /= np.linalg.norm(q)
    exact = vectors.astype(np.float32) @ q
    scores = HalfScorer(vectors).scores(q, best=10)
    top = top_indices(exact, 10)
    np.testing.assert_array_equal(top_indices(scores, 10), top)
    np.testing.assert_allclose(scores[top], exact[top], rtol=0, atol=1e-6)
    assert np.abs(scores - exact).max() < 1e-2  # the rest within float16 rounding
    assert HalfScorer(np.zeros((0, 64), dtype=np.float16)).scores(q, 5).shape == (0,)


@pytest.mark.slow
def test_the_fact_index_finds_the_exact_top_facts_and_probing_every_group_is_exact():
    vectors = unit_rows(6000, 48, seed=2)
    ids = np.array([f"f{i:05d}" for i in np.random.default_rng(0).permutation(6000)])
    index, order = build_fact_index(ids, vectors, None, lambda done, total: None)
    grouped = vectors[order]
    assert len(index.offsets) == n_lists(6000) + 1 and index.offsets[-1] == 6000
    everything = InvertedFileScorer(grouped, index.centroids, index.offsets, probe_share=1.0)
    probed = InvertedFileScorer(grouped, index.centroids, index.offsets)
    assert probed.probes < len(index.offsets) - 1
    rng = np.random.default_rng(9)
    agree = 0
    for _ in range(50):
        q = grouped[rng.integers(0, 6000)].astype(np.float32) + 0.05 * rng.standard_normal(48).astype(np.float32)
        q /= np.linalg.norm(q)
        exact = grouped.astype(np.float32) @ q
        np.testing.assert_array_equal(top_indices(everything.scores(q, 2), 2), top_indices(exact, 2))
        agree += list(top_indices(probed.scores(q, 2), 2)) == list(top_indices(exact, 2))
    assert agree >= 48


def test_coded_scoring_finds_the_exact_top_facts_with_their_exact_scores():
    """Scored by their int8 codes, then the best rows again from the float16 rows: the top facts
    and their similarities are exact float32 ones, as the float16 product's refinement gives;
    the other probed rows are within the codes' error. Dimensions that are not a multiple of 8 are
    padded."""
    vectors = unit_rows(6000, 44, seed=5)
    ids = np.array([f"f{i:05d}" for i in range(6000)])
    index, order = build_fact_index(ids, vectors, None, lambda done, total: None)
    grouped = vectors[order]
    plain = InvertedFileScorer(grouped, index.centroids, index.offsets, probe_share=1.0)
    coded = InvertedFileScorer(grouped, index.centroids, index.offsets, probe_share=1.0,
                               codes=codes.in_memory(grouped))
    rng = np.random.default_rng(6)
    for _ in range(40):
        q = grouped[rng.integers(0, 6000)].astype(np.float32) + 0.05 * rng.standard_normal(44).astype(np.float32)
        q /= np.linalg.norm(q)
        exact = grouped.astype(np.float32) @ q
        mine = coded.scores(q, 10)
        top = top_indices(exact, 10)
        np.testing.assert_array_equal(top_indices(mine, 10), top)
        np.testing.assert_array_equal(mine[top], plain.scores(q, 10)[top])
        np.testing.assert_allclose(mine[top], exact[top], rtol=0, atol=1e-6)
        assert np.abs(mine - exact).max() < 0.02
    with pytest.raises(ValueError, match="not those of"):
        InvertedFileScorer(grouped, index.centroids, index.offsets, codes=codes.in_memory(grouped[:100]))


def test_both_int8_kernels_give_the_same_sums_and_the_same_scores(monkeypatch):
    """torch's int8 product and the float32 one sum the same integers, bit for bit, at the largest
    codes and with more rows than a block; a scorer's scores do not depend on which one the CPU
    made faster. LIGHTFOOT_INT8_KERNEL names one, and a name that is not one is refused."""
    import torch

    columns = 384
    rng = np.random.default_rng(3)
    block = torch.from_numpy(rng.integers(-codes.LEVELS, codes.LEVELS + 1, (2 * FLOAT_BLOCK_ROWS + 17, columns),
                                          dtype=np.int8))
    block[:3] = codes.LEVELS  # the largest sums: 384 x 127²
    block[3] = -codes.LEVELS
    rhs = torch.zeros((columns, QUERY_COLUMNS), dtype=torch.int8)
    rhs[:, 0] = codes.LEVELS
    exact = block.numpy().astype(np.int64) @ rhs[:, 0].numpy().astype(np.int64)
    assert exact[0] == columns * codes.LEVELS**2
    for kernel in INT8_KERNELS:
        np.testing.assert_array_equal(code_sums(block, rhs, kernel), exact.astype(np.float32))
    assert EXACT_FLOAT_COLUMNS * codes.LEVELS**2 < 2**24

    vectors = unit_rows(3000, 40, seed=8)
    ids = np.array([f"f{i:05d}" for i in range(3000)])
    index, order = build_fact_index(ids, vectors, None, lambda done, total: None)
    grouped = vectors[order]
    scored = {}
    for kernel in INT8_KERNELS:
        monkeypatch.setenv("LIGHTFOOT_INT8_KERNEL", kernel)
        int8_kernel.cache_clear()
        scorer = InvertedFileScorer(grouped, index.centroids, index.offsets, probe_share=0.5,
                                    codes=codes.in_memory(grouped))
        q = grouped[11].astype(np.float32)
        scored[kernel] = scorer.scores(q / np.linalg.norm(q), 10)
    np.testing.assert_array_equal(scored["int_mm"], scored["float32"])
    monkeypatch.setenv("LIGHTFOOT_INT8_KERNEL", "vnni")
    int8_kernel.cache_clear()
    with pytest.raises(SettingsError, match="LIGHTFOOT_INT8_KERNEL='vnni': one of int_mm, float32"):
        int8_kernel(columns)
    monkeypatch.delenv("LIGHTFOOT_INT8_KERNEL")
    int8_kernel.cache_clear()
    assert int8_kernel(columns) in INT8_KERNELS
    assert int8_kernel(EXACT_FLOAT_COLUMNS + 8) == "int_mm"  # float32 sums would not be exact
    int8_kernel.cache_clear()


def test_the_index_is_a_function_of_the_rows_not_of_their_order():
    vectors = unit_rows(2000, 32, seed=3)
    ids = np.array([f"f{i:05d}" for i in range(2000)])
    index, order = build_fact_index(ids, vectors, None, lambda done, total: None)
    shuffle = np.random.default_rng(1).permutation(2000)
    again, order_again = build_fact_index(ids[shuffle], vectors[shuffle], None, lambda done, total: None)
    np.testing.assert_array_equal(index.centroids, again.centroids)
    np.testing.assert_array_equal(index.offsets, again.offsets)
    np.testing.assert_array_equal(ids[order], ids[shuffle][order_again])
    assert index.sample_digest == again.sample_digest


def test_bad_index_offsets_are_refused():
    vectors = unit_rows(100, 16, seed=4)
    with pytest.raises(ValueError, match="offsets"):
        InvertedFileScorer(vectors, np.zeros((4, 16), dtype=np.float32), np.array([0, 10, 20, 30, 99]))


def test_a_question_scores_a_share_of_the_groups_that_falls_as_the_index_grows():
    from lightfoot_pipeline.retrieval.seeding import MIN_PROBES, probes_for

    assert probes_for(65) == 26  # 40% at the sample's size, where the parity bars are measured
    assert probes_for(441) == 68  # 15% at 100,000 synthetic passages
    assert probes_for(4) == 4 and probes_for(20) == max(MIN_PROBES, 15)
    shares = [probes_for(n) / n for n in (65, 441, 1400, 5000)]
    assert shares == sorted(shares, reverse=True)
    assert probes_for(441, probe_share=1.0) == 441 and probes_for(441, probe_share=0.1) == 45


def test_scores_of_shared_rows_are_those_of_a_copy_of_them_bit_for_bit():
    """A view's vectors are rows of its snapshot's matrix (SharedRows): the scorers read the
    matrix (whole, a slice of it, or the rows gathered) and give what they give for a copy of the
    rows, bit for bit, the float32 refinement included; so does the fact index's scorer."""
    matrix = unit_rows(4000, 32, seed=3)
    q = matrix[5].astype(np.float32) + 0.05
    q /= np.linalg.norm(q)
    rng = np.random.default_rng(4)
    picks = {"most, in another order": rng.permutation(4000)[:3500], "a few": rng.choice(4000, 300, replace=False),
             "consecutive": np.arange(1000, 2200)}
    for what, rows in picks.items():
        shared, copy = SharedRows.of(matrix, rows), matrix[rows]
        assert shared.matrix is matrix and shared.shape == copy.shape
        np.testing.assert_array_equal(np.asarray(shared), copy)
        np.testing.assert_array_equal(HalfScorer(shared).scores(q, 10), HalfScorer(copy).scores(q, 10), err_msg=what)
        ids = np.array([f"f{i:05d}" for i in rows])
        index, order = build_fact_index(ids, copy, None, lambda done, total: None)
        mine = InvertedFileScorer(SharedRows.of(shared, order), index.centroids, index.offsets)
        theirs = InvertedFileScorer(copy[order], index.centroids, index.offsets)
        np.testing.assert_array_equal(mine.scores(q, 10), theirs.scores(q, 10), err_msg=what)
        # with codes: the view scores its snapshot's codes, a copy its own
        mine = InvertedFileScorer(SharedRows.of(shared, order), index.centroids, index.offsets,
                                  codes=codes.in_memory(matrix))
        theirs = InvertedFileScorer(copy[order], index.centroids, index.offsets,
                                    codes=codes.in_memory(copy[order]))
        np.testing.assert_array_equal(mine.scores(q, 10), theirs.scores(q, 10), err_msg=what)
    with pytest.raises(ValueError, match="outside"):
        SharedRows.of(matrix, np.array([4000]))
