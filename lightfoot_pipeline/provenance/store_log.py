"""The store log judged for an orchestrator: which commits its lineage does not account for.

The store's log (``lightfoot_pipeline/store/log.py``, one row per commit) is the source of truth
for what the store holds. A commit made by an orchestrated run records ``by: dagster`` in its log
details (store/batches.py); every other one is *external*: the command line's (``by: cli``), a
library call's, an older store's (no ``by``). The *version commit* is the newest commit that the
orchestrator's lineage does not account for:

- every external commit;
- an orchestrated commit that changed what a snapshot is exported from (a fingerprinted table)
  and that no serving snapshot reflects once the run that made it has ended: a run stopped
  between its commit and its export, a relink, a sensor's commit. While the run is in progress
  its commits wait (``pending_runs``): its own later steps export the snapshot, and its graph
  commit must not make its graph stale. A commit that wrote no such table (an erasure's mark on
  its tombstones, a vector model registered) leaves every snapshot of the commit before it as
  true as it was.

So after any write, by any path, the next reading leaves no snapshot fresh that is behind the
store. The version commit only moves forward: a commit counted once stays counted, and what was
brought up to date since stays fresh. Its digest (:func:`commit_digest`) is the data version the
orchestrator reports; with no such commit there is none.

The orchestrator supplies what only it knows: the commit the latest serving snapshot reflects,
and whether a run has ended. The assets' ``store_log_sensor`` (assets/defs/store_log.py) reads the
log with :func:`read_store_log` and reports what moved.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import polars as pl

from lightfoot_pipeline.provenance.batches import store_commits
from lightfoot_pipeline.store.batches import DAGSTER
from lightfoot_pipeline.store.store import Store

__all__ = ["LogReading", "LogState", "commit_digest", "read_store_log"]


@dataclass(frozen=True)
class LogState:
    """Where a reading left the store log: the next goes on from it (a sensor's cursor)."""

    store_commit: int = 0  # the newest commit seen
    external_commit: int = 0  # the newest commit not made by the orchestrator
    version_commit: int = 0  # the commit the data version is a digest of
    pending_runs: dict[str, int] = field(default_factory=dict)  # runs in progress: their newest commit

    @classmethod
    def of(cls, values: Mapping[str, object]) -> LogState:
        """The state a cursor or a report's metadata values hold (missing values: none seen)."""
        def number(key: str) -> int:
            value = values.get(key)
            return value if isinstance(value, int) else 0

        runs = values.get("pending_runs")
        return cls(number("store_commit"), number("external_commit"), number("version_commit"),
                   {str(k): int(v) for k, v in runs.items()} if isinstance(runs, dict) else {})

    def as_cursor(self) -> dict:
        """The state as plain JSON values."""
        return asdict(self)


@dataclass(frozen=True)
class LogReading:
    """One reading of the store log: the state it leaves, the version commit's digest before and
    after it (None for none), and the external commits it saw."""

    state: LogState
    version: str | None
    previous_version: str | None
    external: pl.DataFrame  # the external commits since the previous reading, oldest first (store_commits' columns)
    snapshot_commit: int  # the commit the latest serving snapshot reflects

    @property
    def moved(self) -> bool:
        """Whether the version commit moved, so the orchestrator has something to report."""
        return self.version != self.previous_version


def read_store_log(store: Store, previous: LogState, snapshot_commit: int,
                   run_ended: Callable[[str], bool]) -> LogReading:
    """Read the store log and judge its commits since ``previous`` (see the module docstring):
    ``snapshot_commit`` is the commit the latest serving snapshot reflects, ``run_ended`` says
    whether a run is over (a run the orchestrator does not know counts as over)."""
    log = store_commits(store)
    newest = int(log.get_column("seq").max() or 0)
    if newest < previous.store_commit:  # another store at the same place: start again
        previous = LogState()
    new = log.filter(pl.col("seq") > previous.store_commit)
    external = new.filter(pl.col("by") != DAGSTER)
    external_commit = max(previous.external_commit, int(external.get_column("seq").max() or 0))
    runs = dict(previous.pending_runs)
    orchestrated = new.filter((pl.col("by") == DAGSTER) & pl.col("content"))
    for run_id, seq in orchestrated.group_by("run_id").agg(pl.col("seq").max()).iter_rows():
        runs[run_id] = max(runs.get(run_id, 0), seq)
    version, pending = max(previous.version_commit, external_commit), {}
    for run_id, seq in sorted(runs.items()):
        if seq <= snapshot_commit:
            continue
        if run_ended(run_id):
            version = max(version, seq)
        else:
            pending[run_id] = seq
    state = LogState(newest, external_commit, version, pending)
    return LogReading(state, commit_digest(log, version), commit_digest(log, previous.version_commit), external,
                      snapshot_commit)


def commit_digest(log: pl.DataFrame, seq: int) -> str | None:
    """A digest of commit ``seq`` of the log (its number and time); None for none."""
    if seq == 0:
        return None
    at = log.filter(pl.col("seq") == seq).get_column("committed_at")
    stamp = at.item().isoformat() if at.len() == 1 and at.item() is not None else ""
    return hashlib.sha256(f"{seq}\x00{stamp}".encode()).hexdigest()[:16]
