"""The pipeline's Dagster jobs on an instance stored in a real PostgreSQL server.

The instance is the deployment one: ``dagster.postgres.yaml`` as ``$DAGSTER_HOME/dagster.yaml``,
its credentials in the ``DAGSTER_PG_*`` environment variables only, on the tests' own PostgreSQL
server (the ``postgres`` fixture, postgres_server.py); the tests are skipped, saying why, only where
none can be started.

Documents arrive in the inbox; the sensor is evaluated against the PostgreSQL instance; the
ingestion run and then an erasure run execute in separate ``dagster job execute`` processes, as
run workers do in a deployment; this process then reads back from PostgreSQL what they wrote.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import CORPUS_FILE, EXTRACTIONS_FILE
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store
from tests.assets.postgres_server import new_database
from tests.assets.test_nothing_erasable_in_dagster import CANARY, canary_document, holders

pytestmark = [pytest.mark.dagster]

ROOT = Path(__file__).resolve().parents[2]
STORE_POOL = "lightfoot_store"


@pytest.fixture
def deployment(postgres, tmp_path, monkeypatch):
    """The environment of a deployment: a PostgreSQL instance of its own, and Lightfoot's settings."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.postgres.yaml", home / "dagster.yaml")
    env = {
        **new_database(postgres, f"deployment_{secrets.token_hex(4)}"),
        "DAGSTER_HOME": str(home),
        "LIGHTFOOT_STORE": str(tmp_path / "store"),
        "LIGHTFOOT_INBOX": str(tmp_path / "inbox" / "documents"),
        "LIGHTFOOT_ERASURE_INBOX": str(tmp_path / "inbox" / "erasure"),
        "LIGHTFOOT_EMBEDDER": "hashing:32",
        "LIGHTFOOT_EXTRACTOR": "replay",
    }
    for name in ("LIGHTFOOT_RETENTION_POLICY", "OPENAI_BASE_URL", "OPENAI_API_KEY", "LIGHTFOOT_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return tmp_path, {**os.environ, **env}


def drop(folder: Path, name: str, documents, records) -> None:
    """A dataset directory dropped in an inbox (written under a hidden name, then renamed)."""
    hidden = folder / f".{name}"
    hidden.mkdir(parents=True)
    with (hidden / CORPUS_FILE).open("w", encoding="utf-8") as corpus, \
            (hidden / EXTRACTIONS_FILE).open("w", encoding="utf-8") as extractions:
        for d in documents:
            corpus.write(json.dumps({"doc_id": d.doc_id, "title": d.title, "text": d.text}) + "\n")
            extractions.write(json.dumps(records[d.doc_id]) + "\n")
    hidden.rename(folder / name)


def tick(instance: dg.DagsterInstance, defs: dg.Definitions, sensor_name: str):
    """Evaluate a sensor as the daemon does, applying its partition requests to the instance."""
    with dg.build_sensor_context(instance=instance, definitions=defs, sensor_name=sensor_name,
                                 resources=dict(defs.resources or {}), instance_ref=instance.get_ref()) as context:
        data = defs.resolve_sensor_def(sensor_name).evaluate_tick(context)
    for request in data.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return data


def execute(env: dict, request: dg.RunRequest, job_name: str) -> None:
    """Run a requested job in its own process (a run worker), on the instance of the environment,
    on the request's partition (a batch or a deletion), as its run's tag."""
    tags = {**request.tags, **({"dagster/partition": request.partition_key} if request.partition_key else {})}
    done = subprocess.run(
        [sys.executable, "-m", "dagster", "job", "execute", "-m", "assets.definitions", "-j",
         request.job_name or job_name, "--tags", json.dumps(tags)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_dagster_loads_and_migrates_the_shipped_postgres_instance_file(deployment):
    """Dagster's own commands take dagster.postgres.yaml (its schema checked) to the server."""
    _, env = deployment
    for command in ("migrate", "info"):
        done = subprocess.run([sys.executable, "-m", "dagster", "instance", command],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "run_storage: PooledRunStorage" in done.stdout  # assets/pooled_postgres.py
    with dg.DagsterInstance.get() as instance:
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1


@pytest.mark.slow
def test_ingestion_and_erasure_runs_on_a_postgres_instance(deployment, sample_documents, sample_records):
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    from assets.definitions import defs as load_defs

    root, env = deployment
    memo, memo_record = canary_document("memo-7", "Oslo")  # the canary in title, text, names, a fact, a quote
    twelve = [*sample_documents[:11], memo]
    sample_records = {**sample_records, memo.doc_id: memo_record}
    ids = sorted(d.doc_id for d in twelve)
    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        defs = load_defs()

        drop(root / "inbox" / "documents", "batch-1", twelve, sample_records)
        ingest = tick(instance, defs, "inbox_sensor")
        assert len(ingest.run_requests) == 1
        batch = ingest.run_requests[0].partition_key
        assert instance.get_dynamic_partitions("batches") == [batch], "one partition for the drop's batch"

    execute(env, ingest.run_requests[0], "ingestion_job")

    doomed = [twelve[3].doc_id, twelve[7].doc_id, memo.doc_id]
    erasure_inbox = root / "inbox" / "erasure"
    erasure_inbox.mkdir(parents=True)
    (erasure_inbox / "request-1.json").write_text(json.dumps({"doc_ids": doomed, "reason": "test"}))
    with dg.DagsterInstance.get() as instance:
        erase = tick(instance, defs, "erasure_sensor")  # the definitions loaded above
        assert len(erase.run_requests) == 1
        assert erase.run_requests[0].tags["lightfoot/deletion"].startswith("erase-")
    execute(env, erase.run_requests[0], "deletion_job")

    # A fresh connection reads back what the run processes wrote to PostgreSQL.
    with dg.DagsterInstance.get() as instance:
        runs = instance.get_run_records()
        assert sorted(r.dagster_run.job_name for r in runs) == ["deletion_job", "ingestion_job"]
        assert {r.dagster_run.status for r in runs} == {dg.DagsterRunStatus.SUCCESS}
        assert instance.get_materialized_partitions(dg.AssetKey("forms")) == {batch}
        (made,) = instance.fetch_materializations(dg.AssetKey("forms"), limit=5).records
        assert made.asset_materialization.metadata["documents"].value == len(ids)
        observed = instance.fetch_observations(dg.AssetRecordsFilter(
            asset_key=dg.AssetKey("forms"), asset_partitions=[batch]), limit=5).records
        assert observed and observed[0].asset_observation.metadata["documents_deleted"].value == len(doomed)
        facts = instance.get_latest_materialization_event(dg.AssetKey("facts"))
        assert facts is not None and facts.run_id in {r.dagster_run.run_id for r in runs}
        # The store pool's limit is the instance's (default_limit 1), kept in PostgreSQL.
        assert instance.event_log_storage.get_concurrency_info(STORE_POOL).slot_count == 1

    # Nothing of the erased document in the database (every row of every table) nor under DAGSTER_HOME.
    assert _rows_holding(env, CANARY) == {}
    assert holders(Path(env["DAGSTER_HOME"])) == []
    assert holders(Path(env["LIGHTFOOT_STORE"])) == []

    store = Store(env["LIGHTFOOT_STORE"])
    survivors = [d for d in twelve if d.doc_id not in doomed]
    assert sorted(store.read("documents").get_column("doc_id").to_list()) == sorted(d.doc_id for d in survivors)
    fresh = Store(str(root / "fresh"))
    operations.ingest(fresh, survivors, ReplayExtractor(sample_records), HashingEmbedder(dim=32))
    assert fingerprint(store).digest == fingerprint(fresh).digest


def _rows_holding(env: dict, needle: str) -> dict[str, int]:
    """The instance database's tables with rows whose text holds the needle (case-folded), and how many."""
    import psycopg2

    found = {}
    with psycopg2.connect(host=env["DAGSTER_PG_HOST"], port=env["DAGSTER_PG_PORT"], dbname=env["DAGSTER_PG_DB"],
                          user=env["DAGSTER_PG_USERNAME"], password=env["DAGSTER_PG_PASSWORD"]) as conn, \
            conn.cursor() as cursor:
        cursor.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
        tables = [name for (name,) in cursor.fetchall()]
        assert "event_logs" in tables and "runs" in tables
        for table in tables:
            cursor.execute(f'SELECT count(*) FROM "{table}" t WHERE lower(t::text) LIKE %s',
                           (f"%{needle.casefold()}%",))
            (count,) = cursor.fetchone()
            if count:
                found[table] = count
    return found
