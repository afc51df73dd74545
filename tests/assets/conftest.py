"""Fixtures for the Dagster layer: the shipped definitions on a temporary store and instance.

``lightfoot`` is a harness around an ephemeral Dagster instance and the definitions that
``assets.definitions`` loads, with the resources pointed at temporary paths, the hashing embedder
and replayed extractions. ``tick(name)`` evaluates a sensor the way the daemon does — cursor kept,
dynamic-partition requests and asset events applied to the instance —, ``schedule_tick(name, at)``
evaluates a schedule at a scheduled time, ``run(request)`` executes a requested run in process, and
``launch(tick)`` starts a tick's runs as the daemon does (a run key used before is dropped).

Every sensor and schedule context is closed once its tick is evaluated: a context left open keeps
the instance it entered as Dagster's current one, and the next test's definitions would load
against that instance once it is disposed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pytest

from lightfoot_pipeline.ingest.dataset import CORPUS_FILE, EXTRACTIONS_FILE

HASHING = "hashing:32"


def write_dataset(folder: Path, documents, records: dict[str, dict]) -> Path:
    """A dataset directory (corpus.jsonl and extractions.jsonl), written under a hidden name and
    then renamed, the way a drop should arrive in an inbox."""
    hidden = folder.with_name("." + folder.name)
    hidden.mkdir(parents=True)
    with (hidden / CORPUS_FILE).open("w", encoding="utf-8") as corpus:
        for d in documents:
            row = {"doc_id": d.doc_id, "title": d.title, "text": d.text}
            if d.retention_until:
                row["retention_until"] = d.retention_until.isoformat()
            corpus.write(json.dumps(row) + "\n")
    with (hidden / EXTRACTIONS_FILE).open("w", encoding="utf-8") as out:
        for d in documents:
            if d.doc_id in records:
                out.write(json.dumps(records[d.doc_id]) + "\n")
    hidden.rename(folder)
    return folder


@dataclass
class Harness:
    root: Path
    instance: dg.DagsterInstance
    defs: dg.Definitions
    resources: dict
    cursors: dict[str, str | None] = field(default_factory=dict)
    storage: str = "sqlite"  # where the instance keeps its runs and pools: "sqlite" or "postgres"

    @property
    def store_uri(self) -> str:
        return str(self.root / "store")

    @property
    def document_inbox(self) -> Path:
        return self.root / "inbox" / "documents"

    @property
    def erasure_inbox(self) -> Path:
        return self.root / "inbox" / "erasure"

    def store(self):
        from lightfoot_pipeline.store.store import Store

        return Store(self.store_uri)

    def drop_documents(self, name: str, documents, records) -> Path:
        self.document_inbox.mkdir(parents=True, exist_ok=True)
        return write_dataset(self.document_inbox / name, documents, records)

    def drop_erasure_request(self, name: str, doc_ids: list[str], erase: bool = True, reason: str = "") -> Path:
        self.erasure_inbox.mkdir(parents=True, exist_ok=True)
        path = self.erasure_inbox / name
        payload = {"doc_ids": doc_ids, "erase": erase, **({"reason": reason} if reason else {})}
        path.write_text(json.dumps(payload), encoding="utf-8")
        return path

    def partitions(self, name: str = "batches") -> list[str]:
        """The instance's batches (the partitions of ``batches``)."""
        return self.instance.get_dynamic_partitions(name)

    def stored_ids(self) -> list[str]:
        """The documents the store holds, sorted."""
        return sorted(self.store().read("documents").get_column("doc_id").to_list())

    def ingest_through_the_inbox(self, documents, records) -> None:
        """Drop documents in the inbox and run what the sensor asks for (each run must succeed)."""
        self.drop_documents(f"drop-{len(self.partitions())}", documents, records)
        for request in self.tick("inbox_sensor").run_requests:
            assert self.run(request).success

    def tick(self, sensor_name: str):
        """Evaluate a sensor like the daemon: with its cursor, applying what it asks of the instance."""
        sensor = self.defs.resolve_sensor_def(sensor_name)
        with dg.build_sensor_context(
            instance=self.instance, cursor=self.cursors.get(sensor_name), definitions=self.defs,
            sensor_name=sensor_name, resources=self.resources, instance_ref=self.instance.get_ref(),
        ) as context:
            data = sensor.evaluate_tick(context)
        self.cursors[sensor_name] = data.cursor
        for request in data.dynamic_partitions_requests or []:
            if isinstance(request, dg.AddDynamicPartitionsRequest):
                self.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
            else:
                for key in request.partition_keys:
                    self.instance.delete_dynamic_partition(request.partitions_def_name, key)
        for event in data.asset_events or []:
            self.instance.report_runless_asset_event(event)
        return data

    def schedule_tick(self, schedule_name: str, at: dt.datetime, resources: dict | None = None) -> list[dg.RunRequest]:
        """Evaluate a schedule at a scheduled time (the instance must be on disk), with the harness's
        resources or others; the runs it asks for."""
        schedule = self.defs.resolve_schedule_def(schedule_name)
        with dg.build_schedule_context(
            instance=self.instance, resources=resources or self.resources, scheduled_execution_time=at,
            repository_def=self.defs.get_repository_def(),  # a partitioned job's run request resolves through it
        ) as context:
            return list(schedule.evaluate_tick(context).run_requests or [])

    def run(self, request: dg.RunRequest, job_name: str | None = None, run_config: dict | None = None):
        job = self.defs.resolve_job_def(request.job_name or job_name)
        return job.execute_in_process(
            instance=self.instance, tags=dict(request.tags), run_config=run_config or request.run_config or {},
            partition_key=request.partition_key, raise_on_error=False,
        )


    @staticmethod
    def checks_passed(result) -> bool:
        """Whether every check of a run passed, the comparison with a fresh rebuild aside where the
        harness turned it off (it then warns that it did not compare)."""
        return all(e.passed or (e.check_name == "matches_fresh_rebuild" and "turned off" in (e.description or ""))
                   for e in result.get_asset_check_evaluations())

    def launch(self, tick, sensor: str = "inbox_sensor", job_name: str | None = None) -> list:
        """Start a tick's requested runs the way the daemon does: a run key this sensor has used
        before is dropped as a duplicate (None in the result); each other run executes with the
        daemon's tags."""
        results = []
        for request in tick.run_requests:
            daemon_tags = {"dagster/run_key": request.run_key, "dagster/sensor_name": sensor}
            if self.instance.get_run_records(dg.RunsFilter(tags=daemon_tags)):
                results.append(None)
                continue
            tagged = dg.RunRequest(run_key=request.run_key, job_name=request.job_name, run_config=request.run_config,
                                   tags={**request.tags, **daemon_tags}, partition_key=request.partition_key)
            results.append(self.run(tagged, job_name))
        return results

@functools.lru_cache(maxsize=1)
def shipped_definitions() -> dg.Definitions:
    """What ``assets.definitions`` loads (loaded once per session)."""
    from assets.definitions import defs

    return defs()


def _harness(tmp_path, monkeypatch, instance: dg.DagsterInstance, storage: str = "sqlite", *,
             rebuild_check: bool = False) -> Harness:
    """The shipped definitions on a root of the test's own. The blocking comparison with a fresh
    rebuild is turned off (the store resource's ``compare_with_rebuild``: the check then warns that
    it did not compare) but in the tests of that check, which pass ``rebuild_check=True``: every
    other test would pay a rebuild per run for a comparison it does not look at."""
    from assets.resources import EmbedderResource, ExtractorResource, InboxResource, StoreResource

    for name in ("LIGHTFOOT_STORE", "LIGHTFOOT_INBOX", "LIGHTFOOT_ERASURE_INBOX", "LIGHTFOOT_RETENTION_POLICY",
                 "LIGHTFOOT_EMBEDDER", "LIGHTFOOT_EXTRACTOR"):
        monkeypatch.delenv(name, raising=False)
    resources = {
        "store": StoreResource(uri=str(tmp_path / "store"), compare_with_rebuild=rebuild_check),
        "embedder": EmbedderResource(model=HASHING),
        "extractor": ExtractorResource(mode="replay"),
        "inbox": InboxResource(
            documents=str(tmp_path / "inbox" / "documents"),
            erasure_requests=str(tmp_path / "inbox" / "erasure"),
        ),
    }
    loaded = shipped_definitions()
    resources.update({key: value for key, value in loaded.resources.items() if key not in resources})  # relink_outputs
    defs = dg.Definitions(
        assets=loaded.assets, asset_checks=loaded.asset_checks, jobs=loaded.jobs, sensors=loaded.sensors,
        schedules=loaded.schedules, resources=resources,
    )
    return Harness(tmp_path, instance, defs, resources, storage=storage)


@pytest.fixture(scope="session")
def shipped_defs() -> dg.Definitions:
    """The shipped definitions, loaded once per session (the harness uses the same)."""
    return shipped_definitions()


@pytest.fixture(scope="session")
def instance_template(tmp_path_factory) -> Path:
    """The home of a new instance, its storage created (SQLite files and their schema), once per
    session: a harness's instance starts from a copy, in about 0.1 s against 0.7 s to create one."""
    home = tmp_path_factory.mktemp("instance-template") / "dagster_home"
    home.mkdir()
    dg.DagsterInstance.from_config(str(home)).dispose()
    return home


@contextlib.contextmanager
def _harness_in(root: Path, monkeypatch, *, rebuild_check: bool = False, home_exists: bool = False,
                template: Path | None = None):
    """The harness on ``root`` with an instance of its own on disk under ``root/dagster_home`` (a
    sensor resolves the partition of the runs it asks for through the instance's ref, and a
    schedule's context needs one, which an in-memory instance lacks), disposed of on leaving.
    ``home_exists``: the root is a copy that already holds an instance's storage; otherwise the
    instance starts as a copy of ``template`` (``instance_template``), or is created."""
    home = root / "dagster_home"
    if home_exists:
        home.mkdir(parents=True, exist_ok=True)
    elif template is not None:
        shutil.copytree(template, home)
    else:
        home.mkdir(parents=True)
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        yield _harness(root, monkeypatch, instance, rebuild_check=rebuild_check)
    finally:
        instance.dispose()


@pytest.fixture(scope="session")
def harness_in(instance_template):
    """``with harness_in(root, monkeypatch, rebuild_check=False, home_exists=False) as harness``: the
    harness on a root and instance of the test's own (for a module that builds one state once and
    copies it for each test)."""
    return functools.partial(_harness_in, template=instance_template)


@pytest.fixture
def lightfoot(tmp_path, monkeypatch, instance_template):
    """The harness on a temporary root and instance, without the comparison with a fresh rebuild."""
    with _harness_in(tmp_path, monkeypatch, template=instance_template) as harness:
        yield harness


@pytest.fixture
def lightfoot_checked(tmp_path, monkeypatch, instance_template):
    """The harness with the comparison with a fresh rebuild turned on: for the tests of that check
    and of the automation that a blocking check holds back."""
    with _harness_in(tmp_path, monkeypatch, rebuild_check=True, template=instance_template) as harness:
        yield harness


@pytest.fixture(scope="session")
def postgres():
    """The tests' own PostgreSQL server (postgres_server.py): its ``DAGSTER_PG_*`` settings. A test
    that needs it is skipped, saying why, where none can be started."""
    from tests.assets.postgres_server import NoServer, postgres_server

    with contextlib.ExitStack() as stack:
        try:
            settings = stack.enter_context(postgres_server())
        except NoServer as reason:
            pytest.skip(str(reason))
        yield settings


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def lightfoot_pooled(request, tmp_path, monkeypatch):
    """The harness on a temporary instance configured by a shipped instance file, so that runs
    executing at once share its concurrency pools as they do under the daemon: ``dagster.yaml``
    (SQLite files under the instance's home), or ``dagster.postgres.yaml`` on a database of its own
    on the tests' PostgreSQL server. ``harness.storage`` says which."""
    import secrets

    home = tmp_path / "dagster_home"
    home.mkdir()
    instance_file = "dagster.yaml"
    if request.param == "postgres":
        from tests.assets.postgres_server import new_database

        instance_file = "dagster.postgres.yaml"
        server = request.getfixturevalue("postgres")
        for name, value in new_database(server, f"pooled_{secrets.token_hex(4)}").items():
            monkeypatch.setenv(name, value)
    shutil.copy(Path(__file__).resolve().parents[2] / instance_file, home / "dagster.yaml")
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        # Its one test checks how the rebuild comparison of runs executing at once leaves the store to one of them.
        yield _harness(tmp_path, monkeypatch, instance, storage=request.param, rebuild_check=True)
    finally:
        instance.dispose()


@pytest.fixture(scope="session")
def twenty(sample_documents):
    """The first 20 documents of the bundled sample."""
    return sample_documents[:20]
