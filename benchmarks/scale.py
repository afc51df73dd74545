"""Engine benchmark at MuSiQue scale: full build, 10% deletion, single-document deletion, memory.

    python benchmarks/scale.py [--passages 11402] [--dim 384] [--verify] [--json OUT.json]

Synthetic extractions (benchmarks/synthetic.py) replayed through the real pipeline into a
temporary local store, with the model-free hashing embedder so that the figures measure the
engine: name vectors, exact blocked links, components, synonym edges, facts, and the Delta and
LanceDB writes. Deletion times include the store commit (every changed bucket written). They are
measured in the process that built the store, which keeps the table versions it wrote in memory
(as a Dagster run or the query service does); ``delete_one_cold_s`` is one deletion through a new
``Store`` that first reads every table from disk, as a fresh ``lightfoot delete`` process does
(Python's own start-up and imports excluded).

Targets on a 2-core machine: 10% deletion <= 5 s and <= a tenth of the full build; one-document
deletion <= 0.5 s; peak RSS <= 4 GB.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import synthetic_documents_and_records  # noqa: E402

from lightfoot_pipeline import pipeline  # noqa: E402
from lightfoot_pipeline.models.embedder import HashingEmbedder  # noqa: E402
from lightfoot_pipeline.ingest.extraction import ReplayExtractor  # noqa: E402
from lightfoot_pipeline.settings import IndexSettings  # noqa: E402
from lightfoot_pipeline.store.store import Store  # noqa: E402


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run(passages: int, dim: int, seed: int, verify: bool, singles: int) -> dict:
    settings = IndexSettings()
    embedder = HashingEmbedder(dim=dim)
    t0 = time.perf_counter()
    documents, records = synthetic_documents_and_records(passages, seed)
    generate_s = time.perf_counter() - t0
    root = Path(tempfile.mkdtemp(prefix="lightfoot-scale-"))
    try:
        store = Store(str(root / "store"))
        t0 = time.perf_counter()
        built = pipeline.ingest(store, documents, ReplayExtractor(records), embedder, settings)
        full_build_s = time.perf_counter() - t0
        counts_full = pipeline.counts(store)

        rng = random.Random(seed)
        ids = [d.doc_id for d in documents]
        doomed = sorted(rng.sample(ids, round(len(ids) * 0.1)))
        t0 = time.perf_counter()
        deleted = pipeline.delete(store, doomed, settings)
        delete_10pct_s = time.perf_counter() - t0

        survivors = sorted(set(ids) - set(doomed))
        chosen = rng.sample(survivors, singles + 1)
        single_times = []
        for doc_id in chosen[:-1]:
            t0 = time.perf_counter()
            pipeline.delete(store, [doc_id], settings)
            single_times.append(time.perf_counter() - t0)
        # Cold: a new Store object has none of the tables in memory, as a fresh process would.
        t0 = time.perf_counter()
        pipeline.delete(Store(store.uri), [chosen[-1]], settings)
        delete_one_cold_s = time.perf_counter() - t0

        result = {
            "passages": passages,
            "dim": dim,
            "generate_s": round(generate_s, 3),
            "full_build_s": round(full_build_s, 3),
            "delete_10pct_s": round(delete_10pct_s, 3),
            "delete_10pct_ratio": round(delete_10pct_s / full_build_s, 4),
            "delete_one_s": round(statistics.median(single_times), 4),
            "delete_one_max_s": round(max(single_times), 4),
            "delete_one_cold_s": round(delete_one_cold_s, 4),
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "counts_full": counts_full,
            "delete_10pct_graph": deleted.graph.as_dict(),
            "build_graph": built.graph.as_dict(),
        }
        if verify:
            deleted_all = set(doomed) | set(deleted.deleted)
            remaining = {d for d in ids} - set(doomed)
            current_docs = set(store.read("documents").get_column("doc_id").to_list())
            fresh = Store(str(root / "fresh"))
            t0 = time.perf_counter()
            pipeline.ingest(fresh, [d for d in documents if d.doc_id in current_docs], ReplayExtractor(records),
                            embedder, settings)
            result["fresh_build_s"] = round(time.perf_counter() - t0, 3)
            result["fingerprint_equal"] = pipeline.fingerprint(store).digest == pipeline.fingerprint(fresh).digest
            result["verified_docs"] = len(current_docs)
            del deleted_all, remaining
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=11402)
    parser.add_argument("--dim", type=int, default=384, help="hashing-embedder dimensions (MiniLM has 384)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--singles", type=int, default=5, help="single-document deletions to time (median)")
    parser.add_argument("--verify", action="store_true", help="also build the survivors fresh and compare fingerprints")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args()
    result = run(args.passages, args.dim, args.seed, args.verify, args.singles)
    for key in ("passages", "full_build_s", "delete_10pct_s", "delete_10pct_ratio", "delete_one_s", "delete_one_max_s",
                "delete_one_cold_s", "peak_rss_mb", "fresh_build_s", "fingerprint_equal"):
        if key in result:
            print(f"{key:<20} {result[key]}")
    print("counts:", json.dumps(result["counts_full"]))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
