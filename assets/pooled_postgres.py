"""The Dagster instance's PostgreSQL storage, with connections kept in a pool.

dagster-postgres opens a new database connection for every statement outside the webserver
(its engines use SQLAlchemy's ``NullPool``): a run of the ingestion job makes about 360, and each
costs a server process and a password exchange, 14 ms on the benchmark's loopback server, or 5 s
of a 1,000-document run (benchmarks/dagster_scale.py). :class:`PooledPostgresStorage` is
``dagster_postgres.DagsterPostgresStorage`` with each of its three storages (runs, events,
schedules) on an engine that keeps ``pool_size`` connections open per process and opens up to
``max_overflow`` more under load (the daemon's sensor threads), closing those once returned.
A kept connection is checked before use (``pool_pre_ping``) and replaced after ``pool_recycle``
seconds, so a restarted server or a proxy's idle timeout costs a reconnect, not a failure.

The webserver replaces these engines with its own (``optimize_for_webserver``), as it does for
the stock storage. In front of PgBouncer in transaction mode, set ``pool_size: 0`` to get the
stock behaviour back (a connection per statement). dagster.postgres.yaml names this class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy.pool as db_pool
from dagster import Field, IntSource
from dagster._serdes import ConfigurableClassData
from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.run_storage import PostgresRunStorage
from dagster_postgres.schedule_storage import PostgresScheduleStorage
from dagster_postgres.utils import create_pg_engine, get_token_provider_from_config, pg_config, pg_url_from_config

POOL_SIZE = 2
MAX_OVERFLOW = 8
POOL_RECYCLE_S = 3600


class _Pooled:
    """A dagster-postgres storage on a pooled engine, which it closes when disposed."""

    _engine: Any

    def use_pool(self, postgres_url: str, token_provider, pool: Mapping[str, int]) -> None:
        unpooled = self._engine
        self._engine = create_pg_engine(postgres_url, token_provider, isolation_level="AUTOCOMMIT",
                                        poolclass=db_pool.QueuePool, pool_pre_ping=True, **pool)
        unpooled.dispose()

    def dispose(self) -> None:
        super().dispose()  # type: ignore[misc]
        self._engine.dispose()


class PooledRunStorage(_Pooled, PostgresRunStorage):
    pass


class PooledEventLogStorage(_Pooled, PostgresEventLogStorage):
    pass


class PooledScheduleStorage(_Pooled, PostgresScheduleStorage):
    pass


class PooledPostgresStorage(DagsterPostgresStorage):
    """``DagsterPostgresStorage`` whose run, event-log and schedule storages keep their
    connections in a pool (``pool_size``, ``max_overflow``, ``pool_recycle``; 0 connections: none
    kept, as dagster-postgres has it)."""

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True,
                 inst_data: ConfigurableClassData | None = None, token_provider=None,
                 pool_size: int = POOL_SIZE, max_overflow: int = MAX_OVERFLOW, pool_recycle: int = POOL_RECYCLE_S):
        if pool_size <= 0:
            super().__init__(postgres_url, should_autocreate_tables, inst_data=inst_data, token_provider=token_provider)
            return
        self.postgres_url = postgres_url
        self.should_autocreate_tables = should_autocreate_tables
        self._inst_data = inst_data
        pool = {"pool_size": pool_size, "max_overflow": max_overflow, "pool_recycle": pool_recycle}
        storages = []
        for kind in (PooledRunStorage, PooledEventLogStorage, PooledScheduleStorage):
            storage = kind(postgres_url, should_autocreate_tables, token_provider=token_provider)
            storage.use_pool(postgres_url, token_provider, pool)
            storages.append(storage)
        self._run_storage, self._event_log_storage, self._schedule_storage = storages
        super(DagsterPostgresStorage, self).__init__()

    def dispose(self) -> None:
        for storage in (self._run_storage, self._event_log_storage, self._schedule_storage):
            storage.dispose()

    @classmethod
    def config_type(cls) -> dict:
        return {
            **pg_config(),
            "pool_size": Field(IntSource, is_required=False, default_value=POOL_SIZE,
                               description="Connections kept open per process (0: a connection per statement)."),
            "max_overflow": Field(IntSource, is_required=False, default_value=MAX_OVERFLOW,
                                  description="Connections opened beyond pool_size under load, closed once returned."),
            "pool_recycle": Field(IntSource, is_required=False, default_value=POOL_RECYCLE_S,
                                  description="Seconds after which a kept connection is replaced."),
        }

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None,
                          config_value: Mapping[str, Any]) -> PooledPostgresStorage:  # type: ignore[override]
        return cls(
            pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            inst_data=inst_data,
            token_provider=get_token_provider_from_config(config_value),
            pool_size=config_value.get("pool_size", POOL_SIZE),
            max_overflow=config_value.get("max_overflow", MAX_OVERFLOW),
            pool_recycle=config_value.get("pool_recycle", POOL_RECYCLE_S),
        )
