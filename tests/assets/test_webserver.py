"""The Dagster UI: the webserver on loopback serves the asset graph, and headless Chromium shows
every asset by name. Screenshots are kept under tests/artifacts/ (not committed)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.dagster]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "tests" / "artifacts"
GROUPS = {
    "sources": ["source_files"],
    "documents": ["passages", "extraction_cache", "extractions", "forms"],
    "graph": ["name_vectors", "name_links", "entities", "synonym_edges", "facts"],
    "serving": ["serving_snapshot"],
    "retention": ["tombstones", "erasures"],
}


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "LIGHTFOOT_STORE": str(tmp_path / "store"),
           "LIGHTFOOT_EMBEDDER": "hashing:32", "LIGHTFOOT_EXTRACTOR": "replay"}
    log = (tmp_path / "webserver.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{base}/server_info", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, (tmp_path / "webserver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the webserver did not answer within 180 s"
            time.sleep(1)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.mark.slow
def test_the_asset_graph_shows_every_asset(webserver):
    browser = _chromium()
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
