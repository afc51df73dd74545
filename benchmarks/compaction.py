"""One-document deletions on a built store before and after ``compact``, on a copy of it.

    python benchmarks/compaction.py --store DIR [--singles 5] [--json OUT.json]

``--store`` is a built store (for example one ``benchmarks/scale.py --build-batch`` built, whose
buckets are made of up to eight files, vacuumed first). On a copy: ``--singles`` one-document
deletions timed in this process; then ``operations.compaction.compact`` (its time, the buckets it
rewrote) and ``vacuum``; then as many one-document deletions of other documents, timed. The
fingerprint before and after the compaction is compared, and the files per bucket counted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory import peak_rss_mb

from lightfoot_pipeline import operations
from lightfoot_pipeline.operations.compaction import compact
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store


def files_per_bucket(store: Store) -> float:
    manifest = store.manifest()
    counts = [n for name in ("forms", "aliases", "entities", "mentions", "facts", "fact_sources")
              for n in store.files_per_bucket(name, manifest).values()]
    return round(statistics.mean(counts), 2)


def singles(uri: str, doc_ids: list[str]) -> list[float]:
    times = []
    for doc_id in doc_ids:
        t0 = time.perf_counter()
        operations.delete(Store(uri), [doc_id])
        times.append(round(time.perf_counter() - t0, 3))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--singles", type=int, default=5)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args()
    result: dict = {"store": args.store, "load_start": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="lightfoot-compaction-") as scratch:
        uri = str(Path(scratch) / "store")
        shutil.copytree(args.store, uri)
        store = Store(uri)
        ids = sorted(store.read_column("documents", store.manifest(), "doc_id").to_list())
        chosen = random.Random(args.seed).sample(ids, 2 * args.singles)
        result["files_per_bucket_before"] = files_per_bucket(store)
        result["delete_one_before_s"] = singles(uri, chosen[: args.singles])
        digest = fingerprint(Store(uri)).digest
        t0 = time.perf_counter()
        result["buckets_compacted"] = compact(Store(uri))
        result["compact_s"] = round(time.perf_counter() - t0, 2)
        result["compact_peak_rss_mb"] = peak_rss_mb()
        operations.vacuum(Store(uri))
        result["fingerprint_unchanged"] = fingerprint(Store(uri)).digest == digest
        result["files_per_bucket_after"] = files_per_bucket(Store(uri))
        result["delete_one_after_s"] = singles(uri, chosen[args.singles:])
    before, after = (statistics.median(result[k]) for k in ("delete_one_before_s", "delete_one_after_s"))
    result["delete_one_median_before_s"], result["delete_one_median_after_s"] = before, after
    result["ratio_after_over_before"] = round(after / before, 3)
    result["load_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
