#!/usr/bin/env bash
# Set up (if needed), check the architecture, and run the whole test suite. The linter (ruff) and
# the import contracts (import-linter: layers, no cycles, an engine free of Dagster; both configured
# in pyproject.toml) run first, and either failing fails the run. pytest's exit code 5 (no tests
# collected) counts as a failure here: a suite that runs nothing has not passed.
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh || exit 1
.venv/bin/ruff check . || { echo "ruff found problems: failing" >&2; exit 1; }
.venv/bin/lint-imports || { echo "an import contract is broken: failing" >&2; exit 1; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/python -m pytest -q "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$status"
