"""Scratch folders: where a check, an audit or a batch writes copies of documents for a while.

A fresh rebuild for the exactness check, a permission audit's reference stores and a Batch API
request file all hold document text, as do an export's node tables (snapshot/spill.py: the
passages' text, until the snapshot is written) beside its vector files, in a local folder under the system's temporary directory (``TMPDIR``). Each is removed when its work ends; a process that is killed first (out of memory,
a pod's deadline, ``kill -9``) cannot remove it, and a copy of an erased document would then
outlive the erasure. So every scratch folder carries its owner (host, process id and the
process's start time) in a marker file, and :func:`sweep_stale_scratch` removes every one whose
owner on this host has ended: each new scratch folder sweeps before it is made, and every
erasure and vacuum sweeps too, saying how many it removed. A folder of a process still running,
or of another host sharing the directory, is left alone, and so is any folder without a readable
marker: it is not known to be Lightfoot's (a process killed between making a folder and marking
it leaves it empty).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

PREFIX = "lightfoot-"
MARKER = ".lightfoot-scratch.json"
MAX_MARKER_BYTES = 4096


def _start_ticks(pid: int) -> int | None:
    """When a process started, in clock ticks since boot (Linux's /proc), or None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name, field 2, is in parentheses and may hold spaces: fields after it are split.
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return int(fields[19])  # field 22: starttime
    except (IndexError, ValueError):
        return None


def _alive(pid: int, started: int | None) -> bool:
    """Whether process ``pid`` is the one that started at ``started`` and still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    now = _start_ticks(pid)
    return started is None or now is None or now == started  # a recycled pid started later


def scratch_root() -> Path:
    return Path(tempfile.gettempdir())


def new_scratch(label: str) -> Path:
    """A new scratch folder ``lightfoot-<label>-…`` owned by this process (stale ones swept first);
    the caller removes it when its work ends."""
    sweep_stale_scratch()
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{label}-", dir=scratch_root()))
    owner = {"host": socket.gethostname(), "pid": os.getpid(), "started": _start_ticks(os.getpid())}
    (folder / MARKER).write_text(json.dumps(owner))
    return folder


def _stale(folder: Path, host: str) -> bool:
    marker = folder / MARKER
    try:
        if marker.is_symlink() or marker.stat().st_size > MAX_MARKER_BYTES:
            return False
        owner = json.loads(marker.read_text())
        pid, started, their_host = int(owner["pid"]), owner.get("started"), str(owner["host"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # no readable marker: not known to be a scratch folder
    if their_host != host:
        return False  # another host's process: this one cannot tell whether it runs
    return not _alive(pid, int(started) if isinstance(started, int) else None)


def sweep_stale_scratch(root: Path | None = None) -> list[str]:
    """Remove the scratch folders under ``root`` (default: the temporary directory) whose owner
    on this host has ended; the names removed."""
    root = scratch_root() if root is None else Path(root)
    host = socket.gethostname()
    removed: list[str] = []
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(PREFIX) and p.is_dir() and not p.is_symlink()]
    except OSError:
        return removed
    for folder in candidates:
        if _stale(folder, host):
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                removed.append(folder.name)
    return removed


@contextlib.contextmanager
def scratch_folder(label: str) -> Iterator[Path]:
    """A new scratch folder (:func:`new_scratch`) for the duration of a ``with`` block."""
    folder = new_scratch(label)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
