#!/usr/bin/env bash
# Start Dagster on this checkout (webserver on http://127.0.0.1:3000 and the daemon that runs the
# sensors, schedules and automation) with `dg dev`, the dg command line's dev server (dagster-dg-cli,
# installed with the project), on workspace.yaml's code location. Arguments go to `dg dev` (e.g. -p 3001).
# Instance: $DAGSTER_HOME (default .dagster_home/), SQLite with dagster.yaml, or PostgreSQL with
# dagster.postgres.yaml when DAGSTER_PG_HOST is set, copied there from the top level.
# `dg dev` runs in $DAGSTER_HOME: Dagster warns when the folder it runs in holds a dagster.yaml that
# is not $DAGSTER_HOME's, as the top level does (and `dg dev` given no workspace runs in the
# project's folder). The paths Lightfoot takes relative to the folder it runs in (the store, the
# inboxes, the retention policy, the sync source) are made absolute against the checkout, as they were.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd -P)
export DAGSTER_HOME="${DAGSTER_HOME:-$repo/.dagster_home}"
mkdir -p "$DAGSTER_HOME"
DAGSTER_HOME=$(cd "$DAGSTER_HOME" && pwd -P)
if [ -n "${DAGSTER_PG_HOST:-}" ]; then
  cp dagster.postgres.yaml "$DAGSTER_HOME/dagster.yaml"
else
  cp dagster.yaml "$DAGSTER_HOME/dagster.yaml"
fi
mkdir -p .lightfoot/inbox/documents .lightfoot/inbox/erasure
: "${LIGHTFOOT_STORE:=.lightfoot/store}"
case "$LIGHTFOOT_STORE" in
  *://*) ;;  # a remote store keeps its inboxes under its root
  *) : "${LIGHTFOOT_INBOX:=.lightfoot/inbox/documents}" "${LIGHTFOOT_ERASURE_INBOX:=.lightfoot/inbox/erasure}" ;;
esac
for name in LIGHTFOOT_STORE LIGHTFOOT_INBOX LIGHTFOOT_ERASURE_INBOX LIGHTFOOT_RETENTION_POLICY LIGHTFOOT_SYNC_SOURCE; do
  value="${!name:-}"
  case "$value" in
    "" | /* | "~"* | *://*) ;;
    *) export "$name=$repo/$value" ;;
  esac
done
# workspace.yaml, its working directory this checkout's absolute path (Dagster takes a relative one
# from the folder it runs in).
sed "s|working_directory: \.\$|working_directory: $repo|" workspace.yaml > "$DAGSTER_HOME/workspace.yaml"
grep -q "working_directory: $repo\$" "$DAGSTER_HOME/workspace.yaml"
cd "$DAGSTER_HOME"
exec "$repo/.venv/bin/dg" dev --workspace "$DAGSTER_HOME/workspace.yaml" "$@"
