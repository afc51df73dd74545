"""A child process run inside a memory limit, as a pod's container is: a fresh memory cgroup.

Kubernetes enforces a container's memory limit with its memory cgroup (``memory.limit_in_bytes``
on cgroup v1, ``memory.max`` on v2). The cgroup counts the process's own memory and the page-cache
pages it brings in, the pages of files it maps included; when the group reaches its limit the
kernel reclaims its clean file pages (a mapped snapshot's, which are read again from disk when
touched again) and kills the process only when reclaim cannot free enough (anonymous memory, no
swap). So whether a replica fits an 8 GB pod is whether it serves under such a limit, and at what
latency, not whether its resident set, which counts every page of a mapped file it has touched
while nothing pressed it, stays under 8 GB.

A page already cached is charged to the group that first brought it in (v1) and is not charged
again: :func:`evict` drops a snapshot's files from the page cache first (``POSIX_FADV_DONTNEED``;
pages another process maps stay), so the limited child brings in, and is charged for, what it
reads. Creating a cgroup needs root and a writable cgroup file system; :func:`available` says
whether this machine has one.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup")


def _root() -> tuple[Path, int] | None:
    if (V2 / "cgroup.controllers").exists() and "memory" in (V2 / "cgroup.subtree_control").read_text():
        return V2, 2
    if (V1 / "memory.limit_in_bytes").exists():
        return V1, 1
    return None


def available() -> bool:
    """Whether a memory cgroup can be made here (root, a writable cgroup file system)."""
    root = _root()
    return root is not None and os.access(root[0], os.W_OK)


@dataclass
class MemoryLimit:
    """A memory cgroup of ``limit_mb``: :meth:`join` puts the calling process in it (a
    ``preexec_fn``), :meth:`figures` reads what it charged."""

    path: Path
    version: int
    limit_mb: int

    def join(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def figures(self) -> dict:
        """The group's peak charge and how often it hit its limit (v1: ``failcnt``; v2: the
        ``max`` and ``oom_kill`` events)."""
        if self.version == 1:
            peak = int((self.path / "memory.max_usage_in_bytes").read_text())
            out = {"limit_hits": int((self.path / "memory.failcnt").read_text())}
            oom = dict(line.split() for line in (self.path / "memory.oom_control").read_text().splitlines())
            out["oom_kills"] = int(oom.get("oom_kill", 0))
        else:
            peak_file = self.path / "memory.peak"
            peak = int(peak_file.read_text()) if peak_file.exists() else int((self.path / "memory.current").read_text())
            events = dict(line.split() for line in (self.path / "memory.events").read_text().splitlines())
            out = {"limit_hits": int(events.get("max", 0)), "oom_kills": int(events.get("oom_kill", 0))}
        return {"memory_limit_mb": self.limit_mb, "charged_peak_mb": round(peak / 2**20, 1), **out}


@contextlib.contextmanager
def memory_limit(limit_mb: int) -> Iterator[MemoryLimit]:
    """A fresh memory cgroup limited to ``limit_mb`` MiB (no swap), removed on leaving."""
    root = _root()
    if root is None:
        raise RuntimeError("no memory cgroup file system here (/sys/fs/cgroup)")
    base, version = root
    path = base / f"lightfoot-bench-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        limit = str(limit_mb * 2**20)
        if version == 1:
            (path / "memory.limit_in_bytes").write_text(limit)
            with contextlib.suppress(OSError):  # absent without swap accounting
                (path / "memory.memsw.limit_in_bytes").write_text(limit)
        else:
            (path / "memory.max").write_text(limit)
            (path / "memory.swap.max").write_text("0")
        yield MemoryLimit(path, version, limit_mb)
    finally:
        with contextlib.suppress(OSError):
            path.rmdir()


def evict(folder: Path) -> int:
    """Drop the files under ``folder`` from the page cache (pages a process maps stay); returns
    the bytes advised."""
    advised = 0
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            advised += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return advised
