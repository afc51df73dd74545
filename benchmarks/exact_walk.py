"""The exact walk on a published snapshot: what preparing it holds, and what a walk takes.

    python benchmarks/exact_walk.py --store DIR [--walks 30] [--json OUT.json]

Loads the store's latest snapshot (its graph mapped from the snapshot's files), prepares the walk
operators a replica prepares at warm-up (retrieval/graph.py), then runs ``--walks`` exact walks
(power iteration over the whole graph) from five seed entities each, drawn by a fixed seed. The
figures: the anonymous memory the preparation added (Linux RssAnon; the mapped graph is file
pages and not counted), its time, the p50 and p95 of a walk, and a digest of every walk's top 10
passages, which two versions of the code must share to rank alike. Compare versions in one
sitting, alternating, on the same store: the times are of a shared machine.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency import resident_split_mb

from lightfoot_pipeline.retrieval.graph import walk_graph
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store.store import Store


def measure(store: Store, walks: int, seed: int = 0) -> dict:
    snapshot = load_snapshot(store)
    gc.collect()
    before = resident_split_mb()["rss_anon_mb"]
    graph = walk_graph(snapshot)
    started = time.perf_counter()
    graph.prepare()
    prepare_s = time.perf_counter() - started
    gc.collect()
    held = resident_split_mb()["rss_anon_mb"] - before
    rng = np.random.default_rng(seed)
    times, tops = [], hashlib.sha256()
    for _ in range(walks):
        seeds = np.zeros(graph.n_nodes)  # (N,)
        seeds[rng.choice(graph.n_entities, 5, replace=False)] = rng.random(5)
        started = time.perf_counter()
        result = graph.personalized_pagerank(seeds)
        times.append(time.perf_counter() - started)
        passages = graph.passage_scores(result.scores)  # (#passages,)
        tops.update(np.argsort(-passages, kind="stable")[:10].astype(np.int64).tobytes())
    return {"snapshot": snapshot.snapshot_id, "nodes": graph.n_nodes, "stored_entries": int(snapshot.adjacency.nnz),
            "prepare_s": round(prepare_s, 3), "prepared_anonymous_mb": round(held, 1), "walks": walks,
            "exact_walk_p50_ms": round(1000 * float(np.percentile(times, 50)), 1),
            "exact_walk_p95_ms": round(1000 * float(np.percentile(times, 95)), 1),
            "top10_digest": tops.hexdigest()[:16], "load_average_1m": round(os.getloadavg()[0], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="a store with a published snapshot")
    parser.add_argument("--walks", type=int, default=30)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = measure(Store(args.store), args.walks)
    print(json.dumps(result, indent=2, sort_keys=True))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
