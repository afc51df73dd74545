"""Memory of a query service holding the views of eight reader sets, and its queries through them.

    python benchmarks/views_memory.py [--passages 100000] [--work DIR] [--queries 200]
        [--memory-limit MIB ...] [--json OUT.json]

The synthetic corpus of the scale benchmark (benchmarks/synthetic.py) at ``--passages``, built with
the hashing embedder at 384 dimensions (or the store under ``--work`` reused as it is), readers from
a seeded rule over eight reader sets (public, and each of the seven non-empty sets of three
groups), its snapshot exported. A :class:`QueryService` expecting eight principals, one per set
of groups (none; each of the three; each pair; all three, who reads every document and is served
the snapshot itself), loads the snapshot and builds their seven views as ``lightfoot serve``
does with a tokens file; then ``--queries`` questions of the corpus, each through the next
principal's view in turn, and as many through the whole snapshot (the operator's).

The figures: the process's resident memory (Linux VmRSS, and its anonymous and mapped-file
parts) before the service, with its views built, and after the queries; the time the views took;
the views' passages and facts; query p50 through the views and through the whole snapshot, and
their ratio; the load average. A view's tables and graph are files without a name
(permissions/views.py), so their pages count as mapped-file pages, which the kernel can reclaim.
With ``--memory-limit``, the service runs again inside a memory cgroup of each size, as a pod's
container does (benchmarks/memory_limit.py), the snapshot's files evicted from the page cache
first: the cgroup's charged peak, how often it hit the limit, and whether it was killed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency import resident_mb, resident_split_mb, synthetic_questions, synthetic_store, write_result

from lightfoot_pipeline import operations
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL as OPERATOR
from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.service.queries import QueryService
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import latest_snapshot
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.store import Store

GROUPS = ("a", "b", "c")
GROUP_SETS = [(), *(tuple(c) for k in (1, 2, 3) for c in combinations(GROUPS, k))]
READER_SETS = [("public",), *GROUP_SETS[1:]]
PRINCIPALS = [Principal(f"reader-{'-'.join(g) or 'public'}", g) for g in GROUP_SETS]


def prepare(store: Store, passages: int, seed: int = 0) -> dict[str, dict]:
    """The synthetic store with readers from the eight sets, its snapshot exported (once); its
    extraction records."""
    records = synthetic_store(store, passages, seed)
    published = latest_snapshot(store)
    if published is not None and published.counts.get("reader_sets") == len(READER_SETS):
        return records  # readers set and exported by an earlier run
    rng = random.Random(seed)
    operations.set_readers(store, {d: rng.choice(READER_SETS) for d in sorted(live_doc_ids(store))},
                           reason="benchmark: eight reader sets")
    export_snapshot(store, HashingEmbedder(dim=384))
    return records


def memory() -> dict:
    return {"rss_mb": round(resident_mb()), **resident_split_mb()}


def measure(store: Store, questions: list[str], n_queries: int) -> dict:
    before = memory()
    service = QueryService(store, HashingEmbedder(dim=384), charge_ledger=False)
    service.expect(lambda: PRINCIPALS)
    started = time.perf_counter()
    try:
        assert service.refresh()
        built_s = time.perf_counter() - started
        after = memory()
        views = {}
        for principal in PRINCIPALS:
            served = service.current(principal)
            views[principal.name] = {"whole": served.view.whole, "passages": served.snapshot.passages.height,
                                     "facts": served.snapshot.facts.height,
                                     "file_mb": round(served.view.file_bytes / 2**20, 1)}
        view_files_mb = service.status()["views"]["file_mb"]
        through_views, through_whole = [], []
        for i in range(n_queries):
            question = questions[i % len(questions)]
            for principal, times in ((PRINCIPALS[i % len(PRINCIPALS)], through_views), (OPERATOR, through_whole)):
                started = time.perf_counter()
                served = service.current(principal)  # what a request pays: its view, found by its reader set
                served.retriever.retrieve(question, rerank=False)
                times.append((time.perf_counter() - started) * 1000.0)
        after_queries = memory()
    finally:
        service.close()
    p50 = {"views": round(float(np.percentile(through_views, 50)), 2),
           "whole": round(float(np.percentile(through_whole, 50)), 2)} if n_queries else {}
    return {"resident_mb_before": before["rss_mb"], "resident_mb_with_views": after["rss_mb"],
            "memory_before": before, "memory_with_views": after, "memory_after_queries": after_queries,
            "load_and_views_s": round(built_s, 1), "views": views, "queries": n_queries, "query_p50_ms": p50,
            "view_files_mb": view_files_mb,
            "query_p50_ratio": round(p50["views"] / p50["whole"], 2) if p50 else None,
            "load_average_1m": round(os.getloadavg()[0], 2)}


def service_child(work: Path, passages: int, n_queries: int, limit_mb: int | None) -> dict:
    """The service's figures from a fresh process (so that the export's memory does not count),
    inside a memory cgroup of ``limit_mb`` MiB when given, the snapshot's pages evicted first."""
    import subprocess

    store_uri = work / f"synthetic-{passages}-eight-sets"
    env = {**os.environ, "LIGHTFOOT_VIEWS_MEMORY_CHILD": "1"}
    arguments = [sys.executable, __file__, "--passages", str(passages), "--work", str(work), "--queries", str(n_queries)]
    if limit_mb is None:
        child = subprocess.run(arguments, env=env, check=True, capture_output=True, text=True)
        return json.loads(child.stdout)
    from memory_limit import evict, memory_limit

    evict(store_uri / "snapshots")
    with memory_limit(limit_mb) as group:
        child = subprocess.run(arguments, env=env, capture_output=True, text=True, preexec_fn=group.join)
        figures = json.loads(child.stdout) if child.returncode == 0 else {
            "failed": f"exit {child.returncode}: {child.stderr[-300:]}"}
        return {**figures, **group.figures()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200, help="questions asked through the views (and as many "
                                                                    "through the whole snapshot)")
    parser.add_argument("--memory-limit", type=int, action="append", default=[], metavar="MIB",
                        help="also run the service in a memory cgroup of this many MiB (repeatable; needs root)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--work", default=None, help="keep the store in this directory")
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="lightfoot-views-memory-"))
    try:
        store = Store(str(work / f"synthetic-{args.passages}-eight-sets"))
        records = prepare(store, args.passages)
        if os.environ.get("LIGHTFOOT_VIEWS_MEMORY_CHILD") == "1":
            print(json.dumps(measure(store, synthetic_questions(records, 200, seed=0), args.queries)))
            return 0
        figures = service_child(work, args.passages, args.queries, None)
        limited = [service_child(work, args.passages, args.queries, limit) for limit in args.memory_limit]
    finally:
        if not args.work and os.environ.get("LIGHTFOOT_VIEWS_MEMORY_CHILD") != "1":
            shutil.rmtree(work, ignore_errors=True)
    result = {"measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "passages": args.passages,
              "views_memory": figures, "under_memory_limits": limited}
    print(json.dumps(result, indent=2, sort_keys=True))
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
