"""An export's vectors on local disk: filled, reordered and copied a chunk of rows at a time.

A snapshot's vector matrices are the largest thing an export makes (eight facts a passage, 768
bytes a fact at 384 dimensions in float16: about 6 GB at a million passages). The export holds
none of them whole: each is a ``.npy`` file in the export's scratch folder (store/scratch.py),
memory-mapped, filled :data:`CHUNK_ROWS` rows at a time, and the mapping's pages are let go after
each chunk (:func:`release`), so that what the export holds follows the chunk, not the matrix.
The file is already in the snapshot's format (``np.save``'s header and rows), so writing the
snapshot copies it (snapshot/export.py).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path

import numpy as np

CHUNK_ROWS = 131_072  # rows filled, gathered or assigned between two releases (96 MB at 384 float16)


def chunks(n: int, size: int | None = None) -> Iterator[tuple[int, int]]:
    """(lo, hi) of consecutive pieces of ``range(n)``, of ``size`` rows (CHUNK_ROWS by default)."""
    size = size or CHUNK_ROWS
    for lo in range(0, n, size):
        yield lo, min(n, lo + size)


def new_matrix(path: Path, rows: int, dim: int) -> np.memmap:
    """A new (rows, dim) float16 ``.npy`` file at ``path``, mapped for writing."""
    return np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(rows, dim))


def opened(path: Path) -> np.ndarray:
    """The ``.npy`` file at ``path``, mapped read-only."""
    return np.load(path, mmap_mode="r", allow_pickle=False)


def release(array) -> None:
    """Let go of the pages of ``array``'s memory mapping that this process holds (written ones
    are flushed to the file first): they leave its resident set and stay in the page cache. An
    array that is not memory-mapped is left as it is."""
    base = array
    while base is not None and not isinstance(base, np.memmap):
        base = getattr(base, "base", None)
    mapping = getattr(base, "_mmap", None)
    if mapping is None:
        return
    if base.flags.writeable:
        mapping.flush()
    mapping.madvise(mmap.MADV_DONTNEED)


def gathered(vectors: np.ndarray, order: np.ndarray, path: Path) -> np.ndarray:
    """``vectors[order]`` as a new file at ``path`` (read-only mapped), a chunk of rows at a time."""
    out = new_matrix(path, order.size, vectors.shape[1])
    for lo, hi in chunks(order.size):
        out[lo:hi] = vectors[order[lo:hi]]
        release(out)
        release(vectors)
    del out
    return opened(path)
