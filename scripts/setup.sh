#!/usr/bin/env bash
# Create .venv and install Lightfoot with its test dependencies, and the deploy extra (dagster-k8s)
# so that the tests also cover the relink job's Kubernetes executor.
# torch is pinned to the CPU build (2.13.0): an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[test,deploy]"
# Headless Chromium for the test that loads the Dagster UI (skipped, saying why, without it).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
    || echo "setup: could not install chromium; the Dagster UI test will be skipped" >&2
fi
