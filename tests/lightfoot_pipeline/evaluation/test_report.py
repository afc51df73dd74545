"""The report renders from a run directory: markdown tables and valid PNG plots."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from lightfoot_pipeline.evaluation.report import PLOT_COST, PLOT_DELETION, PLOT_RECALL, write_report
from lightfoot_pipeline.evaluation.runs import RunError


def assert_real_png(path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        width, height = image.size
        pixels = np.asarray(image.convert("L"))
    assert width >= 400 and height >= 300
    # a plot, not a blank canvas: many distinct grey levels and ink on a good share of it
    assert len(np.unique(pixels)) > 20
    assert (pixels < 200).mean() > 0.01


@pytest.mark.slow
def test_the_report_of_a_deletion_audit(small_audit):
    path = write_report(small_audit.run_dir)
    text = path.read_text()
    assert path == small_audit.run_dir / "report.md"
    for png in (PLOT_RECALL, PLOT_COST, PLOT_DELETION):
        assert f"]({png})" in text
        assert_real_png(small_audit.run_dir / png)
    assert "## Recall@k by mode (before the deletion)" in text
    assert "| lightfoot − dense | recall@5 |" in text and "| lightfoot − hipporag2 | recall@5 |" in text
    d = small_audit.deletion
    assert f"| documents deleted | {d['deleted_docs']} of {d['documents']} " in text
    assert "| model calls during the deletion | 0 (embedder calls: 0) |" in text
    assert "| fingerprint equal to the fresh build | yes |" in text
    assert "| rankings naming a deleted document after the deletion | 0 |" in text
    # every (mode, group, phase) of the audit's recall has its row, with its figures
    for mode, groups in d["recall"].items():
        for group, phases in groups.items():
            for phase, values in phases.items():
                cells = " | ".join(f"{values[m]:.3f}" for m in ("recall@2", "recall@5", "recall@10"))
                assert f"| {mode} | {group} | {phase} | {values['n']} | {cells} |" in text
    assert "This run asked no answers" in text


@pytest.mark.slow
def test_the_report_can_be_written_again_from_the_run_alone(small_audit):
    first = write_report(small_audit.run_dir).read_text()
    second = write_report(small_audit.run_dir).read_text()
    assert first == second


def test_a_directory_without_a_run_has_no_report(tmp_path):
    with pytest.raises(RunError, match="holds no run"):
        write_report(tmp_path)
