#!/usr/bin/env bash
# Start Dagster on this checkout (webserver on http://127.0.0.1:3000 and the daemon that runs the
# sensors, schedules and automation) with `dg dev`, the dg command line's dev server (dagster-dg-cli,
# installed with the project); it loads the project that pyproject.toml's [tool.dg] names. Arguments
# go to `dg dev` (e.g. -p 3001).
# Instance storage: SQLite under $DAGSTER_HOME (default .dagster_home/), or PostgreSQL with
# dagster.postgres.yaml when DAGSTER_PG_HOST is set.
set -euo pipefail
cd "$(dirname "$0")/.."
export DAGSTER_HOME="${DAGSTER_HOME:-$PWD/.dagster_home}"
mkdir -p "$DAGSTER_HOME"
if [ -n "${DAGSTER_PG_HOST:-}" ]; then
  cp dagster.postgres.yaml "$DAGSTER_HOME/dagster.yaml"
else
  cp dagster.yaml "$DAGSTER_HOME/dagster.yaml"
fi
mkdir -p .lightfoot/inbox/documents .lightfoot/inbox/erasure
# dg compares the active virtual environment with the project's: this script runs the project's.
export VIRTUAL_ENV="$PWD/.venv"
exec .venv/bin/dg dev "$@"
