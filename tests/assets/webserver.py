"""``dagster_webserver`` on loopback for the UI tests, a free port, and the Chromium to drive them."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dagster_webserver(home: Path, port: int, store: str, log_path: Path, deadline_s: float) -> Iterator[str]:
    """``dagster_webserver`` on loopback on the instance under ``home``, loading the workspace; yields
    its base URL once ``/server_info`` answers (within ``deadline_s``), and stops it after."""
    env = {**os.environ, "DAGSTER_HOME": str(home), "LIGHTFOOT_STORE": store,
           "LIGHTFOOT_EMBEDDER": "hashing:32", "LIGHTFOOT_EXTRACTOR": "replay"}
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + deadline_s
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/server_info", timeout=5) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                assert server.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, f"the webserver did not answer within {deadline_s:.0f} s"
                time.sleep(1)
            yield base
        finally:
            stop_process_group(server, timeout_s=30)


def stop_process_group(server: subprocess.Popen, timeout_s: float) -> None:
    """Stop a server started in a session of its own, and everything it started: SIGTERM, then
    SIGKILL once ``timeout_s`` has passed."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
