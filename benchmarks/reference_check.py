"""What the dangling-references check costs on a built store: wall time and peak memory.

    python benchmarks/reference_check.py --built DIR [--runs 2] [--repo CHECKOUT ...] [--json OUT.json]

The ``no_dangling_references`` check (index/references.py) runs on every ingestion and deletion
run in Dagster and reads the id columns of every table of the store. For each checkout named by
``--repo`` (default: this one; give two to compare versions, alternating ``--runs`` times), the
check runs in a fresh process on the store kept by ``benchmarks/scale.py --keep DIR`` (read only):
its wall time and the peak resident memory over what the process held before it (Linux's
high-water mark, reset as the check starts) are reported.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from erase_memory import CHILD_PRELUDE, repos_report

REPO = Path(__file__).resolve().parents[1]

CHILD = CHILD_PRELUDE + r"""
from lightfoot_pipeline.index.references import dangling_references

store = Store(store_path)
manifest = store.manifest()
held = status_mb("VmRSS")
Path("/proc/self/clear_refs").write_text("5")
t0 = time.perf_counter()
counts = dangling_references(store, manifest)
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": round(wall, 2), "held_mb": round(held), "peak_growth_mb": round(status_mb("VmHWM") - held),
                  "dangling": sum(counts.values())}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--built", required=True, help="a store kept by benchmarks/scale.py --keep")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--repo", action="append", help="a checkout whose code runs the check (repeatable)")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    repos = [str(Path(r).resolve()) for r in (args.repo or [str(REPO)])]
    runs = []
    for _ in range(args.runs):
        for repo in repos:
            out = subprocess.run([sys.executable, "-c", CHILD, repo, args.built], capture_output=True, text=True,
                                 cwd=repo)
            if out.returncode != 0:
                raise RuntimeError(f"the check with {repo} failed:\n{out.stderr[-3000:]}")
            runs.append({"repo": repo, **json.loads(out.stdout.strip().splitlines()[-1])})
            print(json.dumps(runs[-1]), flush=True)
    report = repos_report(args.built, runs, repos, ("wall_s", "peak_growth_mb"))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
