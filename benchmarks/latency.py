"""Retrieval latency without the reranker, at sample scale and at MuSiQue scale.

    python benchmarks/latency.py [--queries 200] [--json OUT.json] [--work DIR]
                                 [--sample-store URI] [--skip-sample] [--skip-musique]

- **sample**: the bundled MuSiQue sample (1,890 passages) with its recorded extractions and the
  packaged all-MiniLM-L6-v2; the queries are its dev questions, repeated. The latency includes
  embedding the question with MiniLM.
- **musique_scale**: the synthetic corpus of the scale benchmark at MuSiQue's 11,402 passages
  (benchmarks/synthetic.py), built with the model-free hashing embedder at 384 dimensions, the
  size of MiniLM's vectors, so that the passage and fact similarity products cost what they cost
  with the real model; the queries are questions made from the corpus's facts. Query embedding
  is the hashing embedder's (well under a millisecond), not a network's.

A query's latency is the wall-clock time of ``Retriever.retrieve``: embed the question, score the
passages and facts, seed and run Personalized PageRank to its tolerance, rank the candidates.
Snapshots are loaded once beforehand, as the query service does. ``--json`` writes
``{"sample": {"p50_ms", "p95_ms", …}, "musique_scale": {"p50_ms", "p95_ms", …}}``.

Target on the 2-core machine: p50 at most 30 ms at MuSiQue scale.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import synthetic_documents_and_records  # noqa: E402

from lightfoot_pipeline import pipeline  # noqa: E402
from lightfoot_pipeline.ingest.dataset import bundled_sample_dir, load_questions  # noqa: E402
from lightfoot_pipeline.models.embedder import HashingEmbedder, SentenceTransformerEmbedder  # noqa: E402
from lightfoot_pipeline.evaluation.eval_run import ensure_dataset_indexed  # noqa: E402
from lightfoot_pipeline.ingest.extraction import ReplayExtractor  # noqa: E402
from lightfoot_pipeline.serving.retrieve import Retriever, one_thread_per_query  # noqa: E402
from lightfoot_pipeline.serving.snapshot import load_snapshot  # noqa: E402
from lightfoot_pipeline.serving.export import export_snapshot  # noqa: E402
from lightfoot_pipeline.store.store import Store  # noqa: E402

MUSIQUE_PASSAGES = 11402
WARM_UP = 5


def measure(retriever: Retriever, questions: list[str], n_queries: int) -> dict:
    """Latency percentiles of n_queries retrievals cycling through the questions (after a warm-up)."""
    for question in questions[:WARM_UP]:
        retriever.retrieve(question, rerank=False)
    totals, cpu, parts, iterations = [], [], {"embed": [], "seed": [], "pagerank": []}, []
    load_before = os.getloadavg()[0]
    for i in range(n_queries):
        question = questions[i % len(questions)]
        started, cpu_started = time.perf_counter(), time.thread_time()
        result = retriever.retrieve(question, rerank=False)
        totals.append((time.perf_counter() - started) * 1000.0)
        cpu.append((time.thread_time() - cpu_started) * 1000.0)
        for name in parts:
            parts[name].append(result.timings_ms[name])
        iterations.append(result.pagerank["iterations"])
    snap = retriever.snapshot
    return {
        "p50_ms": round(float(np.percentile(totals, 50)), 2),
        "p95_ms": round(float(np.percentile(totals, 95)), 2),
        # CPU time of the querying thread; the larger products run half on a second thread
        # (see rowsplit.py), whose time this leaves out.
        "cpu_p50_ms": round(float(np.percentile(cpu, 50)), 2),
        "cpu_p95_ms": round(float(np.percentile(cpu, 95)), 2),
        "n_queries": n_queries,
        "p50_breakdown_ms": {name: round(float(np.median(values)), 2) for name, values in parts.items()},
        "pagerank_iterations_p50": float(np.median(iterations)),
        "tolerance": retriever.settings.tolerance,
        "embedder": retriever.embedder.model_id,
        "passages": snap.passages.height,
        "entities": snap.entities.height,
        "facts": snap.facts.height,
        "graph_entries": int(snap.adjacency.nnz),
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }


def sample_scale(store: Store, n_queries: int) -> dict:
    embedder = SentenceTransformerEmbedder()
    built = ensure_dataset_indexed(store, bundled_sample_dir(), embedder)
    if built["built"]:
        print(f"  built the sample store in {built['seconds']}s", file=sys.stderr)
    retriever = serving_retriever(store, embedder)
    questions = [q.question for q in load_questions(bundled_sample_dir() / "questions-dev.jsonl")]
    return measure(retriever, questions, n_queries)


def serving_retriever(store: Store, embedder) -> Retriever:
    """A retriever over a freshly exported snapshot, warmed up and threaded as the query service runs."""
    started = time.perf_counter()
    info = export_snapshot(store, embedder)
    print(f"  snapshot {info.snapshot_id} in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    retriever = Retriever(load_snapshot(store, info.snapshot_id), embedder)
    one_thread_per_query()
    retriever.warm_up()
    return retriever


def synthetic_questions(records: dict[str, dict], n: int, seed: int) -> list[str]:
    """Questions built from the corpus's facts, worded like MuSiQue's single hops."""
    rng = random.Random(seed)
    facts = [f for r in records.values() for f in r["facts"]]
    picked = rng.sample(facts, min(n, len(facts)))
    forms = ("Who {p} {o}?", "What {p} {o}?", "{s} {p} what?")
    return [rng.choice(forms).format(s=s, p=p, o=o) for s, p, o, *_ in picked]


def musique_scale(store: Store, n_queries: int, seed: int = 0) -> dict:
    embedder = HashingEmbedder(dim=384)
    documents, records = synthetic_documents_and_records(MUSIQUE_PASSAGES, seed)
    if not store.exists():
        started = time.perf_counter()
        pipeline.ingest(store, documents, ReplayExtractor(records), embedder)
        print(f"  built the synthetic store in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return measure(serving_retriever(store, embedder), synthetic_questions(records, 200, seed), n_queries)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200, help="timed queries per scale (default 200)")
    parser.add_argument("--json", default=None, help="write the result here")
    parser.add_argument("--work", default=None, help="keep the stores in this directory (reused on the next run)")
    parser.add_argument("--sample-store", default=None, help="a store that holds (or will hold) the sample")
    parser.add_argument("--skip-sample", action="store_true")
    parser.add_argument("--skip-musique", action="store_true")
    args = parser.parse_args()
    if args.queries < 1:
        parser.error("--queries must be at least 1")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="lightfoot-latency-"))
    result: dict = {}
    try:
        if not args.skip_sample:
            print("sample scale (bundled MuSiQue sample, all-MiniLM-L6-v2)", file=sys.stderr)
            result["sample"] = sample_scale(Store(args.sample_store or str(work / "sample")), args.queries)
        if not args.skip_musique:
            print(f"MuSiQue scale (synthetic, {MUSIQUE_PASSAGES:,} passages, hashing embedder)", file=sys.stderr)
            result["musique_scale"] = musique_scale(Store(str(work / "musique")), args.queries)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    for name, figures in result.items():
        print(f"{name:<14} p50 {figures['p50_ms']:7.2f} ms   p95 {figures['p95_ms']:7.2f} ms   "
              f"(CPU p50 {figures['cpu_p50_ms']:.2f} ms)   "
              f"({figures['passages']:,} passages, {figures['graph_entries']:,} graph entries, "
              f"{figures['pagerank_iterations_p50']:.0f} PageRank iterations; p50 parts {figures['p50_breakdown_ms']}; "
              f"load {figures['load_average_1m']})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
