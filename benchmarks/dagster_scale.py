"""Dagster at scale: an instance holding N document partitions, measured where it is used.

    python benchmarks/dagster_scale.py --partitions 100000 [--documents 1000] [--instance sqlite|postgres]
                                       [--json OUT.json]

Two instances (SQLite under a temporary DAGSTER_HOME with the shipped dagster.yaml, or with
``--instance postgres`` dagster.postgres.yaml on a PostgreSQL server the benchmark starts on
127.0.0.1, one database each), each with a temporary store: a baseline with no other partition, and one holding ``--partitions`` document
partitions, added with the instance API in bulk. In each, a drop of ``--documents`` synthetic
documents (benchmarks/synthetic.py, extractions replayed, hashing embedder) goes to the inbox and

- the inbox sensor is evaluated as the daemon does: the first tick lands the drop, adds its
  partitions and asks for its run (``tick_land_s``); a tick with the drop pending and its run
  finished settles it (``tick_settle_s``); a tick with nothing to do (``tick_idle_s``);
- the run it asked for executes in process (``run_s``): passages, extraction_cache, extractions,
  forms, the graph stage and the serving snapshot over a range of ``--documents`` partitions;
  ``run_create_s`` is the part before its first step, and ``steps_s`` each step's time;
- the webserver (dagster-webserver on 127.0.0.1) serves the ``passages`` asset's partitions
  page to headless Chromium, driven through the DevTools protocol: ``page_s`` is the time from
  navigation until the page shows the partition count and the materialized count (measured
  twice; the second load has warm webserver caches).

The filler partitions are keys only: no run has materialized them (the SQLite event log here
stores some tens of events a second, so a history of 100,000 x 3 materializations is out of
reach for a benchmark; the ingestion run's own events are in ``run_s``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402
from synthetic import synthetic_documents_and_records  # noqa: E402

ADD_CHUNK = 10_000
HASHING = "hashing:64"


def _write_drop(folder: Path, documents, records) -> None:
    hidden = folder.with_name("." + folder.name)
    hidden.mkdir(parents=True)
    with (hidden / "corpus.jsonl").open("w") as corpus, (hidden / "extractions.jsonl").open("w") as out:
        for d in documents:
            corpus.write(json.dumps({"doc_id": d.doc_id, "title": d.title, "text": d.text}) + "\n")
            out.write(json.dumps(records[d.doc_id]) + "\n")
    hidden.rename(folder)


def _definitions(root: Path) -> tuple[dg.Definitions, dict]:
    from assets.definitions import defs
    from assets.resources import EmbedderResource, ExtractorResource, InboxResource, StoreResource

    resources = {
        "store": StoreResource(uri=str(root / "store"), report_fingerprint=False),
        "embedder": EmbedderResource(model=HASHING),
        "extractor": ExtractorResource(mode="replay"),
        "inbox": InboxResource(documents=str(root / "inbox" / "documents"),
                               erasure_requests=str(root / "inbox" / "erasure")),
    }
    loaded = defs()
    resources.update({key: value for key, value in loaded.resources.items() if key not in resources})  # relink_outputs
    return dg.Definitions(
        assets=loaded.assets, asset_checks=loaded.asset_checks, jobs=loaded.jobs, sensors=loaded.sensors,
        schedules=loaded.schedules, resources=resources,
    ), resources


def _tick(instance, definitions, resources, cursor):
    """One evaluation of the inbox sensor as the daemon makes it, its partition requests applied."""
    sensor = definitions.resolve_sensor_def("document_inbox")
    t0 = time.perf_counter()
    with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=definitions,
                                 sensor_name="document_inbox", resources=resources) as context:
        data = sensor.evaluate_tick(context)
    for request in data.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return data, time.perf_counter() - t0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout} s")
        time.sleep(0.5)


async def _load_page(debug_port: int, url: str, expected: list[str], timeout: float, screenshot: Path | None) -> float:
    """Seconds from navigating to ``url`` until the page's text contains every ``expected`` string."""
    import websockets

    new_tab = urllib.request.Request(f"http://127.0.0.1:{debug_port}/json/new?about:blank", method="PUT")
    with urllib.request.urlopen(new_tab, timeout=10) as response:
        target = json.load(response)
    async with websockets.connect(target["webSocketDebuggerUrl"], max_size=None) as ws:
        ids = iter(range(1, 1_000_000))

        async def call(method: str, **params):
            n = next(ids)
            await ws.send(json.dumps({"id": n, "method": method, "params": params}))
            while True:
                message = json.loads(await ws.recv())
                if message.get("id") == n:
                    return message.get("result", {})

        await call("Page.enable")
        t0 = time.perf_counter()
        await call("Page.navigate", url=url)
        script = (f"document.body ? {json.dumps(expected)}.every(t => document.body.innerText.includes(t)) : false")
        while True:
            result = await call("Runtime.evaluate", expression=script, returnByValue=True)
            if result.get("result", {}).get("value") is True:
                elapsed = time.perf_counter() - t0
                break
            if time.perf_counter() - t0 > timeout:
                elapsed = float("nan")
                break
            await asyncio.sleep(0.1)
        if screenshot is not None:
            shot = await call("Page.captureScreenshot", format="png")
            if "data" in shot:
                import base64

                screenshot.write_bytes(base64.b64decode(shot["data"]))
        return elapsed


def _page_times(home: Path, root: Path, total: int, materialized: int, screenshots: Path | None) -> dict:
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if browser is None:
        return {"page_s": None, "page_note": "no Chromium on this machine"}
    port, debug_port = _free_port(), _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "LIGHTFOOT_STORE": str(root / "store"),
           "LIGHTFOOT_EMBEDDER": HASHING, "LIGHTFOOT_EXTRACTOR": "replay"}
    log = (root / "webserver.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    chrome = subprocess.Popen(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,1000",
         f"--remote-debugging-port={debug_port}", "--remote-debugging-address=127.0.0.1",
         f"--user-data-dir={root / 'chromium'}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/server_info", server, 300)
        _wait_http(f"http://127.0.0.1:{debug_port}/json/version", chrome, 60)
        url = f"http://127.0.0.1:{port}/assets/passages?view=partitions"
        expected = [f"{total:,} Partitions", f"Materialized ({materialized})"]  # as the page writes them
        times = []
        for attempt in range(2):
            shot = screenshots / f"partitions-{total}-{attempt}.png" if screenshots else None
            times.append(asyncio.run(_load_page(debug_port, url, expected, 600, shot)))
        return {"page_s": round(times[0], 2), "page_warm_s": round(times[1], 2), "page_expected_text": expected}
    finally:
        for process in (chrome, server):
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log.close()


@contextlib.contextmanager
def postgres_server():
    """A PostgreSQL server of its own on 127.0.0.1 (run as the postgres account when this is root);
    yields a function that creates a database and returns its DAGSTER_PG_* settings."""
    import psycopg2

    binaries = Path(shutil.which("pg_ctl") or sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))[-1]).parent
    run_as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="lightfoot-pg-"))
    password = secrets.token_urlsafe(16)
    (root / "pw").write_text(password)
    if run_as:
        account = pwd.getpwnam("postgres")
        for path in (root, root / "pw"):
            os.chown(path, account.pw_uid, account.pw_gid)
    port = _free_port()

    def call(*args: str) -> None:
        subprocess.run([*run_as, *args], capture_output=True, text=True, timeout=120, check=True)

    call(str(binaries / "initdb"), "-D", str(root / "data"), "-U", "lightfoot", f"--pwfile={root / 'pw'}",
         "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8")
    call(str(binaries / "pg_ctl"), "-D", str(root / "data"), "-l", str(root / "server.log"), "-w", "-t", "60",
         "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start")

    def database(name: str) -> dict[str, str]:
        connection = psycopg2.connect(host="127.0.0.1", port=port, user="lightfoot", password=password,
                                      dbname="postgres")
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
        connection.close()
        return {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(port), "DAGSTER_PG_DB": name,
                "DAGSTER_PG_USERNAME": "lightfoot", "DAGSTER_PG_PASSWORD": password}

    try:
        yield database
    finally:
        subprocess.run([*run_as, str(binaries / "pg_ctl"), "-D", str(root / "data"), "-m", "fast", "-w", "stop"],
                       capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)


def measure(filler: int, documents, records, page: bool, screenshots: Path | None, database=None) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"lightfoot-dagster-{filler}-"))
    home = root / "dagster_home"
    home.mkdir()
    if database is None:
        shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    else:
        shutil.copy(REPO / "dagster.postgres.yaml", home / "dagster.yaml")
        os.environ.update(database(f"dagster_{filler}"))
    os.environ["DAGSTER_HOME"] = str(home)
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        t0 = time.perf_counter()
        for start in range(0, filler, ADD_CHUNK):
            instance.add_dynamic_partitions(
                "documents", [f"old-{i:07d}" for i in range(start, min(filler, start + ADD_CHUNK))])
        add_s = time.perf_counter() - t0
        definitions, resources = _definitions(root)
        _write_drop(root / "inbox" / "documents" / "drop-1", documents, records)
        data, tick_land_s = _tick(instance, definitions, resources, None)
        (request,) = data.run_requests
        job = definitions.resolve_job_def(request.job_name)
        t0, started_run = time.perf_counter(), time.time()
        result = job.execute_in_process(instance=instance, tags=dict(request.tags), raise_on_error=False)
        run_s = time.perf_counter() - t0
        data, tick_settle_s = _tick(instance, definitions, resources, data.cursor)
        _, tick_idle_s = _tick(instance, definitions, resources, data.cursor)
        total = len(instance.get_dynamic_partitions("documents"))
        records = instance.get_records_for_run(result.run_id, limit=1_000_000).records
        spans: dict[str, list[float]] = {}
        for record in records:
            event = record.event_log_entry.dagster_event
            if event is not None and event.step_key and event.event_type in (
                    dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS):
                spans.setdefault(event.step_key, []).append(record.event_log_entry.timestamp)
        first_step = min(min(times) for times in spans.values())
        out = {
            "partitions": total,
            "add_partitions_s": round(add_s, 3),
            "tick_land_s": round(tick_land_s, 3),
            "tick_settle_s": round(tick_settle_s, 3),
            "tick_idle_s": round(tick_idle_s, 3),
            "run_s": round(run_s, 2),
            "run_success": result.success,
            "run_events": len(records),
            # From asking for the run to its first step: creating it, with one planned-materialization
            # event per partition and per-document asset.
            "run_create_s": round(first_step - started_run, 2),
            "steps_s": {step: round(max(times) - min(times), 2) for step, times in sorted(spans.items())},
        }
        instance.dispose()
        if page:
            out.update(_page_times(home, root, total, len(documents), screenshots))
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100_000, help="document partitions the instance holds")
    parser.add_argument("--documents", type=int, default=1000, help="documents in the measured ingestion run")
    parser.add_argument("--no-page", action="store_true", help="skip the partitions page in Chromium")
    parser.add_argument("--screenshots", type=Path, help="folder for screenshots of the partitions page")
    parser.add_argument("--instance", choices=("sqlite", "postgres"), default="sqlite",
                        help="the instance's storage (default: SQLite, as dagster dev has it)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    if args.partitions < args.documents:
        parser.error("--partitions must be at least --documents (the drop's own partitions count in)")
    if args.screenshots:
        args.screenshots.mkdir(parents=True, exist_ok=True)
    documents, records = synthetic_documents_and_records(args.documents, seed=0)
    started = time.time()
    with postgres_server() if args.instance == "postgres" else contextlib.nullcontext() as database:
        baseline = measure(0, documents, records, not args.no_page, args.screenshots, database)
        scaled = measure(args.partitions - args.documents, documents, records, not args.no_page, args.screenshots,
                         database)
    figures = {
        "instance": args.instance,
        "partitions": scaled["partitions"],
        "documents": args.documents,
        "baseline": baseline,
        "scaled": scaled,
        "ratios": {
            key: round(scaled[key] / baseline[key], 2)
            for key in ("tick_land_s", "tick_settle_s", "tick_idle_s", "run_s", "page_s", "page_warm_s")
            if isinstance(scaled.get(key), (int, float)) and baseline.get(key)
        },
        "load_average": os.getloadavg(),
        "wall_s": round(time.time() - started, 1),
    }
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
