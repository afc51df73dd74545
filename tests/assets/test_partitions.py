"""The documents partitions: ranges of keys for single runs, and which ids can be keys."""

from __future__ import annotations

from assets.partitions import invalid_key_reason, key_ranges


def test_key_ranges_cover_exactly_the_wanted_keys():
    order = ["a", "b", "c", "d", "e", "f"]
    assert key_ranges(order, ["b", "c", "d"]) == [("b", "d")]
    assert key_ranges(order, ["f", "a", "c", "b"]) == [("a", "c"), ("f", "f")]
    assert key_ranges(order, []) == []
    for wanted in (["a"], ["a", "f"], ["b", "d", "f"], order):
        covered = [k for first, last in key_ranges(order, wanted) for k in order[order.index(first):order.index(last) + 1]]
        assert sorted(covered) == sorted(wanted)


def test_partition_keys_cannot_hold_a_range_marker():
    assert invalid_key_reason("musique-0001") is None
    assert "'...'" in invalid_key_reason("a...b")
    assert invalid_key_reason("a..b") is None
