"""Rows of a vector matrix held elsewhere: how a reader view holds its vectors without a copy.

A reader view (permissions/views.py) serves some of its snapshot's passages and facts, in its own
order. Copying those rows would cost each view memory in proportion to what it reads (at 100,000
passages about 0.6 GB of fact vectors per view); :class:`SharedRows` keeps instead the snapshot's
matrix (usually memory-mapped, its pages shared by every view and every process on the node) and,
for each of the view's rows, the row of that matrix it is: 8 bytes a row instead of 768.

It reads like the (rows, dim) matrix it stands for where the engine reads vectors: ``shape``,
``dtype``, indexing by a row, a slice or an array of rows (which gathers those rows only), and
``np.asarray`` (which gathers them all). The seeding scorers (retrieval/seeding.py) score the
underlying matrix's rows directly, so a query copies no vector either.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class SharedRows:
    """(len(rows), dim) rows ``rows`` of ``matrix``, in that order, without a copy."""

    matrix: np.ndarray  # (n, dim): the snapshot's vectors
    rows: np.ndarray  # (m,) int64: the row of ``matrix`` of each of these rows

    def __post_init__(self) -> None:
        if self.matrix.ndim != 2 or self.rows.ndim != 1:
            raise ValueError("shared rows are rows of a matrix, picked by a one-dimensional index")
        if self.rows.size and (int(self.rows.min()) < 0 or int(self.rows.max()) >= self.matrix.shape[0]):
            raise ValueError(f"a shared row is outside the {self.matrix.shape[0]} rows of its matrix")

    @classmethod
    def of(cls, vectors: np.ndarray | SharedRows, rows: np.ndarray) -> SharedRows:
        """Rows ``rows`` of ``vectors``, a matrix or shared rows (then rows of the same matrix)."""
        rows = np.asarray(rows, dtype=np.int64)
        if isinstance(vectors, SharedRows):
            return cls(vectors.matrix, vectors.rows[rows])
        return cls(vectors, rows)

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.rows.shape[0]), int(self.matrix.shape[1]))

    @property
    def dtype(self) -> np.dtype:
        return self.matrix.dtype

    @property
    def ndim(self) -> int:
        return 2

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def __getitem__(self, index) -> np.ndarray:
        """The rows ``index`` picks (an int, a slice or an array of rows), gathered from the matrix."""
        return np.asarray(self.matrix[self.rows[index]])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        gathered = np.asarray(self.matrix[self.rows])
        return gathered if dtype is None else gathered.astype(dtype)


def consecutive(rows: np.ndarray) -> slice | None:
    """The slice of a matrix that ``rows`` (some of its row numbers) are when they are consecutive
    rows of it, else None."""
    if not rows.size:
        return slice(0, 0)
    first, last = int(rows[0]), int(rows[-1])
    if last - first + 1 == rows.size and np.all(np.diff(rows) == 1):
        return slice(first, last + 1)
    return None


Vectors = np.ndarray | SharedRows  # a snapshot's vectors: its own matrix, or rows of another's
