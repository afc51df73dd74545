"""Benchmark of the exactness check of a run's changes (operations/exactness.py) at corpus scale.

    python benchmarks/exactness_check.py [--passages 10000 100000] [--work DIR] [--json OUT.json]
    python benchmarks/exactness_check.py --store URI --documents DIR [--json OUT.json]
    python benchmarks/exactness_check.py --store URI --check RUN_ID [--repeat N] [--json OUT.json]

For each size, a store of N synthetic passages (benchmarks/synthetic.py, replayed through the real
pipeline with the hashing embedder, 384 dimensions, as scale.py builds it; kept under ``--work``
and reused by a later run with the same size, seed and buckets) is copied to a scratch folder,
and three runs are made on the copy, each in its own batch, each followed by the check of its
changes with the default bounds (operations/checks.py: what the Dagster check runs above its
full_limit):

1. ``ingest_1k``: 1,000 new documents;
2. ``delete_one``: one document deleted;
3. ``delete_10pct``: 10% of the documents deleted in one commit.

For each, ``run_s`` (the run itself) and ``check_s`` (the check, through a new ``Store`` object,
so nothing is read from this process's memory of the run), their ratio, what the check compared
(changed components and facts, how many were compared, the untouched samples, the names and
rows compared), whether it passed, and the process's peak RSS. ``full_build_s`` is what the
whole-store comparison costs (a rebuild is a full build). Progress goes to stderr; the JSON file
is written after every step.

With ``--store`` the three runs are made in place on a store built elsewhere (``scale.py --keep``
keeps one), the documents of ``--documents`` ingested, and 10% of its live documents deleted.
With ``--store`` and ``--check RUN_ID`` no run is made: the check of a run recorded on the store
is timed ``--repeat`` times (run from two checkouts in turn, it compares two versions of the check
on one store; ``run_s`` is then not known).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory import peak_rss_mb
from synthetic import synthetic_documents_and_records

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.operations.exactness import compare_changes
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.batches import Batch, writing_batch
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.fingerprint import counts
from lightfoot_pipeline.store.store import Store

INGEST_DOCS = 1_000


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def base_store(work: Path, passages: int, dim: int, buckets: int, seed: int, documents, records) -> tuple[Path, dict]:
    """The built store of ``passages`` documents under ``work`` (built now unless there), and its build figures."""
    root = work / f"store-{passages}-d{dim}-b{buckets}-s{seed}"
    figures = root / "build.json"
    if figures.exists():
        say(f"reusing {root}")
        return root / "store", json.loads(figures.read_text())
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    store = Store(str(root / "store"), n_buckets=buckets)
    t0 = time.perf_counter()
    with writing_batch(Batch("bench-build", "run-build")):
        operations.ingest(store, documents, ReplayExtractor(records), HashingEmbedder(dim=dim), IndexSettings())
    built = {"full_build_s": round(time.perf_counter() - t0, 3), "counts": counts(store)}
    figures.write_text(json.dumps(built))
    say(f"built {passages} passages in {built['full_build_s']} s")
    return root / "store", built


def checked(store_uri: str, run_id: str, run_s: float | None) -> dict:
    """The check of a run's changes, timed on a new Store object."""
    t0, c0 = time.perf_counter(), time.process_time()
    found = compare_changes(Store(store_uri), IndexSettings(), run_id)
    check_s = time.perf_counter() - t0
    return {
        "run_s": None if run_s is None else round(run_s, 3), "check_s": round(check_s, 3), "check_cpu_s": round(time.process_time() - c0, 3),
        "check_to_run": None if run_s is None else round(check_s / run_s, 3), "passed": found.passed, "summary": found.summary(),
        "run_documents": found.run_documents, "changed_names": found.changed_names,
        "changed_components": found.changed_components, "compared_changed": found.compared_changed,
        "changed_facts": found.changed_facts, "compared_facts": found.compared_facts, "sampled": found.sampled,
        "untouched_components": found.untouched_compared, "untouched_facts": found.untouched_facts,
        "names_compared": found.names_compared, "rows_compared": found.rows, "peak_rss_mb": peak_rss_mb(),
    }


def run(passages: int, dim: int, buckets: int, seed: int, work: Path, result: dict, save) -> None:
    every, records = synthetic_documents_and_records(passages + INGEST_DOCS, seed)
    documents, later = every[:passages], every[passages:]
    base, built = base_store(work, passages, dim, buckets, seed, documents, records)
    result.update(built)
    save()
    scratch = Path(tempfile.mkdtemp(prefix="lightfoot-exactness-"))
    try:
        uri = str(scratch / "store")
        shutil.copytree(base, uri)
        checked_runs(uri, later, records, dim, seed, result, save)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def checked_runs(uri: str, later, records, dim: int, seed: int, result: dict, save) -> None:
    """The three runs of the module docstring on the store at ``uri``, each followed by its check."""
    settings, embedder = IndexSettings(), HashingEmbedder(dim=dim)
    t0 = time.perf_counter()
    with writing_batch(Batch("bench-ingest", "run-ingest-1k")):
        operations.ingest(Store(uri), later, ReplayExtractor(records), embedder, settings)
    result["ingest_1k"] = checked(uri, "run-ingest-1k", time.perf_counter() - t0)
    save()
    say(f"ingest_1k: {result['ingest_1k']}")

    rng = random.Random(seed)
    ids = sorted(live_doc_ids(Store(uri)))
    one = rng.choice(ids)
    t0 = time.perf_counter()
    with writing_batch(Batch("bench-delete-one", "run-delete-one")):
        operations.delete(Store(uri), [one], settings)
    result["delete_one"] = checked(uri, "run-delete-one", time.perf_counter() - t0)
    save()
    say(f"delete_one: {result['delete_one']}")

    doomed = sorted(rng.sample([i for i in ids if i != one], round(len(ids) * 0.1)))
    t0 = time.perf_counter()
    with writing_batch(Batch("bench-delete-tenth", "run-delete-10pct")):
        operations.delete(Store(uri), doomed, settings)
    result["delete_10pct"] = checked(uri, "run-delete-10pct", time.perf_counter() - t0)
    save()
    say(f"delete_10pct: {result['delete_10pct']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dim", type=int, default=384, help="hashing-embedder dimensions (MiniLM has 384)")
    parser.add_argument("--buckets", type=int, default=256, help="hash buckets of every table")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default=None, help="where built stores are kept for a later run (default: a "
                        "temporary folder, removed at the end)")
    parser.add_argument("--store", default=None, metavar="URI",
                        help="run the three runs and their checks on this built store, in place (no copy: a store "
                             "of 1M passages is tens of GB), ingesting the documents of --documents")
    parser.add_argument("--documents", type=Path, default=None, metavar="DIR",
                        help="with --store: a dataset folder (synthetic.py write_documents) of documents the store "
                             "does not hold")
    parser.add_argument("--check", default=None, metavar="RUN_ID",
                        help="with --store and without --documents: make no run, only time the check of this run "
                             "recorded on the store (its batch log rows), --repeat times")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args()
    if args.check is not None:
        if args.store is None or args.documents is not None or args.repeat < 1:
            parser.error("--check takes --store, no --documents, and a --repeat of at least 1")
        results = {"store": args.store, "run": args.check,
                   "checks": [checked(args.store, args.check, None) for _ in range(args.repeat)]}
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps(results, indent=2))
        return 0
    if (args.store is None) != (args.documents is None):
        parser.error("--store and --documents go together")
    if args.store is not None:
        results = {"dim": args.dim, "seed": args.seed, "store": args.store,
                   "live_documents_before": len(live_doc_ids(Store(args.store)))}

        def save_in_place() -> None:
            if args.json_out:
                Path(args.json_out).write_text(json.dumps(results, indent=2) + "\n")

        checked_runs(args.store, load_corpus(args.documents), load_recorded_extractions(args.documents), args.dim,
                     args.seed, results, save_in_place)
        save_in_place()
        print(json.dumps(results, indent=2))
        return 0
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="lightfoot-exactness-work-"))
    results: dict = {"dim": args.dim, "buckets": args.buckets, "seed": args.seed, "by_passages": {}}

    def save() -> None:
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(results, indent=2) + "\n")

    try:
        for passages in args.passages:
            results["by_passages"][str(passages)] = result = {"passages": passages}
            run(passages, args.dim, args.buckets, args.seed, work, result, save)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    save()
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
