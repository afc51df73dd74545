"""Per-stage figures for the deployment scale plan (docs/deployment.md), on synthetic extractions.

    python benchmarks/deployment.py --passages 10000 [--dim 384] [--json OUT.json]

Builds a temporary local store from synthetic extractions (benchmarks/synthetic.py) with the
model-free hashing embedder at MiniLM's 384 dimensions, then measures what the scale plan needs:

- build: wall time, table counts, extraction calls (one per passage by design; replayed here);
- name links: the blocked exact pairwise products, timed for the largest name type recomputed
  from scratch, and for an incremental add of 1% new names against the rest, with the number of
  pair comparisons, so that the cost per 10^9 comparisons extrapolates to other sizes;
- deletion of one document: wall time and how many entities it recomputed;
- the serving snapshot: export time, bytes on disk by file, load time;
- query latency: retrieval (embed, seed, personalized PageRank, top passages) with no reranker
  and no answer model, median and 95th percentile over questions made from stored facts.

Every figure is measured on this machine; the scale plan labels what it extrapolates.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory import peak_rss_mb
from synthetic import synthetic_documents_and_records

from lightfoot_pipeline import operations
from lightfoot_pipeline.index.links import LinkRule, links_between, links_within
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.retrieval.retrieve import Retriever
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store.fingerprint import counts
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import ALIASES, FACTS
from lightfoot_pipeline.store.vectors import VectorCache


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - started


def link_figures(store: Store, embedder: HashingEmbedder, settings: IndexSettings) -> dict:
    """Blocked exact links for the largest name type: from scratch, and an incremental 1% add."""
    aliases = store.read(ALIASES.name, columns=["name", "type"])
    by_type = aliases.group_by("type").len().sort("len", descending=True)
    type_, n = by_type.row(0)
    names = sorted(aliases.filter(pl.col("type") == type_).get_column("name").to_list())
    vectors = VectorCache(store, "name", embedder).vectors(names)
    rule = LinkRule.of(settings).exhaustive()
    links, full_s = timed(links_within, type_, names, vectors, rule)
    rng = random.Random(0)
    new_index = sorted(rng.sample(range(len(names)), max(1, len(names) // 100)))
    new_set = set(new_index)
    old_index = [i for i in range(len(names)) if i not in new_set]
    _, add_s = timed(links_between, type_, [names[i] for i in new_index], vectors[new_index],
                     [names[i] for i in old_index], vectors[old_index], rule)
    full_pairs = n * (n - 1) / 2
    add_pairs = len(new_index) * (len(new_index) - 1) / 2 + len(new_index) * len(old_index)
    return {
        "names_by_type": dict(by_type.iter_rows()),
        "largest_type": type_,
        "largest_type_names": n,
        "links_in_largest_type": links.height,
        "full_recompute_s": round(full_s, 3),
        "full_recompute_pairs": int(full_pairs),
        "full_s_per_1e9_pairs": round(full_s / full_pairs * 1e9, 3),
        "add_1pct_names": len(new_index),
        "add_1pct_s": round(add_s, 3),
        "add_1pct_pairs": int(add_pairs),
        "add_s_per_1e9_pairs": round(add_s / add_pairs * 1e9, 3),
    }


def snapshot_figures(store: Store, embedder: HashingEmbedder) -> tuple[dict, object]:
    info, export_s = timed(export_snapshot, store, embedder)
    folder = Path(info.uri.removeprefix("file://"))
    sizes = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    snapshot, load_s = timed(load_snapshot, store, info.snapshot_id)
    return {
        "export_s": round(export_s, 3),
        "load_s": round(load_s, 3),
        "bytes_total": sum(sizes.values()),
        "bytes_by_file": sizes,
        "counts": {k: v for k, v in info.counts.items() if isinstance(v, int)},
    }, snapshot


def query_figures(store: Store, snapshot, embedder: HashingEmbedder, n_questions: int) -> dict:
    retriever = Retriever(snapshot, embedder)
    facts = store.read(FACTS.name, columns=["subject", "predicate", "object"])
    rng = random.Random(1)
    rows = [facts.row(i) for i in rng.sample(range(facts.height), min(n_questions, facts.height))]
    questions = [f"What {p} {o}?" if i % 2 else f"Who or what did {s} {p}?" for i, (s, p, o) in enumerate(rows)]
    retriever.retrieve(questions[0], top_k=10, rerank=False)  # warm caches once
    totals, laps = [], {}
    for question in questions:
        result, seconds = timed(retriever.retrieve, question, top_k=10, rerank=False)
        totals.append(seconds * 1000.0)
        for name, ms in (result.timings_ms or {}).items():
            laps.setdefault(name, []).append(ms)
    ordered = sorted(totals)
    return {
        "questions": len(questions),
        "median_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
        "median_ms_by_step": {k: round(statistics.median(v), 2) for k, v in laps.items()},
    }


def run(passages: int, dim: int, seed: int, questions: int) -> dict:
    settings = IndexSettings()
    embedder = HashingEmbedder(dim=dim)
    documents, records = synthetic_documents_and_records(passages, seed)
    root = Path(tempfile.mkdtemp(prefix="lightfoot-deployment-"))
    try:
        store = Store(str(root / "store"))
        built, build_s = timed(operations.ingest, store, documents, ReplayExtractor(records), embedder, settings)
        table_counts = counts(store)
        links = link_figures(store, embedder, settings)
        rng = random.Random(seed)
        singles = []
        for doc_id in rng.sample([d.doc_id for d in documents], 3):
            report, seconds = timed(operations.delete, store, [doc_id], settings)
            singles.append((seconds, report.graph.entities_recomputed, report.graph.names_removed))
        snapshot, loaded = snapshot_figures(store, embedder)
        queries = query_figures(store, loaded, embedder, questions)
        return {
            "passages": passages,
            "dim": dim,
            "build": {
                "seconds": round(build_s, 3),
                "extraction_calls_needed": built.passages,
                "names_added": built.graph.names_added,
                "links_added": built.graph.links_added,
                "counts": table_counts,
            },
            "links": links,
            "delete_one": {
                "median_s": round(statistics.median(s for s, _, _ in singles), 3),
                "entities_recomputed": [e for _, e, _ in singles],
                "names_removed": [r for _, _, r in singles],
            },
            "snapshot": snapshot,
            "query": queries,
            "peak_rss_mb": peak_rss_mb(),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=10000)
    parser.add_argument("--dim", type=int, default=384, help="hashing-embedder dimensions (MiniLM has 384)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args()
    result = run(args.passages, args.dim, args.seed, args.questions)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
