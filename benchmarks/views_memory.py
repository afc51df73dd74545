"""Resident memory of a query service holding the views of eight reader sets.

    python benchmarks/views_memory.py [--passages 100000] [--work DIR] [--json OUT.json]

The synthetic corpus of the scale benchmark (benchmarks/synthetic.py) at ``--passages``, built with
the hashing embedder at 384 dimensions (or the store under ``--work`` reused as it is), readers from
a seeded rule over eight reader sets (public, and each of the seven non-empty sets of three
groups), its snapshot exported. A :class:`QueryService` expecting eight principals, one per set
of groups (none; each of the three; each pair; all three, who reads every document and is served
the snapshot itself), loads the snapshot and builds their seven views as ``lightfoot serve``
does with a tokens file. The figures: the process's resident memory (Linux VmRSS) before the
service and with its views built, the time that took, the views' passages and facts, and the
load average.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency import resident_mb, synthetic_store

from lightfoot_pipeline import operations
from lightfoot_pipeline.models.embedder import HashingEmbedder
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


def prepare(store: Store, passages: int, seed: int = 0) -> None:
    """The synthetic store with readers from the eight sets, its snapshot exported (once)."""
    synthetic_store(store, passages, seed)
    published = latest_snapshot(store)
    if published is not None and published.counts.get("reader_sets") == len(READER_SETS):
        return  # readers set and exported by an earlier run
    rng = random.Random(seed)
    operations.set_readers(store, {d: rng.choice(READER_SETS) for d in sorted(live_doc_ids(store))},
                           reason="benchmark: eight reader sets")
    export_snapshot(store, HashingEmbedder(dim=384))


def measure(store: Store) -> dict:
    before = resident_mb()
    service = QueryService(store, HashingEmbedder(dim=384), charge_ledger=False)
    service.expect(lambda: PRINCIPALS)
    started = time.perf_counter()
    try:
        assert service.refresh()
        built_s = time.perf_counter() - started
        after = resident_mb()
        views = {}
        for principal in PRINCIPALS:
            served = service.current(principal)
            views[principal.name] = {"whole": served.view.whole, "passages": served.snapshot.passages.height,
                                     "facts": served.snapshot.facts.height}
    finally:
        service.close()
    return {"resident_mb_before": round(before), "resident_mb_with_views": round(after),
            "load_and_views_s": round(built_s, 1), "views": views,
            "load_average_1m": round(os.getloadavg()[0], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--json", default=None)
    parser.add_argument("--work", default=None, help="keep the store in this directory")
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="lightfoot-views-memory-"))
    try:
        store = Store(str(work / f"synthetic-{args.passages}-eight-sets"))
        prepare(store, args.passages)
        # the service in a fresh process, so that the export's memory does not count
        if os.environ.get("LIGHTFOOT_VIEWS_MEMORY_CHILD") != "1":
            import subprocess

            env = {**os.environ, "LIGHTFOOT_VIEWS_MEMORY_CHILD": "1"}
            child = subprocess.run([sys.executable, __file__, "--passages", str(args.passages), "--work", str(work)],
                                   env=env, check=True, capture_output=True, text=True)
            figures = json.loads(child.stdout)
        else:
            print(json.dumps(measure(store)))
            return 0
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    result = {"measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "passages": args.passages,
              "views_memory": figures}
    print(json.dumps(result, indent=2, sort_keys=True))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
