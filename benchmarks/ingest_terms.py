"""What a 1,000-document ingest costs on stores of several sizes, term by term.

    python benchmarks/ingest_terms.py --at STORE DATASET [--at STORE DATASET ...] [--repo CHECKOUT ...]
        [--rounds N] [--json OUT.json]
    python benchmarks/ingest_terms.py --sequence STORE DATASET [DATASET ...] [--json OUT.json]

Issue 37 asks that a batch's ingest follow the batch, not the store: at a million passages within
1.5 times its time at 100k. Each ``--at`` names a store kept by ``benchmarks/scale.py --keep DIR``
and a dataset folder of documents it does not hold (``corpus.jsonl`` and ``extractions.jsonl``,
as ``benchmarks/synthetic.py: write_documents`` writes them). For each of ``--rounds`` rounds,
each store and each checkout named by ``--repo`` (default: this one; give two to compare
versions, alternating), the store is copied and the dataset ingested into the copy in a fresh
process (replayed extractions, the hashing embedder of 384 dimensions the stores were built
with). Reported per run: wall and CPU seconds, peak resident memory, the pipeline's stage seconds,
and the terms that grow with the store, each as seconds and calls:

- ``column_reads``: whole columns read to tell which looked-up values a table holds;
- ``matching_scans``: buckets scanned for the rows of looked-up values;
- ``bucket_reads``: buckets read whole (the stored sketches' parts among them);
- ``band_indexes``: the LSH's per-band index tables built (lsh.py);
- ``lsh_lookups``: the added names looked up among the stored sketches, a part at a time;
- ``vector_keys``: the name-vector cache's key column read.

With ``--sequence``, the datasets are ingested one after another into one copy of the store, as
drops arrive, each in a fresh process, with the data files of ``documents`` counted after each:
each drop appends a file to the buckets it touches, so this shows what uncompacted buckets cost.

The copies are removed after each run. With two stores, ``ratios_largest_over_smallest`` gives
each checkout's figures at the largest store over the smallest; with two checkouts,
``ratios_second_over_first`` the second's over the first's at each store.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from erase_memory import CHILD_PRELUDE, REPO, checkouts, run_child

# The child: the ingest with its growing terms timed (functions that earlier versions have too, so
# that two checkouts compare).
CHILD = CHILD_PRELUDE + r"""
dataset = sys.argv[3]
CPU0 = time.process_time()
from lightfoot_pipeline import operations
from lightfoot_pipeline.index import lsh, name_sketches
from lightfoot_pipeline.ingest.dataset import load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store import vectors

terms = {}
def timed(term, owner, name):
    fn = getattr(owner, name)
    def run(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            seconds, calls = terms.get(term, (0.0, 0))
            terms[term] = (seconds + time.perf_counter() - t0, calls + 1)
    setattr(owner, name, run)

timed("column_reads", Store, "read_column")
timed("matching_scans", Store, "read_matching")
timed("bucket_reads", Store, "read_buckets")
timed("band_indexes", lsh, "_band_index")
timed("lsh_lookups", name_sketches, "near_between_parts")
timed("vector_keys", vectors, "key_column")
documents, records = load_corpus(dataset), load_recorded_extractions(dataset)
t0 = time.perf_counter()
report = operations.ingest(Store(store_path), documents, ReplayExtractor(records), HashingEmbedder(dim=384),
                           IndexSettings())
wall = time.perf_counter() - t0
print(json.dumps({"ingested": report.ingested, "wall_s": round(wall, 2),
                  "cpu_s": round(time.process_time() - CPU0, 2), "peak_rss_mb": round(status_mb("VmHWM")),
                  "stages_s": report.stage_seconds,
                  "terms": {term: {"seconds": round(s, 2), "calls": n} for term, (s, n) in sorted(terms.items())}}))
"""

FIGURES = ("wall_s", "cpu_s", "peak_rss_mb")


def live_passages(store: str) -> int:
    """The store's live passages, as its log counts them."""
    sys.path.insert(0, str(REPO))
    from lightfoot_pipeline.store.store import Store

    return int(Store(store).manifest().details.get("rows", {}).get("passages", 0))


def summed(runs: list[dict], key: str) -> float:
    return sum(r[key] for r in runs)


def data_files(store: str, name: str) -> int:
    """The data files of a table at its latest version."""
    from deltalake import DeltaTable

    return len(DeltaTable(str(Path(store) / "tables" / name)).file_uris())


def sequence(store: str, datasets: list[str], repo: str, json_out: str | None) -> None:
    """The datasets ingested one after another into one copy of the store with ``repo``'s code
    (``--sequence``)."""
    folder = Path(tempfile.mkdtemp(prefix="ingest-terms-", dir=Path(store).parent))
    runs = []
    try:
        copy = folder / "store"
        shutil.copytree(store, copy, symlinks=True)
        for dataset in datasets:
            row = run_child(CHILD, repo, str(copy), str(Path(dataset).resolve()),
                            what=f"the ingest of {dataset} into a copy of {store}")
            row.update({"store": store, "dataset": dataset, "documents_files_after": data_files(str(copy), "documents"),
                        "load_average_1m": round(os.getloadavg()[0], 2)})
            runs.append(row)
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if json_out:
        Path(json_out).write_text(json.dumps({"sequence": store, "cpus": os.cpu_count(), "runs": runs}, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", nargs=2, action="append", metavar=("STORE", "DATASET"))
    parser.add_argument("--sequence", nargs="+", metavar="STORE DATASET", help="a store, then datasets to ingest "
                        "one after another into one copy of it")
    parser.add_argument("--repo", action="append", help="a checkout whose code ingests (repeatable)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    repos = checkouts(args)
    if args.sequence:
        if len(args.sequence) < 2 or len(repos) > 1:
            parser.error("--sequence needs a store, at least one dataset and at most one --repo")
        sequence(args.sequence[0], args.sequence[1:], repos[0], args.json_out)
        return
    if not args.at:
        parser.error("give --at STORE DATASET (repeatable) or --sequence STORE DATASET ...")
    sizes = {store: live_passages(store) for store, _ in args.at}
    runs = []
    for round_ in range(args.rounds):
        for store, dataset in args.at:
            for repo in repos:
                folder = Path(tempfile.mkdtemp(prefix="ingest-terms-", dir=Path(store).parent))
                try:
                    copy = folder / "store"
                    shutil.copytree(store, copy, symlinks=True)
                    row = run_child(CHILD, repo, str(copy), str(Path(dataset).resolve()),
                                    what=f"the ingest of {dataset} into {store}")
                    row.update({"store": store, "passages": sizes[store], "round": round_ + 1,
                                "load_average_1m": round(os.getloadavg()[0], 2)})
                    runs.append(row)
                    print(json.dumps(row), flush=True)
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
    report: dict = {"at": args.at, "repos": repos, "rounds": args.rounds, "cpus": os.cpu_count(), "runs": runs}
    by = {(r["store"], r["repo"]): [x for x in runs if x["store"] == r["store"] and x["repo"] == r["repo"]]
          for r in runs}
    if len(args.at) >= 2:
        smallest, largest = min(sizes, key=lambda s: sizes[s]), max(sizes, key=lambda s: sizes[s])
        report["ratios_largest_over_smallest"] = {
            repo: {key: round(summed(by[largest, repo], key) / summed(by[smallest, repo], key), 3) for key in FIGURES}
            for repo in repos}
    if len(repos) == 2:
        report["ratios_second_over_first"] = {
            store: {key: round(summed(by[store, repos[1]], key) / summed(by[store, repos[0]], key), 3)
                    for key in FIGURES}
            for store, _ in args.at}
    print(json.dumps({k: v for k, v in report.items() if k.startswith("ratios")}, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
