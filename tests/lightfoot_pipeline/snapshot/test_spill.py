"""Frames and arrays written to files and read back through mappings (snapshot/spill.py)."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lightfoot_pipeline.snapshot import spill


def test_a_filtered_frame_is_written_with_its_own_strings_not_its_sources_buffers(tmp_path):
    """A frame filtered from another points into the other's string buffers; its file holds the
    strings of its rows alone, and reads back equal, string views and all."""
    texts = [f"a passage of some length, number {i:06d}" for i in range(200_000)]
    whole = pl.DataFrame({"id": range(len(texts)), "text": texts, "short": [f"s{i % 7}" for i in range(len(texts))]})
    part = whole.filter(pl.col("id") % 50 == 0)
    whole_file, part_file = tmp_path / "whole.arrow", tmp_path / "part.arrow"
    assert spill.table(whole, whole_file).equals(whole)
    back = spill.table(part, part_file)
    assert back.equals(part) and back.schema == part.schema
    # a fiftieth of the rows: well under a tenth of the bytes (without compaction, about the same)
    assert part_file.stat().st_size < whole_file.stat().st_size / 10
    # a frame that uses its buffers is written as it is (nothing to compact)
    column = whole.to_arrow(compat_level=pl.CompatLevel.newest()).column("text")
    assert spill.compacted(column) is column


def mapped_without_a_name() -> set[str]:
    """The files this process maps that have no name left (Linux: /proc/self/maps marks them)."""
    return {line.split(maxsplit=5)[5] for line in Path("/proc/self/maps").read_text().splitlines()
            if line.endswith(" (deleted)")}


def test_unnamed_files_leave_no_name_and_live_as_long_as_their_mappings():
    before = mapped_without_a_name()
    with spill.UnnamedFiles("test") as files:
        folder = files.folder
        assert folder is not None and folder.name.startswith("lightfoot-test-")
        frame = files.table(pl.DataFrame({"x": ["one", "two", "three"]}))
        values = files.array(np.arange(10, dtype=np.int64))
        assert files.bytes > 0
    assert not folder.exists()
    assert frame.get_column("x").to_list() == ["one", "two", "three"] and int(values.sum()) == 45
    assert len(mapped_without_a_name() - before) >= 2
    with pytest.raises(RuntimeError, match="closed"):
        files.table(frame)
    del frame, values
    gc.collect()
    assert not mapped_without_a_name() - before


def test_a_scratch_disk_that_cannot_be_written_names_the_scratch_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "new_scratch", lambda label: tmp_path / "gone")  # a folder that is not there
    files = spill.UnnamedFiles("test")
    with pytest.raises(OSError, match=r"scratch directory .* \(TMPDIR\)"):
        files.array(np.zeros(3))
