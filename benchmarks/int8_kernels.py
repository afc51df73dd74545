"""The int8 product's two kernels on a published snapshot: query time with each, and the choice.

    python benchmarks/int8_kernels.py --store DIR [--queries 60] [--json OUT.json]

Loads the store's latest snapshot (it must carry fact codes: snapshot/codes.py) and a retriever
over it, as a replica does, then asks ``--queries`` questions built from the snapshot's own facts
("<subject> <predicate> <object>?") with each kernel in turn, alternating question by question
(retrieval/seeding.py: ``int_mm``, torch's int8 product, and ``float32``, the codes converted a
block at a time), so that both meet the same machine. The figures: the p50 of a whole query and
of its fact seeding with each kernel and their ratio, the kernel this process's measurement
chose, and whether both ranked every question's top 10 passages and facts alike (they must: both
sum the same integers). Nothing else should run beside it; the load average is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency import resident_split_mb, write_result

from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.retrieval import seeding
from lightfoot_pipeline.retrieval.retrieve import Retriever
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store.store import Store


def measure(store: Store, n_queries: int, seed: int = 0) -> dict:
    snapshot = load_snapshot(store)
    if snapshot.fact_codes is None or snapshot.fact_index is None:
        raise SystemExit("the snapshot has no fact codes or no fact index: nothing to compare")
    columns = int(snapshot.fact_codes.codes.shape[1])
    chosen = seeding.int8_kernel(columns)
    retriever = Retriever(snapshot, HashingEmbedder(dim=snapshot.passage_vectors.shape[1]))
    retriever.warm_up()
    scorer = retriever._fact_scores  # noqa: SLF001  (the coded scorer whose kernel is switched)
    coded = scorer._codes  # noqa: SLF001
    rng = np.random.default_rng(seed)
    rows = rng.choice(snapshot.facts.height, min(n_queries, snapshot.facts.height), replace=False)
    questions = [f"{s} {p} {o}?" for s, p, o in snapshot.facts.select("subject", "predicate", "object")[rows].iter_rows()]
    query_ms: dict[str, list[float]] = {kernel: [] for kernel in seeding.INT8_KERNELS}
    seeding_ms: dict[str, list[float]] = {kernel: [] for kernel in seeding.INT8_KERNELS}
    same = True
    for question in questions:
        ranked = {}
        for kernel in seeding.INT8_KERNELS:
            coded.kernel = kernel
            started = time.perf_counter()
            result = retriever.retrieve(question, rerank=False)
            query_ms[kernel].append(1000 * (time.perf_counter() - started))
            vector = retriever.question_vector(question)
            started = time.perf_counter()
            retriever.similar_facts(vector, retriever.settings.top_facts)
            seeding_ms[kernel].append(1000 * (time.perf_counter() - started))
            ranked[kernel] = ([p.chunk_id for p in result.passages], [f.fact_id for f in result.seed_facts])
        same = same and ranked["int_mm"] == ranked["float32"]
    p50 = {kernel: round(float(np.percentile(query_ms[kernel], 50)), 2) for kernel in seeding.INT8_KERNELS}
    seed_p50 = {kernel: round(float(np.percentile(seeding_ms[kernel], 50)), 2) for kernel in seeding.INT8_KERNELS}
    return {"snapshot": snapshot.snapshot_id, "facts": snapshot.facts.height, "code_columns": columns,
            "queries": len(questions), "chosen": chosen, "query_p50_ms": p50, "fact_seeding_p50_ms": seed_p50,
            "query_p50_ratio_int_mm_to_float32": round(p50["int_mm"] / p50["float32"], 2),
            "fact_seeding_p50_ratio_int_mm_to_float32": round(seed_p50["int_mm"] / seed_p50["float32"], 2),
            "same_top_10": same, **resident_split_mb(), "load_average_1m": round(os.getloadavg()[0], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = measure(Store(args.store), args.queries)
    print(json.dumps(result, indent=2, sort_keys=True))
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
