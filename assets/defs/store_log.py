"""The store log observed: every store write is in the lineage, whoever made it.

``store_log`` is the external asset that stands for the store's log (one row per commit). The
graph assets and the serving snapshot depend on it, so when a report of it carries a new data
version they show as stale (Dagster's data-version staleness) and their eager automation
conditions (automation.py) bring them up to date. Its data version is the digest of the *version
commit*: the newest commit the Dagster lineage does not account for, an external one or a Dagster
commit no serving snapshot reflects once its run ended (lightfoot_pipeline/provenance/store_log.py
judges the log; commits are Dagster's when made inside ``dagster_batch``, assets/batches.py). With
no such commit the data version is Dagster's initial one, which is what a source never reported
has: what was materialized before the first report stays fresh.

The ``store_log_sensor`` looks every 30 s, without a run, and skips at once while the
log's Delta version is its cursor's and no pending run has ended. It reports whenever the data
version moves, as a runless materialization of ``store_log``
(``SensorResult(asset_events=[AssetMaterialization])``); never for a store only Dagster wrote,
whose version stays the initial one (a first report would set automation off on a fresh instance).
Without a cursor (a new or renamed sensor, a reset one) it goes on from the instance's latest
report, so it reports nothing that did not move.
Dagster's staleness reads an external asset's data version from its materializations (an
observation counts only for an asset with an observation function, and the decorators that make
one are beta in this Dagster), and its automation takes each new one for an update: a report that
moved nothing would set automation off for nothing, so there is none.

A report holds ids, counts and times, never content (assets/provenance.py): the newest commit
(``store_commit``), the newest external one (``external_commit``), how many external commits since
the previous report (``external_commits``) and each of them (seq, operation, batch, run id, by,
committed_at; the newest 100, the rest counted), the commit its data version digests
(``version_commit``), the one the serving snapshot reflects (``snapshot_commit``) and the runs whose
commits wait (``pending_runs``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import dagster as dg
import polars as pl

from assets.keys import OWNERS, SERVING_SNAPSHOT, SOURCES_GROUP, STORE_LOG
from assets.resources import StoreResource
from lightfoot_pipeline.provenance.batches import COMMIT_SCHEMA
from lightfoot_pipeline.provenance.store_log import LogState, read_store_log
from lightfoot_pipeline.store.log import LOG_SCHEMA
from lightfoot_pipeline.store.store import Store

OBSERVE_SECONDS = 30
LISTED = 100  # external commits listed in one report; the rest are counted
INITIAL = dg.DataVersion("INITIAL")  # the data version Dagster gives a source never observed


def last_state(instance: dg.DagsterInstance) -> LogState | None:
    """What the latest report of the store log recorded (None before the first)."""
    event = instance.get_latest_materialization_event(STORE_LOG)
    report = event.asset_materialization if event is not None else None
    if report is None:
        return None
    return LogState.of({key: value.value for key, value in report.metadata.items()})


def snapshot_commit(instance: dg.DagsterInstance) -> int:
    """The store commit the latest serving snapshot reflects (0 before the first)."""
    event = instance.get_latest_materialization_event(SERVING_SNAPSHOT)
    materialization = event.asset_materialization if event is not None else None
    value = materialization.metadata.get("store_commit") if materialization is not None else None
    return value.value if value is not None and isinstance(value.value, int) else 0


def run_ended(instance: dg.DagsterInstance, run_id: str) -> bool:
    """Whether a run is over (a run the instance does not know, or none, counts as over)."""
    run = instance.get_run_by_id(run_id) if run_id else None
    return run is None or run.is_finished


@dataclass(frozen=True)
class Observation:
    """One look at the store log: the state it leaves, and what it saw since the previous one."""

    state: LogState
    data_version: dg.DataVersion
    previous_version: dg.DataVersion
    external: pl.DataFrame  # the external commits since the previous look, oldest first (store_commits' columns)
    snapshot_commit: int

    def metadata(self) -> dict[str, dg.MetadataValue]:
        md = dg.MetadataValue
        listed = self.external.tail(LISTED).select(list(COMMIT_SCHEMA))
        records = [dg.TableRecord({**row, "committed_at": row["committed_at"].isoformat()})
                   for row in listed.iter_rows(named=True)]
        schema = dg.TableSchema(columns=[dg.TableColumn(name, "int" if name == "seq" else "string")
                                         for name in COMMIT_SCHEMA])
        return {
            "store_commit": md.int(self.state.store_commit),
            "external_commit": md.int(self.state.external_commit),
            "external_commits": md.int(self.external.height),
            "external_commit_log": md.table(records, schema=schema),
            "external_commits_not_listed": md.int(self.external.height - listed.height),
            "version_commit": md.int(self.state.version_commit),
            "snapshot_commit": md.int(self.snapshot_commit),
            "pending_runs": md.json(dict(sorted(self.state.pending_runs.items()))),
        }

    def event(self) -> dg.AssetMaterialization:
        """The report: a runless materialization of the external asset, with the data version."""
        return dg.AssetMaterialization(asset_key=STORE_LOG, metadata=self.metadata(),
                                       tags={"dagster/data_version": self.data_version.value})


def observe_store_log(store: Store, instance: dg.DagsterInstance, previous: LogState) -> Observation:
    """Read the store log and judge its commits since ``previous`` (provenance/store_log.py), with
    what the instance knows: the serving snapshot's commit and which runs have ended."""
    reading = read_store_log(store, previous, snapshot_commit(instance), lambda run_id: run_ended(instance, run_id))
    return Observation(reading.state, _data_version(reading.version), _data_version(reading.previous_version),
                       reading.external, reading.snapshot_commit)


def _data_version(digest: str | None) -> dg.DataVersion:
    """A version commit's digest as a data version; the initial version for none."""
    return INITIAL if digest is None else dg.DataVersion(digest)


store_log = dg.AssetSpec(
    STORE_LOG, group_name=SOURCES_GROUP, owners=OWNERS, kinds={"deltalake"},
    metadata={"dagster/table_name": "lightfoot._lightfoot.store_log", "dagster/column_schema": dg.TableSchema(
        columns=[dg.TableColumn(f.name, str(f.type)) for f in LOG_SCHEMA])},
    description="The store's log, one row per commit: what the graph and the serving snapshot are computed from. "
    "Its data version moves with each commit Dagster did not make (the command line's, a library call's) and "
    "with each Dagster commit no serving snapshot reflects once its run ended; the store_log_sensor "
    f"looks every {OBSERVE_SECONDS} s and reports it when it moves.",
)


@dg.sensor(
    minimum_interval_seconds=OBSERVE_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=f"Observes the store log every {OBSERVE_SECONDS} s without a run: a commit made outside Dagster "
    "(the command line), or one no serving snapshot reflects, makes the graph and the snapshot stale, and "
    "automation brings them up to date. Skips while the log's version is its cursor's.",
)
def store_log_sensor(context: dg.SensorEvaluationContext, store: StoreResource) -> dg.SensorResult:
    lightfoot = store.open()
    cursor = json.loads(context.cursor) if context.cursor else {}
    version = lightfoot.log_version()  # read first: a commit after it is seen by the next tick
    waiting = cursor.get("pending_runs") or {}
    if cursor and version == cursor.get("log_version") and not any(run_ended(context.instance, r) for r in waiting):
        return dg.SensorResult(skip_reason=dg.SkipReason(f"no store commit since log version {version}"),
                               cursor=context.cursor)
    previous = LogState.of(cursor) if cursor else last_state(context.instance)
    observation = observe_store_log(lightfoot, context.instance, previous or LogState())
    next_cursor = json.dumps({"log_version": version, **observation.state.as_cursor()})
    # Before any report the version is Dagster's initial one: a first report that moved nothing
    # would still count as an update, and automation would start a graph run on a fresh instance.
    if observation.data_version == observation.previous_version:
        return dg.SensorResult(skip_reason=dg.SkipReason(
            f"store commit {observation.state.store_commit}: every commit is accounted for"), cursor=next_cursor)
    return dg.SensorResult(asset_events=[observation.event()], cursor=next_cursor)
