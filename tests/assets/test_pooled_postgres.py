"""The instance's PostgreSQL storage keeps its connections in a pool (assets/pooled_postgres.py).

On the tests' own server, with ``dagster.postgres.yaml`` as the instance file: a run of a small
job opens a few connections where the stock storage opens one per statement, a disposed instance
leaves none open on the server, and ``pool_size: 0`` is the stock behaviour.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import dagster as dg
import psycopg2
import pytest
import yaml

from assets.pooled_postgres import PooledEventLogStorage, PooledRunStorage
from tests.assets.pool_probe import run_probe
from tests.assets.postgres_server import new_database

pytestmark = [pytest.mark.dagster, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]


def _instance(postgres, tmp_path: Path, monkeypatch, pool_size: int | None = None) -> tuple[dg.DagsterInstance, str]:
    home = tmp_path / f"home-{secrets.token_hex(3)}"
    home.mkdir()
    config = yaml.safe_load((ROOT / "dagster.postgres.yaml").read_text())
    if pool_size is not None:
        config["storage"]["custom"]["config"]["pool_size"] = pool_size
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    database = f"pool_{secrets.token_hex(4)}"
    for name, value in new_database(postgres, database).items():
        monkeypatch.setenv(name, value)
    return dg.DagsterInstance.from_config(str(home)), database


def _counting_connects(monkeypatch) -> list[int]:
    opened: list[int] = []
    connect = psycopg2.connect

    def counted(*args, **kwargs):
        opened.append(1)
        return connect(*args, **kwargs)

    monkeypatch.setattr(psycopg2, "connect", counted)
    return opened


def _server_connections(postgres, database: str) -> int:
    connection = psycopg2.connect(host=postgres["DAGSTER_PG_HOST"], port=int(postgres["DAGSTER_PG_PORT"]),
                                  user=postgres["DAGSTER_PG_USERNAME"], password=postgres["DAGSTER_PG_PASSWORD"],
                                  dbname="postgres")
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,))
            return int(cursor.fetchone()[0])
    finally:
        connection.close()


def _server_connections_once_settled(postgres, database: str, *, within: float = 10.0) -> int:
    """The count once it reaches zero, or as it stands after ``within`` seconds.

    A closed connection's server process leaves ``pg_stat_activity`` a moment after the client hangs
    up, so a count taken at once can still see it; a connection the pool kept open stays past the wait.
    """
    deadline = time.monotonic() + within
    while (count := _server_connections(postgres, database)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return count



def test_a_run_opens_a_few_connections_and_a_disposed_instance_none(postgres, tmp_path, monkeypatch):
    instance, database = _instance(postgres, tmp_path, monkeypatch)
    assert isinstance(instance._event_storage, PooledEventLogStorage)
    assert isinstance(instance._run_storage, PooledRunStorage)
    opened = _counting_connects(monkeypatch)
    result = run_probe(instance)
    assert result.success
    events = len(instance.get_records_for_run(result.run_id).records)
    assert events > 30  # every one of them a statement or more
    assert len(opened) <= 4, f"{len(opened)} connections for a run of {events} events"
    assert _server_connections(postgres, database) >= 1  # kept for the next statement
    instance.dispose()
    assert _server_connections_once_settled(postgres, database) == 0


def test_pool_size_zero_is_a_connection_per_statement(postgres, tmp_path, monkeypatch):
    instance, _ = _instance(postgres, tmp_path, monkeypatch, pool_size=0)
    opened = _counting_connects(monkeypatch)
    result = run_probe(instance)
    assert result.success
    events = len(instance.get_records_for_run(result.run_id).records)
    assert len(opened) >= events
    instance.dispose()


def test_the_instance_file_names_the_pooled_storage():
    config = yaml.safe_load((ROOT / "dagster.postgres.yaml").read_text())
    custom = config["storage"]["custom"]
    assert (custom["module"], custom["class"]) == ("assets.pooled_postgres", "PooledPostgresStorage")
