#!/usr/bin/env bash
# Set up (if needed), check the architecture, and run the tests. The linter (ruff), the import
# contracts (import-linter: layers, no cycles, an engine free of Dagster) and the type checker (mypy
# over the engine's lower layers; all three configured in pyproject.toml) run first, and any failing
# fails the run. pytest's exit code 5 (no tests collected) counts as a failure here: a suite that
# runs nothing has not passed.
#
#   ./scripts/test.sh            the whole suite (what CI runs, via .ci/run), the 25 slowest listed
#   ./scripts/test.sh --fast     the fast tier: no test marked slow, minilm, dagster, postgres or s3,
#                                few Hypothesis examples, and setup only where .venv is missing
#
# Further arguments go to pytest. HYPOTHESIS_PROFILE (tests/conftest.py) chooses how many examples
# the property tests draw: "ci" for the whole suite, "fast" for the fast tier, unless it is set.
set -uo pipefail
cd "$(dirname "$0")/.."
FAST_TIER="not slow and not minilm and not dagster and not postgres and not s3"
fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
# The fast tier sets up only a missing .venv (./scripts/setup.sh brings an existing one up to date).
if [ "$fast" -eq 0 ] || [ ! -x .venv/bin/python ]; then
  ./scripts/setup.sh || exit 1
fi
.venv/bin/ruff check . || { echo "ruff found problems: failing" >&2; exit 1; }
.venv/bin/lint-imports || { echo "an import contract is broken: failing" >&2; exit 1; }
.venv/bin/mypy || { echo "the type checker found problems: failing" >&2; exit 1; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ "$fast" -eq 1 ]; then
  # The tier is only as good as its markers: a marker pytest does not know must fail, not select nothing.
  grep -Eq '^addopts = .*--strict-markers' pyproject.toml \
    || { echo "pyproject.toml's pytest addopts lack --strict-markers: failing" >&2; exit 1; }
  export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-fast}"
  .venv/bin/python -m pytest -q -m "$FAST_TIER" "$@"
else
  export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
  .venv/bin/python -m pytest -q --durations=25 "$@"
fi
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$status"
