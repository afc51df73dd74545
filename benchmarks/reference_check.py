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

import json

from erase_memory import CHILD_PRELUDE, checkout_arguments, checkouts, run_child, write_report

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
    parser = checkout_arguments(__doc__.splitlines()[0], "the check")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    repos = checkouts(args)
    runs = []
    for _ in range(args.runs):
        for repo in repos:
            runs.append(run_child(CHILD, repo, args.built, what="the check"))
            print(json.dumps(runs[-1]), flush=True)
    write_report(args, runs, repos, ("wall_s", "peak_growth_mb"))


if __name__ == "__main__":
    main()
