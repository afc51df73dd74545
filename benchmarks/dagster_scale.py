"""Dagster over the command line: the same drop on the same store state, ingested both ways.

    python benchmarks/dagster_scale.py [--sizes 1000,10000] [--landing 100000 --drop 1000 --sample-every 10]
                                       [--instance sqlite|postgres] [--rebuild-check off|on|both]
                                       [--cli in-process|subprocess] [--json OUT.json]

The partition is the ingestion batch (assets/partitions.py), so a run's events should not grow
with its drop. For a drop of N synthetic documents (benchmarks/synthetic.py: extractions
replayed, the hashing embedder) on a store state, the store root is copied first, so that both
paths start from the same state; then

- the Dagster path, on the store: the drop is written to the inbox, the ``inbox_sensor``
  sensor is evaluated as the daemon does (``tick_s``: it lands the drop, adds its batch partition
  and asks for one run), the requested run of ``ingestion_job`` executes in process with
  the daemon's tags (``dagster_s``: passages, extraction_cache, extractions, forms, the graph,
  the checks and the serving snapshot), and a second tick settles the drop (``settle_s``);
- the command-line path, on the copy: ``lightfoot ingest --dataset DROP`` then ``lightfoot
  snapshot`` (the export the Dagster run also does), through ``lightfoot_pipeline.cli.main`` in
  this process by default, so neither path pays for starting an interpreter (``--cli
  subprocess``: as two processes, their start included) (``cli_s``).

Both use the same settings: no store fingerprint in the materializations (the command line
computes none), the same embedder, replayed extractions. The run's ``matches_fresh_rebuild``
check rebuilds the whole store, work the command line does not do: ``--rebuild-check off``
(default) disables it in the run config (``enabled: false``; the check then warns that it did
not compare), ``on`` leaves it as shipped (it rebuilds the whole store while it holds at most
``full_limit`` documents, and compares the run's changed components above), ``both`` measures off and then, on another copy of the state the
tick left, on (``dagster_check_s``).

``events_per_run`` counts the run's event log records (``instance.get_records_for_run``), by
type in ``events_by_type``; ``dagster_events_per_run`` leaves out the steps' log messages (a long
step logs its progress every so many seconds, so their number follows the drop's time). The instance is SQLite under a temporary DAGSTER_HOME with the
shipped dagster.yaml, or with ``--instance postgres`` dagster.postgres.yaml on a PostgreSQL server
started on 127.0.0.1 (tests/assets/postgres_server.py), a database per store.

``--sizes``: each size on a fresh store and instance (after ``--base`` documents landed through
Dagster, default none). ``--landing TOTAL``: drops of ``--drop`` documents through Dagster, one
after another on one store and instance, the command line beside the first, the last and every
``--sample-every``-th drop on a copy of the same state; ``last_over_first`` is the last sampled
drop's ratio over the first's. Every absolute time comes with a ratio beside it.

The partitions page in the webserver is no longer timed here: with a partition per batch it lists
tens of partitions, not 100,000 (tests/assets/test_webserver.py loads it).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402
from synthetic import synthetic_documents_and_records, write_documents  # noqa: E402

HASHING = "hashing:64"
INGESTION_JOB = "ingestion_job"
INBOX_SENSOR = "inbox_sensor"
REBUILD_OFF = {"ops": {"matches_fresh_rebuild": {"config": {"enabled": False}}}}
EVENT_LIMIT = 1_000_000


# -- the instance -----------------------------------------------------------------------------


@contextlib.contextmanager
def instances(kind: str):
    """Yields ``new_instance(home)``: a Dagster instance under ``home`` from the shipped instance
    file, for SQLite, or on a database of its own on a PostgreSQL server started for the benchmark."""
    if kind == "sqlite":
        yield functools.partial(_instance, "dagster.yaml", {})
        return
    from tests.assets.postgres_server import new_database, postgres_server

    with postgres_server() as server:
        counter = iter(range(1_000_000))
        yield lambda home: _instance("dagster.postgres.yaml", new_database(server, f"bench_{next(counter)}"), home)


def _instance(instance_file: str, settings: dict[str, str], home: Path) -> dg.DagsterInstance:
    home.mkdir(parents=True)
    shutil.copy(REPO / instance_file, home / "dagster.yaml")
    os.environ.update(settings)
    os.environ["DAGSTER_HOME"] = str(home)
    return dg.DagsterInstance.from_config(str(home))


@functools.lru_cache(maxsize=1)
def _shipped() -> dg.Definitions:
    from assets.definitions import defs

    return defs()


def definitions(store: Path, inbox: Path) -> tuple[dg.Definitions, dict]:
    """The shipped definitions with the store, inbox and model stand-ins pointed here."""
    from assets.resources import EmbedderResource, ExtractorResource, InboxResource, StoreResource

    resources = {
        "store": StoreResource(uri=str(store), report_fingerprint=False),
        "embedder": EmbedderResource(model=HASHING),
        "extractor": ExtractorResource(mode="replay"),
        "inbox": InboxResource(documents=str(inbox / "documents"), erasure_requests=str(inbox / "erasure")),
    }
    loaded = _shipped()
    resources.update({key: value for key, value in loaded.resources.items() if key not in resources})  # relink_outputs
    return dg.Definitions(
        assets=loaded.assets, asset_checks=loaded.asset_checks, jobs=loaded.jobs, sensors=loaded.sensors,
        schedules=loaded.schedules, resources=resources,
    ), resources


# -- one drop, both ways ----------------------------------------------------------------------


@dataclass
class Bench:
    """A store, its inbox and a Dagster instance, with the inbox sensor's cursor."""

    root: Path
    instance: dg.DagsterInstance
    rebuild_check: str
    cli: str
    cursor: str | None = None
    copies: int = 0
    last_cpu_s: float = 0.0  # this process's CPU seconds in the last run or command-line path

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def inbox(self) -> Path:
        return self.root / "inbox"

    def tick(self, defs: dg.Definitions, resources: dict):
        """One evaluation of the inbox sensor as the daemon makes it, its partition requests applied."""
        sensor = defs.resolve_sensor_def(INBOX_SENSOR)
        # With the instance's ref, as the daemon builds it: resolving a request for a partition the
        # tick adds loads the partitions through it (without one, Dagster 1.13 fails the tick).
        with dg.build_sensor_context(instance=self.instance, instance_ref=self.instance.get_ref(), cursor=self.cursor,
                                     definitions=defs, sensor_name=INBOX_SENSOR, resources=resources) as context:
            data = sensor.evaluate_tick(context)
        self.cursor = data.cursor
        for request in data.dynamic_partitions_requests or []:
            self.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        return data

    def execute(self, defs: dg.Definitions, request: dg.RunRequest, run_config: dict) -> tuple[dg.ExecuteInProcessResult, float]:
        """The requested run in process, with the tags the daemon gives it."""
        tags = {**request.tags, "dagster/run_key": request.run_key, "dagster/sensor_name": INBOX_SENSOR}
        job = defs.resolve_job_def(request.job_name or INGESTION_JOB)
        t0, c0 = time.perf_counter(), time.process_time()
        result = job.execute_in_process(instance=self.instance, partition_key=request.partition_key, tags=tags,
                                        run_config=run_config, raise_on_error=False)
        self.last_cpu_s = time.process_time() - c0
        return result, time.perf_counter() - t0

    def copy_store(self, name: str) -> Path:
        self.copies += 1
        target = self.root / f"{name}-{self.copies}"
        if self.store.exists():  # an empty store is no folder yet: its copy is none either
            shutil.copytree(self.store, target, symlinks=True)
        return target

    def dagster_drop(self, dataset: Path, name: str, with_check: bool = False) -> dict:
        """Drop → sensor tick → the requested run → the settling tick, on the store (and with
        ``with_check`` the same run on a copy of the state the tick left, the rebuild check on)."""
        defs, resources = definitions(self.store, self.inbox)
        drop = self.inbox / "documents" / name
        hidden = drop.with_name("." + name)
        hidden.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(dataset, hidden)
        hidden.rename(drop)  # arrives whole, as a drop should
        t0 = time.perf_counter()
        data = self.tick(defs, resources)
        tick_s = time.perf_counter() - t0
        if len(data.run_requests) != 1:
            raise RuntimeError(f"the inbox sensor asked for {len(data.run_requests)} runs for one drop "
                               f"(skip reason: {data.skip_message})")
        (request,) = data.run_requests
        checked_store = self.copy_store("check") if with_check else None
        off = self.rebuild_check in ("off", "both")
        load = os.getloadavg()[0]
        result, dagster_s = self.execute(defs, request, REBUILD_OFF if off else {})
        dagster_cpu_s = self.last_cpu_s
        if not result.success:
            raise RuntimeError(f"run {result.run_id} of batch {request.partition_key} failed:\n"
                               + _failure(self.instance, result.run_id))
        t0 = time.perf_counter()
        self.tick(defs, resources)
        settle_s = time.perf_counter() - t0
        out = {"batch": request.partition_key, "run_id": result.run_id, "tick_s": round(tick_s, 3),
               "dagster_s": round(dagster_s, 2), "dagster_cpu_s": round(dagster_cpu_s, 2),
               "settle_s": round(settle_s, 3), "load_before_run": round(load, 2),
               "rebuild_check": "disabled by run config" if off else "as shipped",
               **_events(self.instance, result.run_id)}
        if checked_store is not None:
            check_defs, _ = definitions(checked_store, self.inbox)
            checked, check_s = self.execute(check_defs, request, {})
            if not checked.success:
                raise RuntimeError(f"run {checked.run_id} (rebuild check on) failed:\n"
                                   + _failure(self.instance, checked.run_id))
            out["dagster_check_s"] = round(check_s, 2)
            out["events_per_run_check"] = _events(self.instance, checked.run_id)["events_per_run"]
            out["rebuild_compared"] = _compared(checked)
            shutil.rmtree(checked_store)
        return out

    def cli_drop(self, store: Path, dataset: Path) -> float:
        """``lightfoot ingest`` of the dataset and ``lightfoot snapshot``, on ``store``."""
        commands = [["ingest", "--dataset", str(dataset), "--store", str(store), "--embedder", HASHING,
                     "--extractor", "replay", "--json"],
                    ["snapshot", "--store", str(store), "--embedder", HASHING]]
        log = self.root / "cli.log"
        t0, c0 = time.perf_counter(), time.process_time()
        children = os.times().children_user + os.times().children_system
        for argv in commands:
            if self.cli == "subprocess":
                with log.open("a") as out:
                    code = subprocess.run([sys.executable, "-m", "lightfoot_pipeline.cli", *argv], cwd=REPO,
                                          stdout=out, stderr=subprocess.STDOUT).returncode
            else:
                from lightfoot_pipeline.cli import main as lightfoot

                with log.open("a") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                    code = lightfoot(argv)
            if code != 0:
                raise RuntimeError(f"lightfoot {' '.join(argv)} exited with {code}; see {log}:\n"
                                   + log.read_text()[-3000:])
        self.last_cpu_s = (time.process_time() - c0 + os.times().children_user + os.times().children_system
                           - children)
        return time.perf_counter() - t0

    def both(self, dataset: Path, name: str) -> dict:
        """The same drop on the same store state: the copy for the command line first, then Dagster
        on the store, then the command line on the copy."""
        copy = self.copy_store("cli")
        try:
            out = self.dagster_drop(dataset, name, with_check=self.rebuild_check == "both")
            load = os.getloadavg()[0]
            cli_s = self.cli_drop(copy, dataset)
        finally:
            shutil.rmtree(copy, ignore_errors=True)
        out["cli_s"] = round(cli_s, 2)
        out["dagster_over_cli"] = round(out["dagster_s"] / cli_s, 2)
        # CPU seconds of this process (and of the commands' processes): less moved by other load.
        out["cli_cpu_s"] = round(self.last_cpu_s, 2)
        out["dagster_over_cli_cpu"] = round(out["dagster_cpu_s"] / self.last_cpu_s, 2)
        out["load_before_cli"] = round(load, 2)
        out["dagster_with_ticks_over_cli"] = round((out["tick_s"] + out["dagster_s"] + out["settle_s"]) / cli_s, 2)
        if "dagster_check_s" in out:
            out["dagster_check_over_cli"] = round(out["dagster_check_s"] / cli_s, 2)
        return out


def _events(instance: dg.DagsterInstance, run_id: str) -> dict:
    records = instance.get_records_for_run(run_id, limit=EVENT_LIMIT).records
    by_type = Counter(
        r.event_log_entry.dagster_event.event_type_value if r.event_log_entry.dagster_event else "LOG_MESSAGE"
        for r in records
    )
    spans: dict[str, list[float]] = {}
    for r in records:
        event = r.event_log_entry.dagster_event
        if event is not None and event.step_key and event.event_type in (
                dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS):
            spans.setdefault(event.step_key, []).append(r.event_log_entry.timestamp)
    first = min(r.event_log_entry.timestamp for r in records)
    last = max(r.event_log_entry.timestamp for r in records)
    steps = sum(max(t) - min(t) for t in spans.values())
    return {"events_per_run": len(records), "events_by_type": dict(sorted(by_type.items())),
            # Without the steps' log messages, whose number follows how long a step logs its progress.
            "dagster_events_per_run": len(records) - by_type.get("LOG_MESSAGE", 0),
            # The steps' own time, and the run's other time (from its first event to its last).
            "steps_s": {step: round(max(t) - min(t), 2) for step, t in sorted(spans.items())},
            "outside_steps_s": round(last - first - steps, 2)}


def _compared(result: dg.ExecuteInProcessResult) -> bool:
    """Whether the run's rebuild check compared (rather than warned that it did not)."""
    evaluations = [e.event_specific_data for e in result.all_events
                   if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
                   and e.event_specific_data.check_name == "matches_fresh_rebuild"]
    return bool(evaluations) and all(e.passed for e in evaluations)


def _failure(instance: dg.DagsterInstance, run_id: str) -> str:
    """The error of every failed step of a run, with its traceback."""
    lines = []
    for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_FAILURE,
                                               limit=100).records:
        event = record.event_log_entry.dagster_event
        error = event.step_failure_data.error
        lines.append(f"step {event.step_key}: {error.to_string() if error else '(no error recorded)'}")
    for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE, limit=10).records:
        lines.append(f"run failure: {record.event_log_entry.dagster_event.message}")
    return "\n".join(lines) or "(no failure event)"


# -- the series -------------------------------------------------------------------------------


def _datasets(folder: Path, documents, records, drop: int) -> list[Path]:
    out = []
    for i, start in enumerate(range(0, len(documents), drop)):
        part = documents[start:start + drop]
        out.append(write_documents(folder / f"drop-{i:04d}", part, {d.doc_id: records[d.doc_id] for d in part}))
    return out


def warm_up(new_instance, n: int, scratch: Path, args) -> dict:
    """A small drop both ways on a throwaway store and instance, so that neither measured path pays
    for this process's first imports and caches (a daemon's run process and a command each start
    cold: the measured figures leave that out of both)."""
    documents, records = synthetic_documents_and_records(n, seed=2)
    root = scratch / "warm-up"
    bench = Bench(root, new_instance(root / "dagster_home"), args.rebuild_check, args.cli)
    try:
        (dataset,) = _datasets(root / "datasets", documents, records, n)
        row = {"documents": n, "store_documents_before": 0, **bench.both(dataset, "warm-up")}
        print("warm-up: " + _row_line(row), flush=True)
        return {k: row[k] for k in ("documents", "dagster_s", "cli_s", "dagster_over_cli", "events_per_run")}
    finally:
        bench.instance.dispose()
        shutil.rmtree(root, ignore_errors=True)


def sizes(new_instance, sizes_: list[int], base: int, scratch: Path, args) -> list[dict]:
    documents, records = synthetic_documents_and_records(base + max(sizes_), seed=0)
    rows = []
    for n in sizes_:
        root = scratch / f"size-{n}"
        bench = Bench(root, new_instance(root / "dagster_home"), args.rebuild_check, args.cli)
        try:
            if base:
                (seed_set,) = _datasets(root / "datasets" / "base", documents[:base], records, base)
                bench.dagster_drop(seed_set, "base")
            (dataset,) = _datasets(root / "datasets" / "measured", documents[base:base + n], records, n)
            row = {"documents": n, "store_documents_before": base, **bench.both(dataset, f"drop-{n}")}
            rows.append(row)
            print(_row_line(row), flush=True)
        finally:
            bench.instance.dispose()
            shutil.rmtree(root, ignore_errors=True)
    return rows


def landing(new_instance, total: int, drop: int, every: int, scratch: Path, args) -> dict:
    documents, records = synthetic_documents_and_records(total, seed=1)
    root = scratch / "landing"
    datasets = _datasets(root / "datasets", documents, records, drop)
    bench = Bench(root, new_instance(root / "dagster_home"), args.rebuild_check, args.cli)
    last = len(datasets) - 1
    drops = []
    started = time.perf_counter()
    try:
        for i, dataset in enumerate(datasets):
            sampled = i in (0, last) or (every and i % every == 0)
            row = bench.both(dataset, f"drop-{i:04d}") if sampled else bench.dagster_drop(dataset, f"drop-{i:04d}")
            row = {"drop": i, "store_documents_before": i * drop, "documents": len(load_lines(dataset)), **row}
            row.pop("run_id")
            drops.append(row)
            print(f"landing drop {i + 1}/{len(datasets)}: " + _row_line(row), flush=True)
    finally:
        bench.instance.dispose()
        shutil.rmtree(root, ignore_errors=True)
    sampled_rows = [r for r in drops if "cli_s" in r]
    first, final = sampled_rows[0], sampled_rows[-1]
    return {
        "total": total, "drop": drop, "sample_every": every, "drops": len(drops),
        "landed_s": round(time.perf_counter() - started, 1),
        "first_ratio": first["dagster_over_cli"], "last_ratio": final["dagster_over_cli"],
        "last_over_first": round(final["dagster_over_cli"] / first["dagster_over_cli"], 2),
        "last_over_first_cpu": round(final["dagster_over_cli_cpu"] / first["dagster_over_cli_cpu"], 2),
        "events_per_run": sorted({r["events_per_run"] for r in drops}),
        "dagster_events_per_run": sorted({r["dagster_events_per_run"] for r in drops}),
        "dagster_s_first": first["dagster_s"], "dagster_s_last": final["dagster_s"],
        "dagster_s_last_over_first": round(final["dagster_s"] / first["dagster_s"], 2),
        "sampled": sampled_rows,
        "dagster_s_per_drop": [r["dagster_s"] for r in drops],
        "tick_s_per_drop": [r["tick_s"] for r in drops],
    }


def load_lines(dataset: Path) -> list[str]:
    return (dataset / "corpus.jsonl").read_text().splitlines()


# -- the report -------------------------------------------------------------------------------


def _row_line(row: dict) -> str:
    text = (f"{row['documents']:>6,} docs on {row['store_documents_before']:>7,}: "
            f"events {row['events_per_run']:>4}  tick {row['tick_s']:6.2f} s  dagster {row['dagster_s']:7.2f} s")
    if "cli_s" in row:
        text += (f"  cli {row['cli_s']:7.2f} s  dagster/cli {row['dagster_over_cli']:.2f}"
                 f" (cpu {row['dagster_over_cli_cpu']:.2f})")
    if "dagster_check_s" in row:
        text += f"  with rebuild check {row['dagster_check_s']:.2f} s ({row['dagster_check_over_cli']:.2f}x cli)"
    return text


def _table(figures: dict) -> str:
    lines = [f"instance {figures['instance']}, rebuild check {figures['rebuild_check']}, cli {figures['cli']}; "
             "compared: the Dagster run (documents to serving snapshot, with its checks) against the command "
             "line's `lightfoot ingest` then `lightfoot snapshot`",
             f"{'documents':>10} {'events/run':>10} {'(no logs)':>9} {'dagster s':>10} {'cli s':>8} {'dagster/cli':>12}"
             f" {'tick s':>7} {'with ticks/cli':>15} {'cpu dagster/cli':>16}"]
    for r in figures["sizes"]:
        lines.append(f"{r['documents']:>10,} {r['events_per_run']:>10} {r['dagster_events_per_run']:>9} {r['dagster_s']:>10.2f} {r['cli_s']:>8.2f} "
                     f"{r['dagster_over_cli']:>12.2f} {r['tick_s']:>7.2f} {r['dagster_with_ticks_over_cli']:>15.2f}"
                     f" {r['dagster_over_cli_cpu']:>16.2f}"
                     + (f"   rebuild check on: {r['dagster_check_s']:.2f} s = {r['dagster_check_over_cli']:.2f}x cli"
                        if "dagster_check_s" in r else ""))
    land = figures.get("landing")
    if land:
        lines.append(f"landing {land['total']:,} in drops of {land['drop']:,} ({land['landed_s']:.0f} s):")
        lines.append(f"{'drop':>6} {'store before':>13} {'events/run':>10} {'dagster s':>10} {'cli s':>8} {'dagster/cli':>12}"
                     f" {'cpu dagster/cli':>16}")
        for r in land["sampled"]:
            lines.append(f"{r['drop']:>6} {r['store_documents_before']:>13,} {r['events_per_run']:>10} "
                         f"{r['dagster_s']:>10.2f} {r['cli_s']:>8.2f} {r['dagster_over_cli']:>12.2f} {r['dagster_over_cli_cpu']:>16.2f}")
        lines.append(f"last drop's ratio over the first's: {land['last_over_first']:.2f} "
                     f"(cpu {land['last_over_first_cpu']:.2f}); "
                     f"events per run {land['events_per_run']}; dagster s last/first {land['dagster_s_last_over_first']:.2f}")
    m = figures["machine"]
    lines.append(f"load average {m['load_average_start']} at start, {m['load_average_end']} at end; "
                 f"{m['cpu_count']} CPUs; {figures['wall_s']:.0f} s in all")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="documents per drop, comma-separated ('' for none)")
    parser.add_argument("--base", type=int, default=0, help="documents landed through Dagster before each size's drop")
    parser.add_argument("--landing", type=int, default=100_000, help="documents landed drop after drop (0: none)")
    parser.add_argument("--drop", type=int, default=1000, help="documents per drop of the landing series")
    parser.add_argument("--sample-every", type=int, default=10,
                        help="the command line beside every k-th drop of the landing series (and the first and last)")
    parser.add_argument("--instance", choices=("sqlite", "postgres"), default="sqlite",
                        help="the instance's storage (default: SQLite, as dg dev has it)")
    parser.add_argument("--rebuild-check", choices=("off", "on", "both"), default="off",
                        help="the run's matches_fresh_rebuild check: disabled in the run config (default), as "
                        "shipped, or both (on measured on a second copy)")
    parser.add_argument("--cli", choices=("in-process", "subprocess"), default="in-process",
                        help="run the lightfoot commands in this process (default) or as processes")
    parser.add_argument("--warm-up", type=int, default=20,
                        help="documents of an unmeasured drop made both ways first (0: none)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    sizes_ = [int(s) for s in args.sizes.split(",") if s.strip()]
    started, load_start = time.time(), os.getloadavg()
    scratch = Path(tempfile.mkdtemp(prefix="lightfoot-dagster-scale-"))
    figures: dict = {"instance": args.instance, "rebuild_check": args.rebuild_check, "cli": args.cli,
                     "settings": {"embedder": HASHING, "extractor": "replay", "report_fingerprint": False,
                                  "base_documents": args.base}}
    try:
        with instances(args.instance) as new_instance:
            if args.warm_up:
                figures["warm_up"] = warm_up(new_instance, args.warm_up, scratch, args)
            figures["sizes"] = sizes(new_instance, sizes_, args.base, scratch, args) if sizes_ else []
            if args.landing:
                figures["landing"] = landing(new_instance, args.landing, args.drop, args.sample_every, scratch, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    figures["machine"] = {"load_average_start": [round(x, 2) for x in load_start],
                          "load_average_end": [round(x, 2) for x in os.getloadavg()], "cpu_count": os.cpu_count()}
    figures["wall_s"] = round(time.time() - started, 1)
    print(_table(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
