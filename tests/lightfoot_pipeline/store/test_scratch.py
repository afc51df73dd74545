"""Scratch folders: a copy of documents that a killed process left is swept, and nothing else is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

from lightfoot_pipeline.store import scratch
from lightfoot_pipeline.store.scratch import MARKER, new_scratch, scratch_folder, sweep_stale_scratch


@pytest.fixture
def tmpdir_root(tmp_path, monkeypatch):
    """The temporary directory, for this process and the ones it starts, is the test's own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


def test_a_folder_whose_process_was_killed_is_swept_and_a_live_ones_is_kept(tmpdir_root):
    killed = subprocess.run(
        [sys.executable, "-c", "import os; from lightfoot_pipeline.store.scratch import new_scratch; "
         "folder = new_scratch('rebuild-check'); (folder / 'copy.txt').write_text('a document'); "
         "print(folder); os._exit(9)"],  # no clean-up, as after SIGKILL
        capture_output=True, text=True, env={**os.environ, "TMPDIR": str(tmpdir_root)})
    left = tmpdir_root / os.path.basename(killed.stdout.strip())
    assert left.name.startswith("lightfoot-rebuild-check-") and (left / "copy.txt").exists()
    mine = new_scratch("permission-check")  # this one sweeps first: the killed process's folder goes
    assert not left.exists() and mine.exists()
    assert sweep_stale_scratch() == [] and mine.exists()  # a running owner's folder stays
    with scratch_folder("batch") as folder:
        assert (folder / MARKER).exists()
    assert not folder.exists()


def test_a_recycled_pid_another_hosts_folder_and_an_unmarked_folder(tmpdir_root, monkeypatch):
    def marked(name: str, owner: dict):
        folder = tmpdir_root / name
        folder.mkdir()
        (folder / MARKER).write_text(json.dumps(owner))
        return folder

    me = scratch._start_ticks(os.getpid())
    if me is None:
        pytest.skip("no /proc here: a process's start time is unknown")
    recycled = marked("lightfoot-audit-1", {"host": scratch.socket.gethostname(), "pid": os.getpid(), "started": me - 1})
    elsewhere = marked("lightfoot-audit-2", {"host": "another-host", "pid": 1, "started": 0})
    unmarked = tmpdir_root / "lightfoot-mine"
    unmarked.mkdir()
    garbled = marked("lightfoot-audit-3", {"host": scratch.socket.gethostname()})
    assert sweep_stale_scratch() == [recycled.name]
    assert elsewhere.exists() and unmarked.exists() and garbled.exists()
