import numpy as np
import pytest

from lightfoot_pipeline.index.links import LinkRule, exact_cosines, links_between, links_within


def _unit(rng, n, d):
    x = rng.normal(size=(n, d)).astype(np.float32)
    # Plant near-duplicates so that some pairs clear the threshold.
    x[n // 2 :] = x[: n - n // 2] + 0.3 * rng.normal(size=(n - n // 2, d)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _brute_force(names, vectors, threshold):
    out = set()
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            s = float(exact_cosines(vectors[i : i + 1], vectors[j : j + 1])[0])
            if s >= threshold:
                out.add((min(names[i], names[j]), max(names[i], names[j]), s))
    return out


def _rule(threshold, rows=2048, cols=8192):
    """Every pair compared, numbers ignored (names here are numbered): the cosine part of the rule."""
    return LinkRule(threshold, banding=None, numbers_must_agree=False, block_rows=rows, block_cols=cols)


def _as_set(frame):
    return {(a, b, s) for a, b, s in frame.select("name_a", "name_b", "similarity").iter_rows()}


def test_links_equal_brute_force_for_any_block_size():
    rng = np.random.default_rng(1)
    vectors = _unit(rng, 60, 16)
    names = [f"n{i:03d}" for i in range(60)]
    expected = _brute_force(names, vectors, 0.8)
    assert expected, "the fixture should produce some links"
    for rows, cols in [(7, 5), (60, 60), (1, 64), (16, 3)]:
        assert _as_set(links_within("t", names, vectors, _rule(0.8, rows, cols))) == expected


def test_incremental_links_equal_links_of_the_union():
    rng = np.random.default_rng(2)
    vectors = _unit(rng, 50, 16)
    names = [f"n{i:03d}" for i in range(50)]
    new_idx, old_idx = list(range(0, 50, 3)), [i for i in range(50) if i % 3]
    incremental = links_between(
        "t", [names[i] for i in new_idx], vectors[new_idx], [names[i] for i in old_idx], vectors[old_idx], _rule(0.8, 4, 9)
    )
    old_only = links_within("t", [names[i] for i in old_idx], vectors[old_idx], _rule(0.8, 8, 8))
    assert _as_set(incremental) | _as_set(old_only) == _brute_force(names, vectors, 0.8)
    assert not (_as_set(incremental) & _as_set(old_only))


def test_exact_cosine_does_not_depend_on_the_other_rows():
    rng = np.random.default_rng(3)
    a = _unit(rng, 200, 384)
    b = _unit(rng, 200, 384)
    together = exact_cosines(a, b)
    for i in [0, 17, 199]:
        alone = exact_cosines(a[i : i + 1], b[i : i + 1])[0]
        assert together[i].tobytes() == alone.tobytes()
    assert np.allclose(together, np.sum(a.astype(np.float64) * b, axis=1))


@pytest.mark.parametrize("dim", [5, 64, 384])
def test_no_pair_at_the_threshold_is_missed(dim):
    """A pair whose exact cosine is at the threshold is found although float32 rounds it below."""
    rng = np.random.default_rng(dim)
    vectors = _unit(rng, 40, dim)
    names = [f"n{i:02d}" for i in range(40)]
    sims = _brute_force(names, vectors, 0.0)
    threshold = sorted(s for _, _, s in sims)[-5]  # exactly the 5th-highest similarity
    found = _as_set(links_within("t", names, vectors, _rule(threshold, 8, 8)))
    assert len(found) == 5 and min(s for _, _, s in found) == threshold
