"""What one document's erasure costs on a built store: wall time and peak memory, step by step.

    python benchmarks/erase_memory.py --built DIR [--docs N] [--repo CHECKOUT ...] [--json OUT.json]

``lightfoot delete DOC --erase`` removes a document and then its text from everything the store
keeps (operations/erase.py: ``erase_history``). For each of ``--docs`` documents of the store kept
by ``benchmarks/scale.py --keep DIR``, and for each checkout named by ``--repo`` (default: this
one; give two to compare versions, alternating), the store is copied and the deletion with erase
runs in a fresh process: its wall time and peak resident memory, and each erasure step's time and
the peak over what the process held as the step began (Linux's high-water mark, reset at each
step), are reported. The copies are removed after each run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What a child process starts with (benchmarks/reference_check.py's too): the checkout named by
# its first argument first on the path, the store's path its second, and Linux's memory figures.
CHILD_PRELUDE = r"""
import json, sys, time
from pathlib import Path
repo, store_path = sys.argv[1:3]
sys.path.insert(0, repo)
import lightfoot_pipeline
assert lightfoot_pipeline.__file__.startswith(repo), f"{lightfoot_pipeline.__file__} is not of {repo}"
from lightfoot_pipeline.store.store import Store

def status_mb(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
"""

# The child: each erasure step timed with its memory.
CHILD = CHILD_PRELUDE + r"""
doc = sys.argv[3]
import lightfoot_pipeline.operations.erase as erase
from lightfoot_pipeline.ingest.extraction.cache import ExtractionCache

steps, peak = [], [0.0]  # the process's peak: the largest high-water mark seen before each reset
def timed(name, fn):
    def run(*args, **kwargs):
        held = status_mb("VmRSS")
        peak[0] = max(peak[0], status_mb("VmHWM"))
        Path("/proc/self/clear_refs").write_text("5")
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            steps.append({"step": name, "seconds": round(time.perf_counter() - t0, 2), "held_mb": round(held),
                          "peak_growth_mb": round(status_mb("VmHWM") - held)})
    return run

for name in ("live_vector_keys", "live_vector_texts", "purge_vector_caches", "erase_from_snapshots",
             "cleanup_vector_history", "mark_erased"):
    if hasattr(erase, name):
        setattr(erase, name, timed(name, getattr(erase, name)))
ExtractionCache.purge_except = timed("extraction_cache_purge", ExtractionCache.purge_except)
Store.vacuum = timed("vacuum", Store.vacuum)
from lightfoot_pipeline.operations import delete
t0 = time.perf_counter()
report = delete(Store(store_path), [doc], erase=True)
wall = time.perf_counter() - t0
print(json.dumps({"doc": doc, "deleted": len(report.deleted) if hasattr(report, "deleted") else None,
                  "wall_s": round(wall, 2), "peak_rss_mb": round(max(peak[0], status_mb("VmHWM"))), "steps": steps}))
"""


def checkout_arguments(description: str, runs_what: str) -> argparse.ArgumentParser:
    """The arguments of a benchmark of one or two checkouts on a built store (this one's and
    benchmarks/reference_check.py's): ``--built``, ``--repo`` (repeatable) and ``--json``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--built", required=True, help="a store kept by benchmarks/scale.py --keep")
    parser.add_argument("--repo", action="append", help=f"a checkout whose code runs {runs_what} (repeatable)")
    parser.add_argument("--json", dest="json_out")
    return parser


def checkouts(args: argparse.Namespace) -> list[str]:
    """The checkouts ``--repo`` names, resolved (this one when none)."""
    return [str(Path(r).resolve()) for r in (args.repo or [str(REPO)])]


def run_child(child: str, repo: str, *argv: str, what: str) -> dict:
    """A child program run with ``repo``'s code (its arguments: the checkout, then ``argv``): the
    JSON object of its last line, with the checkout as ``repo``."""
    out = subprocess.run([sys.executable, "-c", child, repo, *argv], capture_output=True, text=True, cwd=repo)
    if out.returncode != 0:
        raise RuntimeError(f"{what} with {repo} failed:\n{out.stderr[-3000:]}")
    return {"repo": repo, **json.loads(out.stdout.strip().splitlines()[-1])}


def write_report(args: argparse.Namespace, runs: list[dict], repos: list[str], keys: tuple[str, ...]) -> dict:
    """The runs of one or two checkouts on a built store, written to ``--json`` if given; with two,
    each of ``keys`` summed over the second's runs against the first's."""
    report = {"built": args.built, "runs": runs, "cpus": os.cpu_count(),
              "load_average_1m": round(os.getloadavg()[0], 2)}
    if len(repos) == 2:
        by = {r: [x for x in runs if x["repo"] == r] for r in repos}
        report["ratios_second_over_first"] = {
            key: round(sum(x[key] for x in by[repos[1]]) / sum(x[key] for x in by[repos[0]]), 3) for key in keys}
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n")
    return report


def doc_ids(store: Path, count: int) -> list[str]:
    sys.path.insert(0, str(REPO))
    from lightfoot_pipeline.store.store import Store

    s = Store(str(store))
    ids = sorted(s.read_columns("documents", s.manifest(), ["doc_id"]).get_column("doc_id").to_list())
    step = max(1, len(ids) // (count + 1))
    return ids[step::step][:count]


def main() -> None:
    parser = checkout_arguments(__doc__.splitlines()[0], "the erasure")
    parser.add_argument("--docs", type=int, default=2)
    args = parser.parse_args()
    repos = checkouts(args)
    runs = []
    for doc in doc_ids(Path(args.built), args.docs):
        for repo in repos:
            folder = Path(tempfile.mkdtemp(prefix="erase-memory-", dir=Path(args.built).parent))
            try:
                copy = folder / "store"
                shutil.copytree(args.built, copy, symlinks=True)
                row = run_child(CHILD, repo, str(copy), doc, what=f"the erasure of {doc}")
                runs.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "steps"}), flush=True)
                for step in row["steps"]:
                    print("   ", json.dumps(step), flush=True)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    write_report(args, runs, repos, ("wall_s", "peak_rss_mb"))


if __name__ == "__main__":
    main()
