import polars as pl

from lightfoot_pipeline.store.fingerprint import digest_frame


def test_digest_ignores_row_order_and_sees_every_value():
    frame = pl.DataFrame({"a": ["x", "y", None], "b": [1.0, 2.5, float("nan")], "c": [1, 2, 3]})
    base = digest_frame(frame, ["a", "b", "c"])
    assert digest_frame(frame.reverse(), ["a", "b", "c"]) == base
    assert digest_frame(frame.with_columns(pl.col("b") + 1e-12), ["a", "b", "c"]) != base
    assert digest_frame(frame.with_columns(pl.Series("a", ["x", "y", ""])), ["a", "b", "c"]) != base
    assert digest_frame(frame.head(2), ["a", "b", "c"]).rows == 2


def test_values_cannot_run_into_each_other():
    left = pl.DataFrame({"a": ["ab"], "b": ["c"]})
    right = pl.DataFrame({"a": ["a"], "b": ["bc"]})
    assert digest_frame(left, ["a", "b"]) != digest_frame(right, ["a", "b"])
