"""Eight-bit codes of a snapshot's fact vectors: what an indexed query scores first.

A large snapshot's fact vectors are most of what a query replica holds: at a million passages,
6.2M facts of 384 float16 dimensions are 4.8 GB, and the questions of a day probe nearly every
group of the fact index (fact_index.py), so nearly every page of them ends up resident. The
codes halve that. Each row is stored as int8 values and one float32 scale (symmetric, per row:
``row ≈ codes * scale``, the largest component at ±127), its columns padded with zeros to a
multiple of :data:`COLUMN_MULTIPLE` (what the integer product needs). A question is coded the same
way, the probed groups' rows are scored by an int8 product with int32 sums (torch's
``_int_mm``), and the best candidates are scored again, exactly, from the float16 rows
(retrieval/seeding.py): only those rows' pages of the float16 file are read.

The codes are a function of the float16 rows alone, written by the export beside them
(``fact_codes.npy``, ``fact_code_scales.npy``) a chunk of rows at a time, like the vectors
(spill.py). A snapshot without them (an earlier export, a fact table below the index's size)
scores the float16 rows, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lightfoot_pipeline.snapshot import spill

CODES_FILE = "fact_codes.npy"
SCALES_FILE = "fact_code_scales.npy"
COLUMN_MULTIPLE = 8  # the int8 product takes inner dimensions that are multiples of 8
LEVELS = 127  # the largest code's magnitude


def code_columns(dim: int) -> int:
    """The columns of the codes of ``dim``-dimensional vectors: ``dim`` rounded up to COLUMN_MULTIPLE."""
    return -(-dim // COLUMN_MULTIPLE) * COLUMN_MULTIPLE


@dataclass(frozen=True, eq=False)
class RowCodes:
    """int8 codes and float32 scales of the rows of a (n, dim) vector matrix: row i ≈ codes[i, :dim] * scales[i]."""

    codes: np.ndarray  # (n, code_columns(dim)) int8, usually memory-mapped
    scales: np.ndarray  # (n,) float32, usually memory-mapped

    def __post_init__(self) -> None:
        if self.codes.ndim != 2 or self.codes.dtype != np.int8 or self.codes.shape[1] % COLUMN_MULTIPLE:
            raise ValueError(f"vector codes are an int8 matrix of a multiple of {COLUMN_MULTIPLE} columns, "
                             f"not {self.codes.dtype} of shape {self.codes.shape}")
        if self.scales.shape != (self.codes.shape[0],) or self.scales.dtype != np.float32:
            raise ValueError(f"{self.codes.shape[0]} coded rows need as many float32 scales, "
                             f"not {self.scales.dtype} of shape {self.scales.shape}")

    @property
    def rows(self) -> int:
        return int(self.codes.shape[0])

    def fits(self, dim: int) -> bool:
        """Whether these are codes of ``dim``-dimensional vectors."""
        return self.codes.shape[1] == code_columns(dim)


def encode(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, scales) of a (k, dim) block of rows: int8 (k, code_columns(dim)) and float32 (k,).
    An all-zero row has scale 1 and zero codes."""
    block = np.asarray(rows, dtype=np.float32)
    peak = np.abs(block).max(axis=1) if block.shape[1] else np.zeros(block.shape[0], dtype=np.float32)
    scales = np.where(peak > 0, peak / LEVELS, 1.0).astype(np.float32)
    codes = np.zeros((block.shape[0], code_columns(block.shape[1])), dtype=np.int8)
    codes[:, : block.shape[1]] = np.clip(np.rint(block / scales[:, None]), -LEVELS, LEVELS)
    return codes, scales


def encode_query(q: np.ndarray) -> tuple[np.ndarray, float]:
    """A question vector's codes, (code_columns(dim),) int8, and its scale."""
    codes, scales = encode(np.asarray(q, dtype=np.float32)[None, :])
    return codes[0], float(scales[0])


def in_memory(vectors: np.ndarray) -> RowCodes:
    """The codes of a matrix held in memory (a test's, or a snapshot rebuilt in memory)."""
    codes, scales = encode(vectors)
    return RowCodes(codes, scales)


def spilled(vectors: np.ndarray, folder: Path) -> RowCodes:
    """The codes of a (possibly memory-mapped) float16 matrix as two ``.npy`` files in ``folder``
    (CODES_FILE and SCALES_FILE, an export's scratch folder), a chunk of rows at a time, mapped
    read-only when done."""
    n, dim = vectors.shape
    codes = np.lib.format.open_memmap(folder / CODES_FILE, mode="w+", dtype=np.int8, shape=(n, code_columns(dim)))
    scales = np.lib.format.open_memmap(folder / SCALES_FILE, mode="w+", dtype=np.float32, shape=(n,))
    for lo, hi in spill.chunks(n):
        codes[lo:hi], scales[lo:hi] = encode(vectors[lo:hi])
        spill.release(codes)
        spill.release(vectors)
    scales.flush()
    del codes, scales
    return RowCodes(spill.opened(folder / CODES_FILE), spill.opened(folder / SCALES_FILE))
