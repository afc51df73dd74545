"""An export's vectors, tables and graph on local disk: written as the snapshot's files, and mapped.

A snapshot's vector matrices are the largest thing an export makes (eight facts a passage, 768
bytes a fact at 384 dimensions in float16: about 6 GB at a million passages). The export holds
none of them whole: each is a ``.npy`` file in the export's scratch folder (store/scratch.py),
memory-mapped, filled :data:`CHUNK_ROWS` rows at a time, and the mapping's pages are let go after
each chunk (:func:`release`), so that what the export holds follows the chunk, not the matrix.

The node tables and the graph's arrays go the same way once they are assembled (:func:`table`,
:func:`array`): written to the scratch folder and mapped back, so that while the export embeds,
indexes and codes, their rows are pages of files (clean, and reclaimable), not the process's own
memory: at a million passages the tables are gigabytes of strings.

Every file is already in the snapshot's format (``np.save``'s header and rows; an Arrow IPC file,
format.py), so writing the snapshot copies it (snapshot/export.py).

A query replica's reader views go the same way, to files that have no name (:class:`UnnamedFiles`):
written to a scratch folder, mapped back, and the folder removed at once. Their pages are the
mappings' (clean once written back, so the kernel can reclaim them under a pod's memory limit and
read them again), a file's blocks are freed when the last frame or array over it is let go, and a
process that ends however it ends leaves nothing on disk: the kernel frees a file without a name
with its last mapping. (A process killed while it writes them leaves a marked scratch folder,
which the next sweep removes: store/scratch.py.)
"""

from __future__ import annotations

import mmap
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from lightfoot_pipeline.store.scratch import new_scratch

CHUNK_ROWS = 131_072  # rows filled or coded between two releases (96 MB at 384 float16)
GATHER_ROWS = 8_192  # rows gathered from all over a file between two releases (gathered)
INLINE_BYTES = 12  # an Arrow string view holds a string of up to this many bytes itself


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


def _mapped(array) -> tuple[np.memmap, mmap.mmap] | None:
    """The memory-mapped array ``array`` is a view of, and its mapping; None when it is not mapped."""
    base = array
    while base is not None and not isinstance(base, np.memmap):
        base = getattr(base, "base", None)
    mapping = getattr(base, "_mmap", None)
    return None if base is None or mapping is None else (base, mapping)


def release(array) -> None:
    """Let go of the pages of ``array``'s memory mapping that this process holds (written ones
    are flushed to the file first): they leave its resident set and stay in the page cache. An
    array that is not memory-mapped is left as it is."""
    mapped = _mapped(array)
    if mapped is None:
        return
    base, mapping = mapped
    if base.flags.writeable:
        mapping.flush()
    mapping.madvise(mmap.MADV_DONTNEED)


def read_at_random(array) -> None:
    """Tell the kernel that ``array``'s mapping is read in no order, so that a page read from disk
    does not bring its neighbours in (readahead): a query replica re-scores a few float16 fact
    rows spread over the file (format.py). An array that is not memory-mapped is left as it is."""
    mapped = _mapped(array)
    if mapped is not None:
        mapped[1].madvise(mmap.MADV_RANDOM)


def gathered(vectors: np.ndarray, order: np.ndarray, path: Path) -> np.ndarray:
    """``vectors[order]`` as a new file at ``path`` (read-only mapped), GATHER_ROWS rows at a time.

    The rows of a chunk are spread over the whole source file, and each page fault maps the pages
    around it as well (the kernel's fault-around, which the advice of ``read_at_random`` does not
    stop): a chunk of CHUNK_ROWS rows mapped nearly all of a 4.8 GB file at 800,000 passages (a
    4.5 GB peak), so the pages are let go after a smaller chunk."""
    out = new_matrix(path, order.size, vectors.shape[1])
    for lo, hi in chunks(order.size, GATHER_ROWS):
        out[lo:hi] = vectors[order[lo:hi]]
        release(out)
        release(vectors)
    del out
    return opened(path)


def write_table(frame: pl.DataFrame, sink) -> None:
    """``frame`` as an Arrow IPC file, uncompressed, streamed to ``sink`` (a path or a writable
    stream): the snapshot's table format (format.py). Its strings are Arrow string views, Polars'
    own layout, so a mapped table is a frame without a conversion (a string column of another type
    would be copied into views at every load). A string column whose buffers are mostly strings
    no row uses is written compacted (:func:`compacted`)."""
    table = frame.to_arrow(compat_level=pl.CompatLevel.newest())
    table = pa.table([compacted(column) for column in table.columns], schema=table.schema)
    with ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def compacted(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A string-view column whose data buffers hold more than twice the bytes its rows use, copied
    into buffers of its rows' strings alone; any other column as it is. A frame filtered from
    another shares the other's buffers (views point into them), and an IPC file holds every buffer
    a column points into: a view of a tenth of the documents would write its tables' whole
    buffers."""
    if not pa.types.is_string_view(column.type) and not pa.types.is_binary_view(column.type):
        return column
    held, used, seen = 0, 0, set()
    for chunk in column.chunks:
        buffers = chunk.buffers()
        for buffer in buffers[2:]:
            if buffer is not None and buffer.address not in seen:
                seen.add(buffer.address)
                held += buffer.size
        # a view is 16 bytes, its string's length first; strings of up to 12 bytes are in the view
        lengths = np.frombuffer(buffers[1], dtype=np.int32).reshape(-1, 4)[chunk.offset : chunk.offset + len(chunk), 0]
        used += int(lengths[lengths > INLINE_BYTES].sum(dtype=np.int64))
    if held <= 2 * used + (1 << 20):
        return column
    plain = pa.large_string() if pa.types.is_string_view(column.type) else pa.large_binary()
    return pc.cast(pc.cast(column, plain), column.type)


def mapped_table(path: Path) -> pl.DataFrame:
    """The Arrow IPC file at ``path`` as a frame over its memory mapping: its columns uncopied."""
    frame = pl.from_arrow(ipc.open_file(pa.memory_map(str(path), "r")).read_all(), rechunk=False)
    assert isinstance(frame, pl.DataFrame), "an Arrow table converts to a DataFrame"
    return frame


def table(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    """``frame`` written to ``path`` as a snapshot table file, and read back mapped from it: once
    the caller lets go of ``frame``, its rows are pages of the file, not this process's memory."""
    with pa.OSFile(str(path), "wb") as out:
        write_table(frame, out)
    return mapped_table(path)


def array(values: np.ndarray, path: Path) -> np.ndarray:
    """``values`` written to ``path`` as a ``.npy`` file, and mapped back read-only."""
    np.save(path, np.ascontiguousarray(values), allow_pickle=False)
    return opened(path)


class UnnamedFiles:
    """Frames and arrays moved out of the process's memory into files without a name (see the
    module docstring): each :meth:`table` and :meth:`array` is written to the folder and mapped
    back; :meth:`close` (or the end of a ``with`` block) removes the folder, and with it every
    file's name. A frame or array mapped earlier stays readable: a mapping holds its file.
    ``bytes`` counts what was written: the disk the mapped frames and arrays hold."""

    def __init__(self, label: str) -> None:
        self.folder: Path | None = new_scratch(label)
        self.bytes = 0
        self._files = 0

    def table(self, frame: pl.DataFrame) -> pl.DataFrame:
        return self._written(lambda path: table(frame, path), ".arrow")

    def array(self, values: np.ndarray) -> np.ndarray:
        return self._written(lambda path: array(values, path), ".npy")

    def _written(self, write, suffix: str):
        if self.folder is None:
            raise RuntimeError("these unnamed files are closed")
        self._files += 1
        path = self.folder / f"{self._files}{suffix}"
        try:
            mapped = write(path)
        except OSError as err:  # a full or read-only scratch disk: say which
            raise OSError(err.errno, f"could not write {path.name} under the scratch directory {self.folder.parent} "
                                     f"(TMPDIR): {err.strerror or err}") from err
        self.bytes += path.stat().st_size
        return mapped

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def __enter__(self) -> UnnamedFiles:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
