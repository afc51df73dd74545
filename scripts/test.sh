#!/usr/bin/env bash
# Set up (if needed), check the architecture, and run the tests. The linter (ruff) and the import
# contracts (import-linter: layers, no cycles, an engine free of Dagster, a Dagster layer that opens no
# store transaction) run first; the type checker (mypy over the engine's lower layers, its cache kept
# in .mypy_cache between runs) runs beside pytest. All three are configured in pyproject.toml, and any
# failing fails the run. pytest's exit code 5 (no tests collected) counts as a failure here: a suite
# that runs nothing has not passed.
#
#   ./scripts/test.sh            the whole suite (what CI runs, via .ci/run)
#   ./scripts/test.sh --fast     the fast tier: no test marked slow, minilm, dagster, postgres or s3,
#                                few Hypothesis examples, and setup only where .venv is missing
#
# Both list their 25 slowest tests and end with the run's wall time. Further arguments go to pytest.
# HYPOTHESIS_PROFILE (tests/conftest.py) chooses how many examples the property tests draw: "ci" for
# the whole suite, "fast" for the fast tier, unless it is set. LIGHTFOOT_TEST_WORKERS sets how many
# pytest-xdist workers run the tests (default: TEST_WORKERS below; 0 runs them in this process).
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
FAST_TIER="not slow and not minilm and not dagster and not postgres and not s3"
TEST_WORKERS=2
fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
# Bytecode is written on import and kept (__pycache__; the project's are git-ignored), where an
# environment says not to write it: each worker, command-line subprocess and Dagster step process
# would compile the project and the tests again (collecting the suite: 24 s against 10 s here). So
# the installed packages need not be compiled at setup either: the tests compile those they import.
unset PYTHONDONTWRITEBYTECODE
# The fast tier sets up only a missing .venv (./scripts/setup.sh brings an existing one up to date).
if [ "$fast" -eq 0 ] || [ ! -x .venv/bin/python ]; then
  ./scripts/setup.sh --bytecode-on-import || exit 1
fi
.venv/bin/ruff check . || { echo "ruff found problems: failing" >&2; exit 1; }
.venv/bin/lint-imports || { echo "an import contract is broken: failing" >&2; exit 1; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Each run's temporary folders (the stores the tests build: about 2.3 GB in tens of thousands of small
# files) go in a folder of its own. They go on a tmpfs where /dev/shm is one with room for them and
# memory to spare (LIGHTFOOT_TEST_TMP names another parent folder): the Dagster tests commit to
# SQLite and Delta stores thousands of times, and on a disk each commit waits for it (some of them
# alone took 0.75x the time on the tmpfs here; the whole suite's tests 0.96x, since the other worker
# had used most of those waits). Elsewhere they go under TMPDIR. Only pytest's own
# folders move: TMPDIR is left as it is, so a subprocess running as another account (the
# PostgreSQL server) still has a folder it may enter.
room_for_tests() {  # whether a folder is a tmpfs with 6 GiB free and 12 GiB of memory available
  local room memory
  [ -d "$1" ] && [ -w "$1" ] && [ "$(stat -f -c %T "$1" 2> /dev/null)" = tmpfs ] || return 1
  room=$(df -Pk "$1" 2> /dev/null | awk 'NR == 2 {print $4}')
  memory=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2> /dev/null)
  [ "${room:-0}" -ge $((6 * 1024 * 1024)) ] && [ "${memory:-0}" -ge $((12 * 1024 * 1024)) ]
}
if [ -n "${LIGHTFOOT_TEST_TMP:-}" ]; then
  parent=$LIGHTFOOT_TEST_TMP
elif room_for_tests /dev/shm; then
  parent=/dev/shm
else
  parent=${TMPDIR:-/tmp}
fi
in_memory=$(room_for_tests "$parent" && echo 1 || echo 0)
# A folder on a tmpfs holds memory: a passing run removes its own at exit (seconds there), a failing
# one keeps it for a look until the next run. On a disk every run's is kept until the next run, which
# removes it in the background, at low priority: removing it is mostly waiting on the disk (tens of
# seconds where it is mounted with discard), which pytest's own clean-up at exit made every run wait for.
runs="$parent/lightfoot-tests-$(id -u)"
mkdir -p -m 700 "$runs"
if [ -L "$runs" ] || [ ! -O "$runs" ]; then
  echo "$runs is a link or not this user's: failing" >&2
  exit 1
fi
trash=$(mktemp -d "$runs/trash-XXXXXX")
for earlier in "$runs"/run-*; do  # run-<time>-<pid>: a run still going (its script alive) is left alone
  [ -d "$earlier" ] && ! kill -0 "${earlier##*-}" 2> /dev/null && mv "$earlier" "$trash/"
done
for folder in "$runs"/trash-*; do  # this run's, and any an earlier removal left unfinished
  [ -d "$folder" ] && (nice -n 19 rm -rf "$folder" > /dev/null 2>&1 &)
done
basetemp="$runs/run-$(date +%Y%m%dT%H%M%S)-$$"
# mypy runs beside the tests (its output comes after theirs); its result counts like theirs.
mypy_log=$(mktemp)
.venv/bin/mypy > "$mypy_log" 2>&1 &
mypy_pid=$!
workers="${LIGHTFOOT_TEST_WORKERS:-$TEST_WORKERS}"
parallel=()
if [ "$workers" -gt 0 ]; then
  parallel=(-n "$workers")
  # The workers share the cores: each gets its share for the thread pools of torch and BLAS (OpenMP)
  # and of polars, in its own process and in those it starts, unless the environment sets them. Each
  # library otherwise starts a thread per core in every worker, and the threads that wait spin on the
  # cores the other worker needs. MiniLM embedding beside a busy process, here: 123 s on one thread
  # against 149 s on two, and the busy process got 33% more done; the fast tier's tests took 131 s
  # against 155 s with two threads each (142 s with polars still on two).
  share=$(( $(nproc) / workers ))
  [ "$share" -ge 1 ] || share=1
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$share}" OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-$share}" \
    MKL_NUM_THREADS="${MKL_NUM_THREADS:-$share}" POLARS_MAX_THREADS="${POLARS_MAX_THREADS:-$share}"
fi
if [ "$fast" -eq 1 ]; then
  # The tier is only as good as its markers: a marker pytest does not know must fail, not select nothing.
  grep -Eq '^addopts = .*--strict-markers' pyproject.toml \
    || { echo "pyproject.toml's pytest addopts lack --strict-markers: failing" >&2; exit 1; }
  export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-fast}"
  .venv/bin/python -m pytest -q --durations=25 --basetemp "$basetemp" "${parallel[@]}" -m "$FAST_TIER" "$@"
else
  export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
  .venv/bin/python -m pytest -q --durations=25 --basetemp "$basetemp" "${parallel[@]}" "$@"
fi
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  status=1
fi
wait "$mypy_pid"
mypy_status=$?
cat "$mypy_log"
rm -f "$mypy_log"
if [ "$mypy_status" -ne 0 ]; then
  echo "the type checker found problems: failing" >&2
  [ "$status" -eq 0 ] && status=1
fi
if [ "$in_memory" -eq 1 ]; then
  if [ "$status" -eq 0 ]; then
    rm -rf "$basetemp"
  else
    echo "this run's temporary folders are kept in memory (a tmpfs) until the next run: $basetemp" >&2
  fi
fi
elapsed=$(( $(date +%s) - started ))
tier=$([ "$fast" -eq 1 ] && echo "the fast tier" || echo "the whole suite")
where=$([ "$in_memory" -eq 1 ] && echo "on a tmpfs" || echo "on disk")
printf '%s took %dm%02ds of wall time (setup, checks and tests; %s xdist workers; temporary folders %s under %s)\n' \
  "$tier" $((elapsed / 60)) $((elapsed % 60)) "$workers" "$where" "$parent"
exit "$status"
