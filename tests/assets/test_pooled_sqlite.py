"""The local instance's SQLite storage keeps its database engines (assets/pooled_sqlite.py).

On instances made from the shipped ``dagster.yaml``: a run opens a few connections where the stock
storage opens one per statement, what it writes is what another process reads, a run's new events
reach a watcher in another instance as they come (the webserver's live run view), a wipe and a
dispose leave no connection on a removed or closed database, the engines kept stay within their
bound, and a forked child neither uses nor closes its parent's connections.
"""

from __future__ import annotations

import os
import sqlite3.dbapi2
import threading
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest
import yaml

from assets.pooled_sqlite import SHARDS_KEPT, LocalInstance, PooledSqliteEventLogStorage, PooledSqliteRunStorage
from tests.assets.pool_probe import run_probe

pytestmark = pytest.mark.dagster

ROOT = Path(__file__).resolve().parents[2]


def _home(tmp_path: Path, *, stock: bool = False) -> Path:
    """A home with the shipped instance file, and beside it ``stock.yaml``: the same without the
    instance class (Dagster's own SQLite storage, on the same files)."""
    home = tmp_path / ("stock" if stock else "home")
    home.mkdir(exist_ok=True)
    shipped = (ROOT / "dagster.yaml").read_text()
    config = yaml.safe_load(shipped)
    config.pop("instance_class")
    (home / "stock.yaml").write_text(yaml.safe_dump(config))
    (home / "dagster.yaml").write_text(yaml.safe_dump(config) if stock else shipped)
    return home


def _stock(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(home), config_filename="stock.yaml")


def _counting_connects(monkeypatch) -> list[str]:
    opened: list[str] = []
    connect = sqlite3.dbapi2.connect

    def counted(database, *args, **kwargs):
        opened.append(str(database))
        return connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3.dbapi2, "connect", counted)
    return opened



def _log(instance: dg.DagsterInstance, run_id: str, message: str) -> None:
    """An engine event of the run, written to its database (and nothing else)."""
    instance.report_engine_event(message, job_name="pool_probe", run_id=run_id)


def _messages(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [r.event_log_entry.dagster_event.message for r in instance.get_records_for_run(run_id).records]


def _open_files_under(home: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(home)):
            found.append(target)
    return found


def test_a_run_opens_a_few_connections_and_another_process_reads_what_it_wrote(tmp_path, monkeypatch):
    home = _home(tmp_path)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert isinstance(instance, LocalInstance)
        assert isinstance(instance.run_storage, PooledSqliteRunStorage)
        assert isinstance(instance.event_log_storage, PooledSqliteEventLogStorage)
        opened = _counting_connects(monkeypatch)
        result = run_probe(instance)
        assert result.success
        events = instance.get_records_for_run(result.run_id).records
        assert len(events) > 30
        assert len(opened) <= 8, f"{len(opened)} connections for a run of {len(events)} events"
        monkeypatch.undo()
        stock = _stock(home)  # Dagster's own storage, on the same files
        try:
            assert [r.storage_id for r in stock.get_records_for_run(result.run_id).records] == \
                [r.storage_id for r in events]
            assert stock.get_run_by_id(result.run_id).is_success
            assert stock.get_latest_materialization_event(dg.AssetKey("two")).run_id == result.run_id
        finally:
            stock.dispose()
    assert not _open_files_under(home), "a disposed instance keeps no database open"


def test_the_stock_storage_opens_a_connection_per_statement(tmp_path, monkeypatch):
    """What the pooled one spares: the same run on the instance file without its instance class."""
    with dg.DagsterInstance.from_config(str(_home(tmp_path, stock=True))) as instance:
        assert type(instance) is dg.DagsterInstance
        opened = _counting_connects(monkeypatch)
        result = run_probe(instance)
        assert result.success
        assert len(opened) >= len(instance.get_records_for_run(result.run_id).records)


def test_the_folders_are_dagsters(tmp_path):
    from dagster._core.storage import sqlite_storage  # noqa: TID251 (its layout, compared)

    from assets.pooled_sqlite import folders

    base = str(tmp_path)
    assert folders(base) == (sqlite_storage._runs_directory(base), sqlite_storage._event_logs_directory(base),
                             sqlite_storage._schedule_directory(base))


def test_a_runs_new_events_reach_a_watcher_in_another_instance(tmp_path):
    """The webserver shows a run's events as its database file changes: each write checkpoints."""
    home = _home(tmp_path)
    with dg.DagsterInstance.from_config(str(home)) as writer, _stock(home) as watcher:
        run_id = str(uuid.uuid4())
        _log(writer, run_id, "first")
        seen: list[str] = []
        arrived = threading.Event()

        def on_event(entry, _cursor):
            seen.append(entry.dagster_event.message)
            if len(seen) >= 3:
                arrived.set()

        watcher.event_log_storage.watch(run_id, None, on_event)
        time.sleep(0.5)  # the watch is in place
        for message in ("second", "third"):
            _log(writer, run_id, message)
        assert arrived.wait(15), f"the watcher saw {seen}"
        assert seen[:3] == ["first", "second", "third"]
        watcher.event_log_storage.end_watch(run_id, on_event)


def test_a_wipe_leaves_no_connection_on_a_removed_database(tmp_path):
    home = _home(tmp_path)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        first = run_probe(instance)
        instance.wipe()
        assert not [path for path in _open_files_under(home) if first.run_id in path]
        second = run_probe(instance)
        stock = _stock(home)
        try:
            assert not stock.get_records_for_run(first.run_id).records
            assert len(stock.get_records_for_run(second.run_id).records) == \
                len(instance.get_records_for_run(second.run_id).records) > 30
        finally:
            stock.dispose()


def test_the_engines_kept_stay_within_their_bound(tmp_path):
    with dg.DagsterInstance.from_config(str(_home(tmp_path))) as instance:
        run_ids = [str(uuid.uuid4()) for _ in range(SHARDS_KEPT + 4)]
        for i, run_id in enumerate(run_ids):
            _log(instance, run_id, f"run {i}")
        assert len(instance.event_log_storage.engines()) <= SHARDS_KEPT + 1  # and the index's probe
        for i, run_id in enumerate(run_ids):
            assert _messages(instance, run_id) == [f"run {i}"]


def test_a_forked_child_neither_uses_nor_closes_its_parents_connections(tmp_path):
    with dg.DagsterInstance.from_config(str(_home(tmp_path))) as instance:
        run_id = str(uuid.uuid4())
        _log(instance, run_id, "parent before")
        pid = os.fork()
        if pid == 0:  # the child: writes through a connection of its own, then leaves without cleanup
            code = 1
            try:
                opened = _counting_connects(pytest.MonkeyPatch())
                _log(instance, run_id, "child")
                code = 0 if opened else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) != 3, "the child wrote through its parent's connection"
        assert os.waitstatus_to_exitcode(status) == 0
        _log(instance, run_id, "parent after")  # the parent's kept connection still works
        assert _messages(instance, run_id) == ["parent before", "child", "parent after"]
