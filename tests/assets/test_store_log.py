"""The store log observed: a write made outside Dagster makes the graph and the serving snapshot
stale in Dagster's own staleness (the resolver behind the UI's and GraphQL's ``staleStatus``),
automation brings them up to date, and Dagster's own writes leave them fresh."""

from __future__ import annotations

import datetime as dt
import shutil

import dagster as dg
import polars as pl
import pytest

# Dagster answers "is this asset stale?" only through GraphQL's staleStatus (the UI's) and the
# resolver behind it (dagster/_core/workspace/context.py: stale_status_loader); the resolver, here.
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus  # noqa: TID251
from dagster._core.loader import LoadingContextForTest  # noqa: TID251

from assets.defs.store_log import INITIAL, LISTED, LogState, Observation
from assets.keys import GRAPH_ASSETS, SERVING_SNAPSHOT, STORE_LOG
from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.provenance.batches import COMMIT_SCHEMA, store_commits
from lightfoot_pipeline.store.batches import DAGSTER, Batch, writing_batch

pytestmark = [pytest.mark.dagster]

WATCHED = (*GRAPH_ASSETS, SERVING_SNAPSHOT)


def statuses(harness) -> dict[str, StaleStatus]:
    """What Dagster says of the graph assets and the snapshot now."""
    resolver = CachingStaleStatusResolver(harness.instance, harness.defs.resolve_asset_graph(),
                                          LoadingContextForTest(harness.instance))
    return {key.to_user_string(): resolver.get_status(key) for key in WATCHED}


def stale_causes(harness, key: dg.AssetKey) -> list[str]:
    resolver = CachingStaleStatusResolver(harness.instance, harness.defs.resolve_asset_graph(),
                                          LoadingContextForTest(harness.instance))
    return [f"{c.reason} ({c.dependency.asset_key.to_user_string() if c.dependency else ''})"
            for c in resolver.get_stale_causes(key)]


def snapshot_metadata(harness) -> dict:
    event = harness.instance.get_latest_materialization_event(SERVING_SNAPSHOT)
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


class Automation:
    """The automation sensor's evaluations, tick after tick (its cursor kept), and the run of what
    they request."""

    def __init__(self, harness) -> None:
        self.harness, self.cursor = harness, None

    def tick(self) -> list[dg.AssetKey]:
        """The assets one evaluation requests."""
        result = dg.evaluate_automation_conditions(defs=self.harness.defs, instance=self.harness.instance,
                                                   cursor=self.cursor)
        self.cursor = result.cursor
        return sorted(key for key in WATCHED if result.get_requested_partitions(key))

    def run(self, keys: list[dg.AssetKey]) -> set[str]:
        """Materialize the requested assets in one run (their checks with them); what it materialized."""
        job = self.harness.defs.resolve_implicit_global_asset_job_def()
        result = job.execute_in_process(instance=self.harness.instance, asset_selection=keys, raise_on_error=False)
        assert result.success
        return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}


@pytest.fixture(scope="module")
def observed_once(tmp_path_factory, harness_in, sample_documents, sample_records):
    """Four documents ingested through Dagster and the store log observed, once per module: the
    harness's root (store, inboxes, an instance on disk under dagster_home/) and its sensor cursors."""
    root = tmp_path_factory.mktemp("store-log") / "root"
    with pytest.MonkeyPatch.context() as monkeypatch, harness_in(root, monkeypatch, rebuild_check=True) as harness:
        harness.ingest_through_the_inbox(sample_documents[:4], sample_records)
        tick = harness.tick("store_log_sensor")
        assert tick.asset_events == [], "Dagster's own commits, reflected by its snapshot: nothing to report"
        return root, dict(harness.cursors)


@pytest.fixture
def observed(observed_once, harness_in, tmp_path, monkeypatch):
    """The harness on a copy of the module's root, with its own instance, and the automation
    sensor's first evaluation done (it only sets the cursor)."""
    template, cursors = observed_once
    root = tmp_path / "root"
    shutil.copytree(template, root)
    with harness_in(root, monkeypatch, rebuild_check=True, home_exists=True) as harness:
        harness.cursors.update(cursors)
        automation = Automation(harness)
        assert automation.tick() == []
        yield harness, automation


def test_a_command_line_write_makes_the_graph_and_snapshot_stale_until_automation_catches_up(
        observed, sample_documents, sample_records):
    harness, automation = observed
    assert harness.instance.get_latest_materialization_event(STORE_LOG) is None, \
        "Dagster's own commits leave the data version the initial one: never reported"
    assert set(statuses(harness).values()) == {StaleStatus.FRESH}
    assert automation.tick() == []

    # A write from outside Dagster: two more documents ingested by a library call (no batch, no runner).
    store = harness.store()
    ingested = operations.ingest(store, sample_documents[4:6], ReplayExtractor(sample_records),
                                 HashingEmbedder(dim=32))
    assert snapshot_metadata(harness)["store_commit"] < ingested.seq
    assert set(statuses(harness).values()) == {StaleStatus.FRESH}, "not before the observation"

    [report] = harness.tick("store_log_sensor").asset_events
    metadata = {k: v.value for k, v in report.metadata.items()}
    assert metadata["store_commit"] == metadata["external_commit"] == metadata["version_commit"] == ingested.seq
    assert metadata["external_commits"] == 1 and metadata["external_commits_not_listed"] == 0
    [row] = [r.data for r in metadata["external_commit_log"].records]
    assert row["seq"] == ingested.seq and row["operation"] == "ingest" and row["by"] == ""
    assert report.tags["dagster/data_version"] != INITIAL.value
    stale = statuses(harness)
    assert set(stale.values()) == {StaleStatus.STALE}, stale
    assert any("store_log" in cause for cause in stale_causes(harness, SERVING_SNAPSHOT))

    # Automation asks for the graph and the snapshot, and the snapshot then holds the store's newest commit.
    requests = automation.tick()
    assert requests, "automation brings the stale assets up to date"
    materialized = automation.run(requests)
    assert {k.to_user_string() for k in WATCHED} <= materialized
    newest = store_commits(store).get_column("seq").max()
    assert snapshot_metadata(harness)["store_commit"] == newest
    assert set(statuses(harness).values()) == {StaleStatus.FRESH}
    assert harness.tick("store_log_sensor").asset_events == [], "nothing new: the observation skips"
    assert set(statuses(harness).values()) == {StaleStatus.FRESH}
    assert automation.tick() == []


def test_on_a_fresh_instance_the_first_drop_starts_no_automation_run(lightfoot_checked, twenty, sample_records):
    """Issue 35: a first report of the store log, which moved nothing, counted as an update, and
    automation started a graph run on the empty store beside the first drop's ingestion run (which
    then waited for the store pool and warned five times that it did not compare)."""
    lightfoot = lightfoot_checked
    automation = Automation(lightfoot)
    assert lightfoot.tick("store_log_sensor").asset_events == []
    assert automation.tick() == []
    lightfoot.drop_documents("first", twenty[:2], sample_records)
    (request,) = lightfoot.tick("inbox_sensor").run_requests
    assert lightfoot.tick("store_log_sensor").asset_events == []
    assert automation.tick() == [], "the ingestion run brings the graph up to date itself"
    assert lightfoot.run(request).success
    assert lightfoot.tick("store_log_sensor").asset_events == []
    assert automation.tick() == []


def test_the_sensor_without_a_cursor_goes_on_from_the_latest_report(observed, sample_documents, sample_records):
    """A new or renamed sensor, or a reset cursor: the instance's latest report is where it goes on
    from, so a look that moved nothing reports nothing and automation asks for no run."""
    harness, automation = observed
    harness.cursors["store_log_sensor"] = None
    tick = harness.tick("store_log_sensor")
    assert tick.asset_events == [] and "accounted for" in tick.skip_message
    assert set(statuses(harness).values()) == {StaleStatus.FRESH}
    assert automation.tick() == []

    store = harness.store()
    ingested = operations.ingest(store, sample_documents[4:6], ReplayExtractor(sample_records),
                                 HashingEmbedder(dim=32))
    harness.cursors["store_log_sensor"] = None
    [report] = harness.tick("store_log_sensor").asset_events
    metadata = {k: v.value for k, v in report.metadata.items()}
    assert metadata["external_commits"] == 1 and metadata["version_commit"] == ingested.seq
    assert set(statuses(harness).values()) == {StaleStatus.STALE}


def test_dagster_commits_the_snapshot_reflects_leave_everything_fresh(observed, sample_documents, sample_records):
    harness, automation = observed
    store = harness.store()
    # A run's own commit (the documents of a batch, the graph left to the graph stage) waits while
    # the run is in progress, and once the snapshot exported after it reflects it, nothing is stale.
    run = running(harness)
    with writing_batch(Batch("drop-test", run.run_id, DAGSTER)):
        operations.ingest(store, sample_documents[4:6], ReplayExtractor(sample_records), None, link=False)
    tick = harness.tick("store_log_sensor")
    assert tick.asset_events == [] and "accounted for" in tick.skip_message
    assert set(statuses(harness).values()) == {StaleStatus.FRESH}
    assert harness.tick("store_log_sensor").skip_message.startswith("no store commit since")
    assert automation.run([*GRAPH_ASSETS, SERVING_SNAPSHOT]) >= {k.to_user_string() for k in WATCHED}
    harness.instance.report_run_failed(run)
    tick = harness.tick("store_log_sensor")  # the run ended: its commit is judged now
    assert tick.asset_events == [], "the snapshot reflects it"
    assert snapshot_metadata(harness)["store_commit"] == store.manifest().seq
    assert set(statuses(harness).values()) == {StaleStatus.FRESH}
    assert automation.tick() == []


def test_a_dagster_commit_no_snapshot_reflects_makes_the_snapshot_stale_once_its_run_ended(observed):
    harness, automation = observed
    store = harness.store()
    run = running(harness)
    deleted = harness.stored_ids()[0]
    with writing_batch(Batch("deletion-test", run.run_id, DAGSTER)):  # a run that stops before its export
        operations.delete(store, [deleted], reason="a test")
    assert harness.tick("store_log_sensor").asset_events == [], "not while its run is in progress"
    harness.instance.report_run_failed(run)
    [report] = harness.tick("store_log_sensor").asset_events
    metadata = {k: v.value for k, v in report.metadata.items()}
    assert metadata["external_commits"] == 0 and metadata["version_commit"] == store.manifest().seq
    assert metadata["snapshot_commit"] < store.manifest().seq
    stale = statuses(harness)
    assert stale[SERVING_SNAPSHOT.to_user_string()] == StaleStatus.STALE, stale
    automation.run(automation.tick())
    assert snapshot_metadata(harness)["store_commit"] == store.manifest().seq
    assert set(statuses(harness).values()) == {StaleStatus.FRESH}
    assert harness.tick("store_log_sensor").asset_events == []
    assert automation.tick() == []

    # A Dagster commit that changes nothing a snapshot is exported from (an erasure's mark on the
    # tombstones) leaves the snapshot as true as it was: fresh, and no run asked for.
    run = running(harness)
    with writing_batch(Batch("erasure-test", run.run_id, DAGSTER)):
        operations.erase_history(store, [deleted])
    harness.instance.report_run_failed(run)
    assert snapshot_metadata(harness)["store_commit"] < store.manifest().seq
    assert harness.tick("store_log_sensor").asset_events == []
    assert set(statuses(harness).values()) == {StaleStatus.FRESH}
    assert automation.tick() == []


def running(harness) -> dg.DagsterRun:
    """A run the instance holds as in progress (a Dagster run whose steps commit to the store)."""
    job = harness.defs.resolve_implicit_global_asset_job_def()
    return harness.instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED,
                                               asset_selection={SERVING_SNAPSHOT})


def test_a_report_lists_the_newest_hundred_external_commits_and_counts_the_rest():
    external = pl.DataFrame({"seq": range(1, LISTED + 4), "operation": "ingest", "batch": "", "run_id": "", "by": "cli",
                             "committed_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)}, schema=COMMIT_SCHEMA)
    state = LogState(store_commit=LISTED + 3, external_commit=LISTED + 3, version_commit=LISTED + 3)
    report = Observation(state, dg.DataVersion("v"), INITIAL, external, snapshot_commit=0).event()
    metadata = {k: v.value for k, v in report.metadata.items()}
    assert metadata["external_commits"] == LISTED + 3 and metadata["external_commits_not_listed"] == 3
    rows = [r.data for r in metadata["external_commit_log"].records]
    assert [r["seq"] for r in rows] == list(range(4, LISTED + 4))
    assert set(rows[0]) == {"seq", "operation", "batch", "run_id", "by", "committed_at"}  # ids and times only
    assert report.tags["dagster/data_version"] == "v"
