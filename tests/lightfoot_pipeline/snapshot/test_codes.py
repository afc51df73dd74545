"""Eight-bit codes of fact vectors: close to the rows, padded for the int8 product, the same in chunks."""

from __future__ import annotations

import numpy as np
import pytest

from lightfoot_pipeline.snapshot import codes, spill
from lightfoot_pipeline.snapshot.codes import RowCodes, code_columns, encode, encode_query


def test_codes_approximate_each_row_within_half_a_step_and_pad_to_the_product_s_width():
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((50, 44)).astype(np.float16)
    rows[7] = 0  # a zero row: zero codes, scale 1
    coded, scales = encode(rows)
    assert coded.dtype == np.int8 and coded.shape == (50, code_columns(44)) == (50, 48)
    assert not coded[:, 44:].any() and not coded[7].any() and scales[7] == 1.0
    assert np.abs(coded).max(axis=1)[np.arange(50) != 7].min() == codes.LEVELS  # the largest component is ±127
    decoded = coded[:, :44].astype(np.float32) * scales[:, None]
    assert np.all(np.abs(decoded - rows.astype(np.float32)) <= scales[:, None] / 2 + 1e-6)
    query, scale = encode_query(rows[3].astype(np.float32))
    np.testing.assert_array_equal(query, coded[3])
    assert scale == scales[3]
    with pytest.raises(ValueError, match="multiple of 8"):
        RowCodes(coded[:, :44], scales)
    with pytest.raises(ValueError, match="scales"):
        RowCodes(coded, scales[:10])


def test_codes_written_a_chunk_at_a_time_are_those_of_the_whole_matrix(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    matrix = rng.standard_normal((37, 20)).astype(np.float16)
    np.save(tmp_path / "vectors.npy", matrix)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 5)
    written = codes.spilled(spill.opened(tmp_path / "vectors.npy"), tmp_path)
    whole = codes.in_memory(matrix)
    assert isinstance(written.codes, np.memmap) and not written.codes.flags.writeable
    np.testing.assert_array_equal(written.codes, whole.codes)
    np.testing.assert_array_equal(written.scales, whole.scales)
    assert written.fits(20) and not written.fits(24 + 1)
