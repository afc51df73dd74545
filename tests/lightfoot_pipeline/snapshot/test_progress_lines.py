"""Export progress as lines: for a log (Dagster's) and for the command line."""

from __future__ import annotations

import io

from lightfoot_pipeline.cli.progress import StepProgress
from lightfoot_pipeline.snapshot import collect


def test_log_lines_are_rate_limited_per_step_and_always_end_a_step(monkeypatch):
    clock = iter([0.0, 1.0, 2.0, 7.0, 8.0, 8.0, 9.0])
    monkeypatch.setattr(collect.time, "monotonic", lambda: next(clock))
    lines: list[str] = []
    report = collect.progress_lines(lines.append, every_seconds=5.0)
    report("fact vectors", 0, 4096)  # t=0: starts the step, too soon to say more
    report("fact vectors", 2048, 4096)  # t=1
    report("fact vectors", 3000, 4096)  # t=2
    report("fact vectors", 3500, 4096)  # t=7: five seconds on
    report("fact vectors", 4096, 4096)  # t=8: the end
    report("writing the snapshot", 0, 8)  # t=8
    report("writing the snapshot", 8, 8)  # t=9
    assert lines == [
        "snapshot export, fact vectors: 3,500/4,096 (500/s)",
        "snapshot export, fact vectors: 4,096/4,096 (512/s)",
        "snapshot export, writing the snapshot: 8/8 (8/s)",
    ]


def test_the_command_line_shows_one_progress_line_per_step():
    stream = io.StringIO()
    progress = StepProgress("snapshot", stream=stream, every_seconds=0.0)
    progress("passage vectors", 6, 6)
    progress("writing the snapshot", 8, 8)
    out = stream.getvalue().splitlines()
    assert out[0].startswith("snapshot: passage vectors: 6/6 (")
    assert out[1].startswith("snapshot: writing the snapshot: 8/8 (")
