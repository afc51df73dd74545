"""The local Dagster instance's SQLite storage, with its database engines kept per process.

Dagster's SQLite storages create an engine and open a connection for every statement (SQLAlchemy's
``NullPool``): 3.6 ms an event here, 8.7 ms an asset materialization (written to the run's database
and to the index), about 0.9 s of a 1,000-document ingestion run (benchmarks/dagster_scale.py).
:class:`PooledSqliteStorage` is ``DagsterSqliteStorage`` on the same files and tables, with

- the run and the schedule storage each on one engine kept for the process, its connections in
  SQLAlchemy's pool for a database file;
- each of the event log's databases (the index, and one per run) on an engine of its own, at most
  ``SHARDS_KEPT`` kept per process, the one used longest ago closed first;
- after a transaction that wrote to a run's database, a passive checkpoint of its write-ahead log:
  the stock storage's last connection wrote the events into the database file as it closed, and
  the webserver shows a run's new events as that file changes (Dagster's event-log watchdog);
- the engines of the run databases closed before a wipe removes their files, and every engine
  closed by ``dispose``; a forked child drops its parent's connections without closing them.

An instance moves to it (and back) by its instance file alone. :class:`LocalInstance`, which
``dagster.yaml`` names as its ``instance_class``, makes it the storage of an instance file without a
``storage`` section, under the instance's folder, where Dagster's default would be.
"""

from __future__ import annotations

import os
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
import yaml
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SqliteEventLogStorage,
)
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sqlite import create_db_conn_string
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage
from dagster._serdes import ConfigurableClassData
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine

SHARDS_KEPT = 8  # event-log databases with an engine kept per process (the index and recent runs)


def folders(base_dir: str) -> tuple[str, str, str]:
    """Where Dagster's SQLite storage keeps the runs, the event logs and the schedules under an
    instance's folder: the same places, so that the stock storage and this one read each other's."""
    return (os.path.join(base_dir, "history", ""), os.path.join(base_dir, "history", "runs", ""),
            os.path.join(base_dir, "schedules"))


_LIVE: weakref.WeakSet = weakref.WeakSet()  # the storages of this process, for a forked child


class _OneEngine:
    """A run or schedule storage on one engine kept for the process."""

    _conn_string: str

    def _kept(self) -> Engine:
        engine = self.__dict__.get("_engine")
        if engine is None:
            engine = self.__dict__["_engine"] = create_engine(self._conn_string)
            _LIVE.add(self)
        return engine

    @contextmanager
    def connect(self, *_args: Any) -> Iterator[Connection]:
        with self._kept().connect() as conn, conn.begin():
            yield conn

    def engines(self) -> list[Engine]:
        return [engine] if (engine := self.__dict__.get("_engine")) is not None else []

    def dispose(self) -> None:
        super().dispose()  # type: ignore[misc]
        if (engine := self.__dict__.pop("_engine", None)) is not None:
            engine.dispose()


class PooledSqliteRunStorage(_OneEngine, SqliteRunStorage):
    pass


class PooledSqliteScheduleStorage(_OneEngine, SqliteScheduleStorage):
    pass


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """The event log's databases each on an engine kept, ``SHARDS_KEPT`` at most."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        # has_table is asked while a connection of _connect is open (and _db_lock held): an engine of its own.
        self._index_probe: Engine | None = create_engine(
            create_db_conn_string(os.path.abspath(base_dir), INDEX_SHARD_NAME),
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
        super().__init__(base_dir, inst_data)
        _LIVE.add(self)

    def _engine(self, shard: str) -> Engine:
        """The shard's engine, made the most recently used; called holding ``_db_lock``."""
        engine = self._engines.pop(shard, None)
        if engine is None:
            engine = create_engine(self.conn_string_for_shard(shard),
                                   connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
        self._engines[shard] = engine
        while len(self._engines) > SHARDS_KEPT:
            _, oldest = self._engines.popitem(last=False)
            oldest.dispose()
        return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn:
                before = conn.connection.dbapi_connection.total_changes  # type: ignore[union-attr]
                with conn.begin():
                    yield conn
                if shard != INDEX_SHARD_NAME and conn.connection.dbapi_connection.total_changes != before:  # type: ignore[union-attr]
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")

    def has_table(self, table_name: str) -> bool:
        if self._index_probe is None:  # disposed
            return super().has_table(table_name)
        with self._index_probe.connect() as conn:
            return bool(self._index_probe.dialect.has_table(conn, table_name))

    def engines(self) -> list[Engine]:
        return [*self._engines.values(), *([self._index_probe] if self._index_probe is not None else [])]

    def wipe(self) -> None:
        with self._db_lock:
            for shard in [s for s in self._engines if s != INDEX_SHARD_NAME]:
                self._engines.pop(shard).dispose()
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        with self._db_lock:
            while self._engines:
                self._engines.popitem()[1].dispose()
        if self._index_probe is not None:
            self._index_probe.dispose()
            self._index_probe = None


class PooledSqliteStorage(DagsterSqliteStorage):
    """``DagsterSqliteStorage`` (``base_dir``: the instance's folder) with its engines kept."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        self.base_dir = base_dir
        runs, event_logs, schedules = folders(base_dir)
        self._run_storage = PooledSqliteRunStorage.from_local(runs)
        self._event_log_storage = PooledSqliteEventLogStorage(event_logs)
        self._schedule_storage = PooledSqliteScheduleStorage.from_local(schedules)
        self._inst_data = inst_data
        super(DagsterSqliteStorage, self).__init__()

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None,
                          config_value: Mapping[str, Any]) -> PooledSqliteStorage:
        return cls.from_local(inst_data=inst_data, **config_value)


class LocalInstance(dg.DagsterInstance):
    """The instance of ``dagster.yaml``: Dagster's, with :class:`PooledSqliteStorage` as the
    storage an instance file without a ``storage`` section gets."""

    @classmethod
    def config_schema(cls) -> dict:
        return {}

    def dispose(self) -> None:
        super().dispose()
        if self._schedule_storage is not None:  # which Dagster's dispose leaves: its connections are kept here
            self._schedule_storage.dispose()

    @staticmethod
    def config_defaults(base_dir: str) -> Mapping[str, ConfigurableClassData | None]:
        return {**InstanceRef.config_defaults(base_dir),
                "storage": ConfigurableClassData(__name__, PooledSqliteStorage.__name__,
                                                 yaml.dump({"base_dir": base_dir}, default_flow_style=False))}


def _forget_parent_connections() -> None:
    """In a forked child: the parent's pooled connections are left to it, never used or closed here."""
    for storage in list(_LIVE):
        for engine in storage.engines():
            engine.dispose(close=False)


os.register_at_fork(after_in_child=_forget_parent_connections)
