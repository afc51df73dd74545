"""Peak memory and time of a snapshot export, in a fresh process, for one or more code versions.

    python benchmarks/export_memory.py --store URI [--code DIR ...] [--in-place] [--json OUT.json]

The store (a synthetic one that ``scale.py --keep`` or ``latency.py --work`` keeps, exported with
the hashing embedder at 384 dimensions) is copied to a scratch folder for each code version named
by ``--code`` (a checkout whose ``lightfoot_pipeline`` the export imports; this one by default),
its snapshots and passage and fact vector caches left out, so that every version makes the same
first export: every passage and fact embedded, the fact index trained, the vectors written. With
``--in-place`` (one version; a store of 1M passages is tens of GB to copy) the export runs on the
store itself as it stands.

For each version: the export's wall and CPU seconds, the process's peak RSS and each step's (the
steps its progress reports: reading the store, embedding, indexing, writing; with the anonymous
and file-backed memory it held as each ended), the snapshot's
counts and size on disk, and the load average; beside the first version, each other's ratios.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
from pathlib import Path
import lightfoot_pipeline
assert lightfoot_pipeline.__file__.startswith(sys.argv[2]), f"{lightfoot_pipeline.__file__} is not of {sys.argv[2]}"
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.progress import peak_rss_mb
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.store.store import Store

# The peak of each step the export reports: Linux's high-water mark, read and reset
# (/proc/self/clear_refs) as the step changes. The whole export's peak is the largest of them.
steps, now = {}, [None, time.perf_counter()]
def _reset():
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
def _resident():
    # what the process holds as the step ends: its own memory, and pages of files it maps
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {key: round(int(fields[name].split()[0]) / 1024, 1)
            for key, name in (("anon_mb_at_end", "RssAnon"), ("file_mb_at_end", "RssFile")) if name in fields}
def _close_step():
    if now[0] is not None:
        seen = steps.setdefault(now[0], {"peak_rss_mb": 0.0, "seconds": 0.0})
        seen["peak_rss_mb"] = max(seen["peak_rss_mb"], peak_rss_mb())
        seen.update(_resident())
        seen["seconds"] = round(seen["seconds"] + time.perf_counter() - now[1], 2)
def progress(step, done, total):
    if step != now[0]:
        _close_step()
        _reset()
        now[0], now[1] = step, time.perf_counter()
started, cpu = time.perf_counter(), time.process_time()
info = export_snapshot(Store(sys.argv[1]), HashingEmbedder(dim=384), progress=progress)
_close_step()
seconds, cpu_s = round(time.perf_counter() - started, 2), round(time.process_time() - cpu, 2)
print(json.dumps({"seconds": seconds, "cpu_s": cpu_s,
                  "peak_rss_mb": max([peak_rss_mb()] + [s["peak_rss_mb"] for s in steps.values()]),
                  "steps": steps, "snapshot_id": info.snapshot_id, "counts": info.counts}))
"""


def _copy_without_exports(store: Path, target: Path) -> None:
    """The store without its snapshots and its passage and fact vector caches (name vectors kept)."""

    def ignored(folder: str, names: list[str]) -> list[str]:
        here = Path(folder)
        if here == store:
            return [n for n in names if n == "snapshots"]
        if here.parent == store and here.name == "vectors":
            return [n for n in names if n.startswith(("passage__", "fact__"))]
        return []

    shutil.copytree(store, target, ignore=ignored)


def _tree_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6, 1)


def export_in_child(code: Path, store_uri: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "PYTHONUNBUFFERED": "1"}
    # In the checkout's folder: ``python -c`` puts the working folder first on the import path.
    done = subprocess.run([sys.executable, "-c", CHILD, store_uri, str(code.resolve())], env=env, capture_output=True, text=True,
                          cwd=code)
    if done.returncode != 0:
        return {"failed": done.returncode, "stderr_tail": done.stderr[-2000:]}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=code, capture_output=True,
                                   text=True).stdout.strip()
    out["snapshot_mb"] = _tree_mb(Path(store_uri) / "snapshots" / out["snapshot_id"])
    out["load_average_1m"] = round(os.getloadavg()[0], 2)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, type=Path, help="a built local store")
    parser.add_argument("--code", type=Path, nargs="*", default=[ROOT],
                        help="checkouts to export with, in order (default: this one)")
    parser.add_argument("--in-place", action="store_true", help="export the store itself (one --code only)")
    parser.add_argument("--json", dest="json_out", type=Path, default=None)
    args = parser.parse_args()
    if args.in_place and len(args.code) != 1:
        parser.error("--in-place exports with one version")
    result: dict = {"store": str(args.store), "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    "runs": []}
    for code in args.code:
        print(f"[{time.strftime('%H:%M:%S')}] export with {code}", file=sys.stderr, flush=True)
        if args.in_place:
            run = export_in_child(code, str(args.store))
        else:
            with tempfile.TemporaryDirectory(prefix="lightfoot-export-bench-") as scratch:
                copy = Path(scratch) / "store"
                _copy_without_exports(args.store, copy)
                run = export_in_child(code, str(copy))
        run["code"] = str(code)
        result["runs"].append(run)
        print(f"[{time.strftime('%H:%M:%S')}] {json.dumps(run)[:400]}", file=sys.stderr, flush=True)
        if args.json_out:
            args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    first = result["runs"][0]
    for run in result["runs"][1:]:
        if "failed" not in run and "failed" not in first:
            run["ratio_to_first"] = {key: round(run[key] / first[key], 3) for key in ("seconds", "cpu_s", "peak_rss_mb")}
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
