"""scripts/dagster-dev.sh: `dg dev` on loopback starts on the instance under DAGSTER_HOME without a
warning, runs this checkout's code location, and reads the paths it is given relative to the checkout."""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.request

import pytest

from tests.assets.webserver import REPO, free_port, stop_process_group

pytestmark = [pytest.mark.dagster, pytest.mark.slow]

SENSORS = ("inbox_sensor", "erasure_sensor", "sync_sensor", "outside_deletions_sensor", "store_log_sensor",
           "pool_limits_sensor")
DEADLINE_S = 240


def test_dg_dev_starts_without_a_warning_on_this_checkout(tmp_path):
    home = tmp_path / "dagster_home"
    inbox = tmp_path / "inbox"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "LIGHTFOOT_"))}
    env.update(DAGSTER_HOME=str(home), LIGHTFOOT_STORE=str(tmp_path / "store"), LIGHTFOOT_EMBEDDER="hashing:32",
               LIGHTFOOT_EXTRACTOR="replay", LIGHTFOOT_INBOX=str(inbox / "documents"),
               LIGHTFOOT_ERASURE_INBOX=os.path.relpath(inbox / "erasure", REPO))  # relative: to the checkout
    port = free_port()
    log_path = tmp_path / "dev.log"
    with log_path.open("w") as log:
        server = subprocess.Popen([str(REPO / "scripts" / "dagster-dev.sh"), "-h", "127.0.0.1", "-p", str(port)],
                                  cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            deadline = time.monotonic() + DEADLINE_S
            while not (_answers(port) and all(f"Sensor {s} skipped" in log_path.read_text() for s in SENSORS)):
                assert server.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(2)
        finally:
            stop_process_group(server, timeout_s=60)
    said = re.sub(r"\x1b\[[0-9;]*m", "", log_path.read_text())
    assert not [line for line in said.splitlines() if " - WARNING - " in line], said[-3000:]
    assert (home / "dagster.yaml").read_text() == (REPO / "dagster.yaml").read_text()
    assert any(home.rglob("*.db")), "the instance keeps its storage under DAGSTER_HOME"
    assert f"Sensor inbox_sensor skipped: nothing new in {inbox / 'documents'}" in said
    assert f"Sensor erasure_sensor skipped: no new request file in {inbox / 'erasure'}" in said


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False
