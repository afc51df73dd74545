"""The test tiers are configured as the README says: pytest refuses unknown markers, and the fast
tier of ./scripts/test.sh deselects exactly the registered tier markers."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIER_MARKERS = {"slow", "minilm", "dagster", "postgres", "s3"}


def pytest_options() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def test_pytest_refuses_a_marker_it_does_not_know():
    assert "--strict-markers" in pytest_options()["addopts"].split()


def test_every_tier_marker_is_registered():
    registered = {line.split(":", 1)[0].strip() for line in pytest_options()["markers"]}
    assert registered >= TIER_MARKERS


def test_the_fast_tier_deselects_every_tier_marker_and_the_full_run_deselects_none():
    script = (REPO / "scripts" / "test.sh").read_text()
    (expression,) = re.findall(r'^FAST_TIER="([^"]+)"$', script, re.M)
    assert set(re.findall(r"not (\w+)", expression)) == TIER_MARKERS
    assert expression == " and ".join(f"not {m}" for m in re.findall(r"not (\w+)", expression))
    fast_run, full_run = script.split('if [ "$fast" -eq 1 ]; then\n  # The tier', 1)[1].split("else\n", 1)
    full_run = full_run.split("fi\n", 1)[0]
    assert '-m "$FAST_TIER"' in fast_run and not re.search(r"pytest .*-m ", full_run)
    assert "--durations=25" in fast_run and "--durations=25" in full_run
    assert "took %dm%02ds of wall time" in script


def test_the_minilm_build_starts_first_and_its_other_readers_go_last():
    from types import SimpleNamespace

    from tests.conftest import in_starting_order

    def item(name, *fixtures):
        return SimpleNamespace(name=name, fixturenames=("tmp_path", *fixtures))

    items = [item("a"), item("recall", "minilm_sample_store"), item("b", "minilm"),
             item("audit", "minilm_sample_store", "minilm"), item("c")]
    assert [i.name for i in in_starting_order(items)] == ["recall", "a", "b", "c", "audit"]
    unchanged = [item("a"), item("b", "minilm")]
    assert in_starting_order(unchanged) == unchanged
