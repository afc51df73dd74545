"""Progress lines for long command-line runs (to stderr, so that --json output stays clean)."""

from __future__ import annotations

import sys
import time


class Progress:
    """A callback ``(done, total)`` that prints a rate-limited progress line with an ETA."""

    def __init__(self, label: str, stream=None, every_seconds: float = 1.0) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.every = every_seconds
        self.started = time.monotonic()
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < self.every:
            return
        self._last = now
        elapsed = now - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        end = "\n" if done >= total else "\r"
        self.stream.write(f"{self.label}: {done}/{total} ({rate:.1f}/s, {eta:.0f}s left){' ' * 8}{end}")
        self.stream.flush()
