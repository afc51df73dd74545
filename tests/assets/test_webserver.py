"""The Dagster UI: the webserver on loopback serves the asset graph, and headless Chromium shows
every asset by name. Screenshots are kept under tests/artifacts/ (not committed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.assets.webserver import REPO, chromium, dagster_webserver, free_port

pytestmark = [pytest.mark.dagster]

ARTIFACTS = REPO / "tests" / "artifacts"
GROUPS = {
    "sources": ["source_files"],
    "batches": ["passages", "extraction_cache", "extractions", "forms"],
    "graph": ["name_vectors", "name_links", "entities", "synonym_edges", "facts"],
    "serving": ["serving_snapshot"],
    "retention": ["tombstones", "erasures"],
}


def _render(browser: str, url: str, screenshot: Path) -> str:
    """The page's DOM after its scripts ran (and a screenshot of it)."""
    command = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
        "--window-size=1600,1000", "--virtual-time-budget=30000", f"--screenshot={screenshot}", "--dump-dom", url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture
def webserver(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    with dagster_webserver(home, free_port(), str(tmp_path / "store"), tmp_path / "webserver.log", 180) as base:
        yield base


@pytest.mark.slow
def test_the_asset_graph_shows_every_asset(webserver):
    browser = chromium()
    if browser is None:
        pytest.skip("no Chromium on this machine (scripts/setup.sh installs it with apt-get)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    lineage = _render(browser, f"{webserver}/asset-groups", ARTIFACTS / "asset-graph.png")
    assert "Global asset lineage" in lineage
    for group in GROUPS:
        assert f">{group}<" in lineage, f"group {group} is not on the global asset graph"
    for group, assets in GROUPS.items():
        page = _render(browser, f"{webserver}/locations/lightfoot/asset-groups/{group}/lineage",
                       ARTIFACTS / f"asset-graph-{group}.png")
        missing = [name for name in assets if name not in page]
        assert not missing, f"the {group} graph does not show {missing}"
