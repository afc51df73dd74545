"""A PostgreSQL server of the tests' own, for Dagster instances stored in PostgreSQL.

:func:`postgres_server` starts one from Debian's ``postgresql`` package (initdb and pg_ctl on a
free port on 127.0.0.1, password authentication, run as the ``postgres`` account when the tests
run as root) and stops it on exit; it raises :class:`NoServer`, saying why, only where none can be
started. :func:`new_database` gives each test a database of its own on that server.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


class NoServer(Exception):
    """No PostgreSQL server can be started here; the message says why."""


def _binaries() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def postgres_server() -> Iterator[dict[str, str]]:
    """A running server: its ``DAGSTER_PG_*`` connection settings, with the database ``dagster``."""
    binaries = _binaries()
    if binaries is None:
        raise NoServer("no PostgreSQL server binaries (initdb, pg_ctl): install Debian's postgresql package")
    run_as: list[str] = []
    account = None
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as the postgres account
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            raise NoServer("running as root and there is no 'postgres' account to run the server as") from None
        if shutil.which("runuser") is None:
            raise NoServer("running as root and runuser(1) is missing, so the server cannot run as 'postgres'")
        run_as = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="lightfoot-pg-"))
    password = secrets.token_urlsafe(16)
    (root / "pw").write_text(password)
    if account is not None:
        os.chown(root, account.pw_uid, account.pw_gid)
        os.chown(root / "pw", account.pw_uid, account.pw_gid)
    port = _free_port()
    data, log = root / "data", root / "server.log"

    def call(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*run_as, *args], capture_output=True, text=True, timeout=120)

    made = call(str(binaries / "initdb"), "-D", str(data), "-U", "lightfoot", f"--pwfile={root / 'pw'}",
                "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8")
    if made.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise NoServer(f"initdb could not create a PostgreSQL cluster: {made.stderr.strip()[-500:]}")
    started = call(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
                   "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start")
    if started.returncode != 0:
        tail = log.read_text()[-500:] if log.exists() else started.stderr[-500:]
        shutil.rmtree(root, ignore_errors=True)
        raise NoServer(f"pg_ctl could not start PostgreSQL: {tail.strip()}")
    try:
        settings = {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(port), "DAGSTER_PG_DB": "postgres",
                    "DAGSTER_PG_USERNAME": "lightfoot", "DAGSTER_PG_PASSWORD": password}
        yield new_database(settings, "dagster")
    finally:
        call(str(binaries / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def new_database(settings: dict[str, str], name: str) -> dict[str, str]:
    """Create the database ``name`` on the server of ``settings``; the settings that name it."""
    import psycopg2

    connection = psycopg2.connect(host=settings["DAGSTER_PG_HOST"], port=int(settings["DAGSTER_PG_PORT"]),
                                  user=settings["DAGSTER_PG_USERNAME"], password=settings["DAGSTER_PG_PASSWORD"],
                                  dbname="postgres")
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        connection.close()
    return {**settings, "DAGSTER_PG_DB": name}
