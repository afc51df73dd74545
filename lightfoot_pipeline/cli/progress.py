"""Progress lines for long command-line runs (to stderr, so that --json output stays clean)."""

from __future__ import annotations

import sys
import time

from lightfoot_pipeline.store.vectors import EmbedProgress, progress_lines


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


class StepProgress:
    """A callback ``(step, done, total)`` for a run of several steps: one :class:`Progress` line per
    step (a snapshot export's reading, embedding, indexing and writing)."""

    def __init__(self, label: str, stream=None, every_seconds: float = 1.0) -> None:
        self.label = label
        self.stream = stream
        self.every = every_seconds
        self._steps: dict[str, Progress] = {}

    def __call__(self, step: str, done: int, total: int) -> None:
        progress = self._steps.get(step)
        if progress is None:
            progress = self._steps[step] = Progress(f"{self.label}: {step}", self.stream, self.every)
        progress(done, total)


def name_progress(stream=None, every_seconds: float = 2.0) -> EmbedProgress:
    """Lines on embedding the new names of an ingest, for a pass longer than ``every_seconds``."""
    out = stream or sys.stderr
    return progress_lines(lambda line: print(line, file=out, flush=True), "embedding names", every_seconds)
