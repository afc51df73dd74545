#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite. pytest's exit code 5 (no tests collected)
# counts as a failure here: a suite that runs nothing has not passed.
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh || exit 1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/python -m pytest -q "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$status"
