"""The links' candidate filter: band keys are a function of one vector, candidates of two keys."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.index import lsh
from lightfoot_pipeline.index.link_recall import link_pairs_found_share, link_recall
from lightfoot_pipeline.index.links import LinkRule, exact_cosines, links_between, links_within
from lightfoot_pipeline.index.lsh import (
    band_keys,
    candidates_between,
    candidates_within,
    group_hash,
    hamming_cut,
    hyperplanes,
    keys_from_signs,
    near_between,
    near_between_parts,
    near_within,
    sketch_distances,
    sketches,
    split_keys,
)
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.settings import Banding, IndexSettings


def _unit(rng, n, d, noise=0.3):
    """n unit vectors; the second half are noisy copies of the first (noise: a scale, or one per copy)."""
    x = rng.normal(size=(n, d)).astype(np.float32)
    scale = np.broadcast_to(np.asarray(noise, dtype=np.float32), (n - n // 2,))[:, None]
    x[n // 2 :] = x[: n - n // 2] + scale * rng.normal(size=(n - n // 2, d)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _words(n):
    """n distinct names without digits (so that the number rule leaves them alone)."""
    letters = "abcdefghjkmnpqrstuwyz"
    return ["".join(w) for w in itertools.islice(itertools.product(letters, repeat=4), n)]


def _pairs(frame):
    return {(a, b) for a, b in frame.select("name_a", "name_b").iter_rows()}


def test_the_hyperplanes_are_the_seeds_alone():
    """A numpy that drew other normals for the same seed would change every stored key: caught here."""
    planes = hyperplanes(Banding(bands=4, rows=8, seed=0), 16)
    assert planes.shape == (32, 16) and planes.dtype == np.float32
    assert np.allclose(np.linalg.norm(planes, axis=1), 1.0, atol=1e-6)
    assert hashlib.sha256(planes.tobytes()).hexdigest()[:16] == "8d3d8cc2a5e2015c"
    assert not np.array_equal(planes, hyperplanes(Banding(bands=4, rows=8, seed=1), 16))


@pytest.mark.parametrize("dim", [16, 384])
def test_a_vectors_keys_do_not_depend_on_its_batch(dim):
    """Vectors planted on a hyperplane (projection ~1e-8) get the same keys alone or in any batch."""
    banding = Banding(bands=6, rows=12, seed=3)
    rng = np.random.default_rng(dim)
    vectors = _unit(rng, 300, dim)
    planes = hyperplanes(banding, dim).astype(np.float64)
    for row in range(0, 300, 7):  # project out one hyperplane's normal: a sign BLAS could flip
        v = vectors[row].astype(np.float64)
        h = planes[row % len(planes)]
        v = v - (v @ h) * h
        vectors[row] = (v / np.linalg.norm(v)).astype(np.float32)
    together = band_keys(vectors, banding)
    shuffled = rng.permutation(300)
    assert np.array_equal(band_keys(vectors[shuffled], banding), together[shuffled])
    for row in range(0, 300, 7):
        assert np.array_equal(band_keys(vectors[row : row + 1], banding)[0], together[row])
        assert np.array_equal(band_keys(np.asfortranarray(vectors[[row, 0]]), banding)[0], together[row])


def test_a_keys_bit_k_is_the_sign_on_its_bands_kth_hyperplane():
    rng = np.random.default_rng(2)
    for rows in (1, 7, 8, 16, 17, 62):
        banding = Banding(bands=3, rows=rows, seed=0)
        signs = rng.random((10, 3 * rows)) < 0.5
        keys = keys_from_signs(signs, banding).view(np.uint64)
        for band in range(3):
            for k in range(rows):
                bit = (keys[:, band] >> np.uint64(k)) & np.uint64(1)
                assert np.array_equal(bit.astype(bool), signs[:, band * rows + k])
            assert np.all(keys[:, band] >> np.uint64(rows) == 0)


def test_different_groups_never_share_a_key():
    banding = Banding(bands=8, rows=10, seed=0)
    vectors = np.repeat(_unit(np.random.default_rng(0), 1, 32), 2, axis=0)
    groups = np.array([group_hash("1945 9 m8"), group_hash("1945 6 m8")], dtype=np.uint64)
    keys = band_keys(vectors, banding, groups)
    assert not np.any(keys[0] == keys[1])
    same = band_keys(vectors, banding, groups[[0, 0]])
    assert np.array_equal(same[0], same[1])
    assert group_hash("") == group_hash("")  # stable: blake2b, not Python's salted hash


def _brute_candidates(left, right, within):
    pairs = set()
    for i in range(len(left)):
        for j in range(i + 1 if within else 0, len(right)):
            if np.any(left[i] == right[j]):
                pairs.add((i, j))
    return pairs


def test_candidates_are_the_pairs_that_share_a_key_in_a_band():
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 6, size=(80, 3))  # few values: many collisions, groups of every size
    old = rng.integers(0, 6, size=(50, 3))
    i, j = candidates_within(keys)
    assert set(zip(i.tolist(), j.tolist(), strict=True)) == _brute_candidates(keys, keys, within=True)
    assert len(i) == len(set(zip(i.tolist(), j.tolist(), strict=True))), "each pair once"
    i, j = candidates_between(keys, old)
    assert set(zip(i.tolist(), j.tolist(), strict=True)) == _brute_candidates(keys, old, within=False)
    # The same key in another band is no collision.
    i, _ = candidates_within(np.array([[1, 2], [2, 1]]))
    assert len(i) == 0
    assert len(candidates_between(keys[:0], old)[0]) == 0


def test_candidates_between_do_not_depend_on_which_side_is_larger():
    rng = np.random.default_rng(11)
    few, many = rng.integers(0, 5, size=(7, 4)), rng.integers(0, 5, size=(90, 4))
    i, j = candidates_between(few, many)
    back_j, back_i = candidates_between(many, few)
    assert set(zip(i.tolist(), j.tolist(), strict=True)) == set(zip(back_i.tolist(), back_j.tolist(), strict=True)) != set()


@pytest.mark.parametrize("scan_rows", [1 << 15, 7])
def test_band_keys_looked_up_by_their_sign_bits_pair_as_sorted_keys_do(monkeypatch, scan_rows):
    """The table addressed by a band's sign bits finds the pairs that sorting the whole keys finds:
    equal sign bits in a band, and equal group bits; however many rows of the larger side are
    scanned at a time."""
    monkeypatch.setattr(lsh, "SCAN_ROWS", scan_rows)
    rng = np.random.default_rng(13)
    banding = Banding(bands=6, rows=4, seed=0)  # 16 sign patterns a band: many collisions
    signs = rng.integers(0, 2, size=(150, 24)).astype(bool)
    groups = np.array([group_hash(g) for g in rng.choice(["", "1945", "36th"], size=150)], dtype=np.uint64)
    keys = keys_from_signs(signs, banding, groups)
    new, old = keys[:40], keys[40:]
    by_sorting = set(zip(*(a.tolist() for a in candidates_between(new, old)), strict=True))
    by_table = set(zip(*(a.tolist() for a in candidates_between(new, old, rows=banding.rows)), strict=True))
    assert by_table == by_sorting and len(by_sorting) > 100
    assert all(groups[i] >> np.uint64(4) == groups[40 + j] >> np.uint64(4) for i, j in by_sorting)
    swapped = set(zip(*(a.tolist() for a in candidates_between(old, new, rows=banding.rows)), strict=True))
    assert {(i, j) for j, i in swapped} == by_sorting


def test_the_sketch_cut_keeps_the_pairs_at_the_threshold_and_drops_unrelated_ones():
    """Of the pairs that share a band key, those at or above the threshold always pass the cut (z = 6),
    and the unrelated pairs that collide by chance do not reach the vectors."""
    rng = np.random.default_rng(3)
    banding = Banding()  # the default: 200 bands of 16 rows
    base = rng.normal(size=(3000, 384)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    # Copies at cosine 0.80 to 0.84 of the first 300 vectors: the hardest links at the synonym threshold.
    target = rng.uniform(0.80, 0.84, size=(300, 1)).astype(np.float32)
    noise = rng.normal(size=(300, 384)).astype(np.float32)
    noise -= (noise * base[:300]).sum(axis=1, keepdims=True) * base[:300]
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    copies = target * base[:300] + np.sqrt(1 - target**2) * noise
    vectors = np.concatenate([base, copies]).astype(np.float32)
    keys = band_keys(vectors, banding)
    candidates = set(zip(*(a.tolist() for a in candidates_within(keys)), strict=True))
    near = set(zip(*(a.tolist() for a in near_within(keys, banding, 0.80)), strict=True))
    planted = {(k, 3000 + k) for k in range(300)}
    assert near <= candidates
    assert planted & candidates <= near, "a pair above the threshold was cut"
    assert len(planted & candidates) >= 295
    unrelated = candidates - planted
    assert len(unrelated) > 1000, "unrelated pairs should collide by chance at this size"
    assert len(near - planted) < len(unrelated) / 100
    # Between: the same pairs, seen from the new names.
    i, j = near_between(keys[3000:], keys[:3000], banding, 0.80)
    assert {(b, 3000 + a) for a, b in zip(i.tolist(), j.tolist(), strict=True)} == {p for p in near if p[1] >= 3000 > p[0]}
    parts_i, parts_j = near_between_parts(split_keys(keys[3000:], banding), split_keys(keys[:3000], banding),
                                          banding, 0.80)
    assert np.array_equal(parts_i, i) and np.array_equal(parts_j, j)
    # The distance is the number of differing sign bits; the cut grows as the threshold falls.
    marks = sketches(keys, banding)
    assert sketch_distances(marks[:1], marks[:1])[0] == 0
    assert sketch_distances(marks[:1], marks[1:2])[0] == sum(bin(int(a) ^ int(b)).count("1")
                                                            for a, b in zip(marks[0], marks[1], strict=True))
    assert hamming_cut(banding, 1.0) == 0 < hamming_cut(banding, 0.92) < hamming_cut(banding, 0.80) < 3200 // 2
    assert hamming_cut(banding, -1.0) == 3200


def test_banded_links_are_the_exhaustive_links_whose_names_collide():
    """The link is a function of the pair: exact cosine, numbers, and a shared key of the two."""
    rng = np.random.default_rng(7)
    vectors = _unit(rng, 400, 24, noise=0.45)
    names = _words(400)
    rule = LinkRule(0.8, Banding(bands=3, rows=10, seed=0))  # few bands: many exhaustive links missed
    keys = rule.keys(names, vectors)
    exhaustive = _pairs(links_within("t", names, vectors, rule.exhaustive()))
    collide = {(a, b) for a, b in exhaustive
               if np.any(keys[names.index(a)] == keys[names.index(b)])}
    banded = _pairs(links_within("t", names, vectors, rule))
    assert banded == collide
    assert 0 < len(banded) < len(exhaustive), "the fixture should miss some links and find others"
    # Incremental: new names against old ones, plus the old ones among themselves, is the same set.
    new, old = list(range(0, 400, 3)), [i for i in range(400) if i % 3]
    incremental = links_between("t", [names[i] for i in new], vectors[new], [names[i] for i in old], vectors[old],
                                rule, keys[new], keys[old])
    old_only = links_within("t", [names[i] for i in old], vectors[old], rule)
    assert _pairs(incremental) | _pairs(old_only) == banded
    rows = incremental.filter(incremental["name_a"] == incremental["name_a"][0]).row(0, named=True)
    a, b = names.index(rows["name_a"]), names.index(rows["name_b"])
    assert rows["similarity"] == exact_cosines(vectors[a : a + 1], vectors[b : b + 1])[0]


@pytest.mark.slow
def test_the_default_bands_find_nearly_every_link_and_compare_few_pairs():
    rng = np.random.default_rng(11)
    vectors = _unit(rng, 4000, 64, noise=rng.uniform(0.1, 0.9, size=2000))  # copies' cosines ~0.78 to 1
    named = {"t": (_words(4000), vectors)}
    for threshold in (0.92, 0.80):
        recall = link_recall(named, LinkRule.of(IndexSettings(), threshold))
        assert recall.exhaustive_links > 400
        assert recall.found_share >= 0.99
        assert recall.candidate_share < 0.01
    assert link_pairs_found_share(named, IndexSettings()) >= 0.99
    assert link_pairs_found_share(named, IndexSettings(lsh_bands=0)) == 1.0


def test_names_with_other_numbers_never_link():
    vectors = np.repeat(_unit(np.random.default_rng(0), 1, 32), 4, axis=0)
    names = ["35th chess olympiad", "36th chess olympiad", "the 35th chess olympiad", "chess olympiad"]
    for rule in (LinkRule(0.8, Banding()), LinkRule(0.8, None)):
        assert _pairs(links_within("t", names, vectors, rule)) == {("35th chess olympiad", "the 35th chess olympiad")}
        assert len(links_within("t", names, vectors, LinkRule(0.8, rule.banding, numbers_must_agree=False))) == 6


@pytest.mark.parametrize(
    "other",
    [{"lsh_bands": 20}, {"lsh_rows": 9}, {"lsh_seed": 1}, {"lsh_bands": 0}, {"numbers_must_agree": False}],
)
def test_a_store_refuses_other_link_settings(store, other):
    built = HashingEmbedder(dim=32)
    with store.transaction() as tx:
        operations.check_config(tx, IndexSettings(), built)
        tx.commit("config", {})
    with store.transaction() as tx:
        operations.check_config(tx, IndexSettings(), built)
        with pytest.raises(operations.IndexConfigError, match="built with settings"):
            operations.check_config(tx, IndexSettings(**other), built)


@pytest.mark.parametrize(
    "bad", [{"lsh_bands": -1}, {"lsh_rows": 0}, {"lsh_rows": 63}, {"lsh_seed": -2}, {"numbers_must_agree": "yes"}]
)
def test_unusable_link_settings_are_refused(bad):
    with pytest.raises(ValueError):
        IndexSettings(**bad)


@pytest.mark.parametrize("size", [1, 7, 300])
def test_a_bands_index_finds_each_patterns_rows_in_order(size):
    """A band's index (the smaller side's, built from its sorted rows): the bit table holds exactly
    the side's patterns, and each pattern's slot leads to its rows, in row order."""
    rng = np.random.default_rng(size)
    low = rng.integers(0, 16, size=size).astype(np.uint16)  # 4 rows: 16 patterns, many repeated
    held, slot, bounds, order = lsh._band_index(low, 4)
    assert set(np.flatnonzero(held).tolist()) == set(low.tolist())
    for pattern in range(16):
        rows = [i for i, value in enumerate(low.tolist()) if value == pattern]
        if rows:
            k = int(slot[pattern])
            assert order[bounds[k] : bounds[k + 1]].tolist() == rows
    assert bounds[-1] == size and sorted(order.tolist()) == list(range(size))
