"""Peak memory of the benchmark's own process, the figure every benchmark reports."""

from __future__ import annotations

import resource
from pathlib import Path


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB, to 0.1: Linux's VmHWM where it gives one (a
    forked process's figure does not carry its parent's over, unlike ru_maxrss), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
