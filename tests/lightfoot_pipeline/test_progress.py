"""Progress as lines: for a log (Dagster's) and for the command line's stderr."""

from __future__ import annotations

import io

import pytest
import tqdm.std

from lightfoot_pipeline.progress import Progress, StepProgress, line, name_progress


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> _Clock:
    clock = _Clock()
    monkeypatch.setattr(tqdm.std, "time", clock)  # the clock of tqdm's meters
    return clock


def test_a_line_says_count_rate_and_time_left():
    assert line("embedding names", 9216, 19146, 75.0) == "embedding names: 9,216/19,146 (123/s, 81s left)"
    assert line("extracting", 3, 10, 6.0) == "extracting: 3/10 (0.5/s, 14s left)"
    assert line("extracting", 10, 10, 20.0, initial=4) == "extracting: 10/10 (0.3/s)"  # done: no time left


def test_name_lines_speak_only_during_long_passes(clock):
    lines: list[str] = []
    report = name_progress(lines.append, every_seconds=5.0)
    report(0, 1200)
    for seconds, done in ((3, 512), (6, 1024), (9, 1200)):
        clock.now = 100.0 + seconds
        report(done, 1200)
    assert lines == ["embedding names: 1,024/1,200 (171/s, 1s left)", "embedding names: 1,200/1,200 (133/s)"]
    report(0, 300)  # a new pass starts its own clock
    clock.now += 1
    report(300, 300)
    assert len(lines) == 2  # a pass of a second says nothing
    report(0, 50)
    clock.now += 7
    report(50, 50)
    assert lines[-1] == "embedding names: 50/50 (7.1/s)"  # one slow chunk: its end is reported, once
    assert len(lines) == 3


def test_log_lines_are_rate_limited_per_step_and_always_end_a_step(clock):
    lines: list[str] = []
    report = StepProgress("snapshot export", lines.append, every_seconds=5.0)
    for now, (step, done, total) in zip([0, 1, 2, 7, 8, 8, 9], [
        ("fact vectors", 0, 4096),  # starts the step, too soon to say more
        ("fact vectors", 2048, 4096),
        ("fact vectors", 3000, 4096),
        ("fact vectors", 3500, 4096),  # five seconds on
        ("fact vectors", 4096, 4096),  # the end
        ("writing the snapshot", 0, 8),
        ("writing the snapshot", 8, 8),
    ], strict=True):
        clock.now = float(now)
        report(step, done, total)
    assert lines == [
        "snapshot export, fact vectors: 3,500/4,096 (500/s, 1s left)",
        "snapshot export, fact vectors: 4,096/4,096 (512/s)",
        "snapshot export, writing the snapshot: 8/8 (8.0/s)",
    ]


def test_a_resumed_pass_counts_its_rate_from_where_it_resumed(clock):
    lines: list[str] = []
    report = Progress("extracting", lines.append, every_seconds=5.0)
    report(600, 1000)  # 600 passages were already extracted
    clock.now += 10
    report(800, 1000)
    assert lines == ["extracting: 800/1,000 (20/s, 10s left)"]


def test_the_command_line_shows_one_live_line_per_step():
    stream = io.StringIO()
    progress = StepProgress("snapshot", stream=stream, every_seconds=0.0)
    progress("passage vectors", 0, 6)
    progress("passage vectors", 6, 6)
    progress("writing the snapshot", 8, 8)
    out = stream.getvalue().split("\n")[:-1]
    assert [part.rsplit("\r", 1)[-1].split(" (")[0] for part in out] == [
        "snapshot, passage vectors: 6/6", "snapshot, writing the snapshot: 8/8"]
    assert out[0].startswith("\rsnapshot, passage vectors: 0/6 (")  # redrawn in place, ended by a newline


def test_stderr_sent_to_a_file_gets_a_line_per_report(clock, capsys):
    progress = Progress("extracting", every_seconds=0.0)  # pytest's captured stderr is no terminal
    for done in range(4):
        clock.now += 1.0
        progress(done, 3)
    lines = capsys.readouterr().err.split("\n")
    assert "\r" not in "".join(lines) and lines[-1] == ""
    assert [text.split(" (")[0] for text in lines[:-1]] == ["extracting: 1/3", "extracting: 2/3", "extracting: 3/3"]


def test_the_peak_resident_memory_is_a_positive_figure_in_mb():
    from lightfoot_pipeline.progress import peak_rss_mb

    peak = peak_rss_mb()
    assert 1.0 < peak < 1_000_000.0 and round(peak, 1) == peak
