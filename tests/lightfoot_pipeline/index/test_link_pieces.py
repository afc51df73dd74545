"""Link pieces: the union of a full link computation's pieces is what one process links."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest

from lightfoot_pipeline.index.link_pieces import (
    LinkPiece,
    RelinkError,
    piece_links,
    plan_pieces,
    plan_steps,
    type_label,
    union_links,
)
from lightfoot_pipeline.index.links import LinkRule, links_within
from lightfoot_pipeline.settings import Banding

# Few rows a band: names collide in many bands, so most links are found by several pieces.
BANDING = Banding(bands=12, rows=6, seed=5)
RULE = LinkRule(0.80, BANDING)


def _corpus(seed: int, n: int, dim: int = 24) -> tuple[list[str], np.ndarray]:
    """n names (a fifth carry a year) and unit vectors in clusters of near-duplicates."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n // 6, dim))
    vectors = centres[rng.integers(0, len(centres), n)] + rng.uniform(0.05, 0.6, (n, 1)) * rng.normal(size=(n, dim))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    letters = "abcdefghjkmnpqrstuwyz"
    words = ["".join(w) for w in itertools.islice(itertools.product(letters, repeat=4), n)]
    names = [f"{w} {1990 + k % 3}" if k % 5 == 0 else w for k, w in enumerate(words)]
    order = np.argsort(names)
    return [names[k] for k in order], vectors[order]


def _links(type_, names, vectors, pieces):
    lookup = dict(zip(names, vectors, strict=True))
    asked: list[int] = []

    def vectors_of(listed):
        asked.append(len(listed))
        return np.stack([lookup[name] for name in listed])

    keys = RULE.keys(names, vectors)
    return union_links([piece_links(p, names, keys, vectors_of, RULE) for p in pieces]), asked


def _rows(frame: pl.DataFrame) -> list[tuple]:
    return sorted(frame.select("type", "name_a", "name_b", "similarity").iter_rows())


@pytest.mark.parametrize("ranges", [
    [(0, 11)],  # all bands in one piece
    [(b, b) for b in range(12)],  # one band a piece
    [(0, 0), (1, 4), (5, 10), (11, 11)],  # ranges of unequal sizes
])
def test_the_union_of_the_pieces_is_what_one_process_links(ranges):
    expected, found_by_one = [], []
    for type_, seed, n in (("person", 1, 600), ("work", 2, 350), ("date", 3, 90)):
        names, vectors = _corpus(seed, n)
        reference = links_within(type_, names, vectors, RULE)
        links, _ = _links(type_, names, vectors, [LinkPiece(type_, lo, hi) for lo, hi in ranges])
        expected += _rows(reference)
        found_by_one += _rows(links)
    assert len(expected) > 300  # a corpus with many links, of every type
    assert found_by_one == expected  # same pairs, same similarities, each once


def test_a_piece_finds_only_pairs_that_share_one_of_its_bands_and_reads_only_their_vectors():
    names, vectors = _corpus(7, 500)
    everything, _ = _links("person", names, vectors, [LinkPiece("person", 0, 11)])
    one_band, asked = _links("person", names, vectors, [LinkPiece("person", 3, 3)])
    assert 0 < one_band.height < everything.height
    assert set(_rows(one_band)) <= set(_rows(everything))
    assert sum(asked) < len(names)  # the names of its candidate pairs, not the type


def test_the_union_of_overlapping_pieces_keeps_each_link_once():
    names, vectors = _corpus(4, 300)
    links, _ = _links("person", names, vectors, [LinkPiece("person", 0, 7), LinkPiece("person", 4, 11)])
    assert links.height == links.unique(subset=["type", "name_a", "name_b"]).height
    assert _rows(links) == _rows(links_within("person", names, vectors, RULE))


def test_a_piece_outside_the_bands_or_without_bands_is_refused():
    names, vectors = _corpus(1, 40)
    keys = RULE.keys(names, vectors)
    with pytest.raises(RelinkError, match="not a range of the 12 bands"):
        piece_links(LinkPiece("person", 10, 12), names, keys, lambda listed: vectors, RULE)
    with pytest.raises(RelinkError, match="no bands to split by"):
        piece_links(LinkPiece("person", 0, 0), names, keys, lambda listed: vectors, RULE.exhaustive())


def test_pieces_cover_every_band_of_every_type_within_the_size():
    counts = {"person": 10_000, "work": 2_500, "date": 1, "event": 40}
    pieces = plan_pieces(counts, 200, 300_000)
    for type_, n in counts.items():
        own = [p for p in pieces if p.type == type_]
        if n < 2:
            assert own == []  # no pair, no piece
            continue
        bands = [b for p in own for b in p.bands]
        assert bands == list(range(200))  # every band once, in order
        assert all(n * len(p.bands) <= 300_000 for p in own)
        assert len(own) == -(-n * 200 // 300_000)  # as few as the size allows
    sizes = {len(p.bands) for p in pieces if p.type == "person"}
    assert max(sizes) - min(sizes) <= 1  # near-equal ranges
    assert plan_pieces({"person": 10_000}, 200, 1) == [LinkPiece("person", b, b) for b in range(200)]


def test_steps_pack_pieces_up_to_the_size():
    counts = {"person": 10_000, "work": 2_500, "event": 40, "date": 30}
    pieces = plan_pieces(counts, 200, 300_000)
    steps = plan_steps(pieces, counts, 300_000)
    assert [p for step in steps for p in step] == pieces
    for step in steps:
        assert len(step) == 1 or sum(counts[p.type] * len(p.bands) for p in step) <= 300_000
    assert any(len({p.type for p in step}) > 1 for step in steps)  # small types share a step


def test_type_labels_are_file_names_and_distinct():
    labels = {type_label(t) for t in ("person", "Person", "a/b", "a b", "ünïcode", "x" * 300)}
    assert len(labels) == 6
    assert all(label.replace("-", "").replace("_", "").isalnum() and len(label) < 50 for label in labels)
