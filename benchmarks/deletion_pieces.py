"""A 10% deletion of a built store, in one piece and in pieces, each in a fresh process on a copy.

    python benchmarks/deletion_pieces.py --store DIR [--fraction 0.1] [--pieces 0,10000] [--json OUT.json]

``--store`` is a built store (``benchmarks/scale.py`` leaves one under its temporary folder while it
runs; vacuum a copy with ``lightfoot vacuum`` first so that every run reads the same files). For
each ``--pieces`` value (``LIGHTFOOT_DELETION_PIECE``; 0: the whole deletion in one piece) the store
is copied, the same seeded sample of documents is deleted with ``operations.delete`` in a fresh
process, and its wall time, CPU time, peak RSS and commits are recorded with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def child(store_uri: str, fraction: float, seed: int) -> dict:
    from memory import peak_rss_mb

    from lightfoot_pipeline import operations
    from lightfoot_pipeline.store.store import Store

    store = Store(store_uri)
    before = store.manifest().seq
    ids = sorted(store.read_column("documents", store.manifest(), "doc_id").to_list())
    doomed = random.Random(seed).sample(ids, round(len(ids) * fraction))
    t0, c0 = time.perf_counter(), time.process_time()
    report = operations.delete(store, doomed)
    return {"documents": len(doomed), "seconds": round(time.perf_counter() - t0, 2),
            "cpu_s": round(time.process_time() - c0, 2), "commits": store.manifest().seq - before,
            "peak_rss_mb": peak_rss_mb(), "entities_recomputed": report.graph.entities_recomputed}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--pieces", default="0,10000", help="LIGHTFOOT_DELETION_PIECE values (0: one piece)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args()
    result: dict = {"store": args.store, "fraction": args.fraction, "runs": []}
    with tempfile.TemporaryDirectory(prefix="lightfoot-pieces-") as scratch:
        for piece in (int(p) for p in args.pieces.split(",")):
            copy = Path(scratch) / "store"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(args.store, copy)
            env = {**os.environ, "LIGHTFOOT_DELETION_PIECE": str(piece or 10**9)}
            out = subprocess.run([sys.executable, __file__, "--child", str(copy), str(args.fraction), str(args.seed)],
                                 check=True, stdout=subprocess.PIPE, env=env)
            run = {"piece": piece, **json.loads(out.stdout.decode().strip().splitlines()[-1]),
                   "load_average": [round(x, 2) for x in os.getloadavg()]}
            print(json.dumps(run), flush=True)
            result["runs"].append(run)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
