"""Progress of long runs as lines: ``embedding names: 9,216/19,146 (123/s, 81s left)``.

The engine reports progress through callbacks: ``(done, total)`` for passes of work (embedding
names, extracting passages) and ``(step, done, total)`` for a run of steps (a snapshot export).
:class:`Progress` and :class:`StepProgress` are those callbacks: each pass is a tqdm meter, which
keeps the time and the rate, limits how often a pass is reported and stays quiet on a short one.
With ``emit`` the lines go to a log (Dagster's ``context.log.info``), one line per report; without,
they are one live line on a terminal's stderr, or lines on a stderr sent to a file or a pipe.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

__all__ = ["LOG_EVERY", "TERMINAL_EVERY", "Progress", "StepProgress", "line", "name_progress"]

LOG_EVERY = 5.0  # seconds between two lines of a pass in a log
TERMINAL_EVERY = 1.0  # seconds between two redraws of a pass's line on a terminal


def line(label: str, done: int, total: int, elapsed: float, initial: int = 0) -> str:
    """``label: done/total (rate/s, seconds left)``; the time left is left out once the pass is done."""
    rate = (done - initial) / elapsed if elapsed > 0 else 0.0
    speed = f"{rate:,.0f}" if rate >= 10 else f"{rate:.1f}"
    left = f", {(total - done) / rate:,.0f}s left" if rate > 0 and done < total else ""
    return f"{label}: {done:,}/{total:,} ({speed}/s{left})"


class _Meter(tqdm):
    """One pass, drawn by tqdm on a terminal as :func:`line`."""

    monitor_interval = 0  # no monitor thread: a pass is reported when it reports

    def __str__(self) -> str:
        info = self.format_dict
        return line(self.desc, info["n"], info["total"], info["elapsed"], info["initial"])


class _LogMeter(_Meter):
    """One pass, whose every display is one line handed to ``emit``."""

    def __init__(self, emit: Callable[[str], None], **kwargs) -> None:
        self._emit = emit
        self._said: int | None = None
        self._closing = False
        super().__init__(file=_Discard(), **kwargs)

    def display(self, msg=None, pos=None) -> bool:
        if msg is None and self.n != self._said and (self.n > self.initial or self._closing):
            self._said = self.n
            self._emit(str(self))
        return True

    def close(self) -> None:
        self._closing = True
        super().close()


class _Discard:
    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


def _on_a_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Progress:
    """A ``(done, total)`` callback over passes of work: a pass starts on the first report, on
    ``done == 0`` or when ``done`` goes back, and ends when ``done`` reaches ``total``.

    A pass is reported at most every ``every_seconds`` (:data:`LOG_EVERY` in a log,
    :data:`TERMINAL_EVERY` on a terminal) and when it ends; one shorter than ``delay`` seconds says
    nothing. ``emit`` takes the lines (for a log); without it they are one live line
    on ``stream``, by default stderr when it is a terminal, and lines on stderr when it is not."""

    def __init__(self, label: str, emit: Callable[[str], None] | None = None, *, stream=None,
                 every_seconds: float | None = None, delay: float = 0.0) -> None:
        if emit is None and stream is None and not _on_a_terminal(sys.stderr):
            emit = _stderr_line  # stderr sent to a file or a pipe keeps one line per report
        self.label = label
        self.emit = emit
        self.stream = stream
        self.every = every_seconds if every_seconds is not None else LOG_EVERY if emit else TERMINAL_EVERY
        self.delay = delay
        self._meter: _Meter | None = None

    def __call__(self, done: int, total: int) -> None:
        meter = self._meter
        if meter is None or done == 0 or done < meter.n or total != meter.total:
            self.close()
            meter = self._meter = self._open(done, total)
        if done > meter.n:
            meter.update(done - meter.n)
        if done >= total:
            self.close()

    def close(self) -> None:
        """Ends the pass under way, if any (its last line is reported)."""
        if self._meter is not None:
            self._meter.close()
            self._meter = None

    def _open(self, done: int, total: int) -> _Meter:
        options = dict(desc=self.label, total=total, initial=done, mininterval=self.every, miniters=1,
                       smoothing=0, delay=self.delay, position=0, leave=True)
        if self.emit is not None:
            return _LogMeter(self.emit, **options)
        return _Meter(file=self.stream or sys.stderr, dynamic_ncols=False, ncols=0, **options)


class StepProgress:
    """A ``(step, done, total)`` callback for a run of steps: a :class:`Progress` per step,
    labelled ``label, step``; a step ends when it is done or when the next one starts."""

    def __init__(self, label: str, emit: Callable[[str], None] | None = None, *, stream=None,
                 every_seconds: float | None = None, delay: float = 0.0) -> None:
        self.label = label
        self._options = dict(emit=emit, stream=stream, every_seconds=every_seconds, delay=delay)
        self._step: str | None = None
        self._progress: Progress | None = None

    def __call__(self, step: str, done: int, total: int) -> None:
        if step != self._step or self._progress is None:
            if self._progress is not None:
                self._progress.close()
            self._step = step
            self._progress = Progress(f"{self.label}, {step}", **self._options)
        self._progress(done, total)


def name_progress(emit: Callable[[str], None] | None = None, *, stream=None,
                  every_seconds: float | None = None) -> Progress:
    """The progress of embedding the names that the vector cache lacks (an ingest, a relink): a line
    at most every ``every_seconds`` (:data:`LOG_EVERY` in a log, two seconds on a terminal), for a
    pass longer than that."""
    every = every_seconds if every_seconds is not None else LOG_EVERY if emit else 2.0
    return Progress("embedding names", emit, stream=stream, every_seconds=every, delay=every)


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
