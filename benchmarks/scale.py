"""Engine benchmark at corpus scale: full build, deletions, a 1,000-document ingest, memory.

    python benchmarks/scale.py [--passages 100000] [--buckets 256] [--json OUT.json]

Synthetic extractions (benchmarks/synthetic.py) replayed through the real pipeline into a
temporary local store, with the model-free hashing embedder (384 dimensions, as MiniLM), so that
the figures measure the engine: name vectors, LSH-filtered links, components, synonym edges,
facts, and the Delta and LanceDB writes. One run, in this order:

1. ``full_build_s``: the N passages ingested in one commit; ``peak_rss_mb`` is the process's peak
   right after it. With ``--build-batch B``, ingested instead as batches of B documents, each in a
   fresh process, as a deployment ingests drop after drop (``build_batches``: each batch's time,
   CPU, the process's peak RSS and the store's size on disk after it; ``peak_rss_mb`` is then the
   largest process's);
2. ``delete_one_s``: the median of ``--singles`` one-document deletions, each through a new
   ``Store`` object (so nothing is read from this process's memory of the build);
3. ``delete_10pct_s``: 10% of the documents deleted in one commit, in a fresh process
   (``delete_10pct_peak_rss_mb``: its peak RSS);
4. in fresh processes on the built store: one more one-document deletion
   (``delete_one_fresh``) and ``ingest_1k_s``, 1,000 new documents (replayed extractions), each
   with its engine time and the process's peak RSS;
5. ``fingerprint_equal``: a fresh build of the surviving documents, made in a separate process,
   has the store's fingerprint;
6. ``link_pairs_found_share``: of the exhaustive pairs at the synonym and entity thresholds
   between a sample of live names and every live name of their type, the share that the
   store's links hold (what the LSH filter finds);
7. ``delete_one_s_10k``: step 2 in a separate run at 10,000 passages (when N > 10,000), made
   first.

The JSON file is written after every step (and every batch of ``--build-batch``), so a run
stopped part-way keeps what it measured, and ``disk_mb`` holds the store's size on disk after each
step. ``--keep DIR`` builds the store in DIR and keeps it; ``--built DIR --later DATASET
[--build-json FILE]`` takes steps 2 to 4 on such a store as it stands (a build stopped part-way,
say), with the build's figures and comparison from its run's JSON file (``--singles-only``: step 2
alone; with ``--compare-built DIR``, alternating with step 2 on another kept store, for a ratio
from this run). ``--compare-all`` makes
the run at ``--compare-at`` take steps 2 to 4 too, so that the 1,000-document ingest has a ratio
from the same run (``ingest_1k_ratio``).

Every step also records its CPU seconds (``*_cpu_s``; a fresh process's ``cpu_s`` includes its
imports) and the load average when it ended (``load_by_step``): on a shared machine the CPU
figures are the stable ones. Progress goes to stderr with timestamps. Targets at 100,000 passages on 2 cores (issue 12):
one-document deletion p50 <= 0.5 s and <= 1.5x the 10k figure; 1,000-document ingest <= 30 s;
10% deletion <= a tenth of the full build; full build <= 15 min; peak RSS <= 6 GB for the build
and <= 2 GB for a one-document deletion or a 1,000-document ingest in a fresh process.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import polars as pl
from memory import peak_rss_mb
from synthetic import synthetic_documents_and_records, write_documents

from lightfoot_pipeline import operations
from lightfoot_pipeline.index.links import LinkRule, pairs_between
from lightfoot_pipeline.ingest.dataset import load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.fingerprint import counts, fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.vectors import VectorCache

COMPARE_AT = 10_000
INGEST_DOCS = 1_000
STARTED = time.perf_counter()
CPU_STARTED = time.process_time()


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} +{time.perf_counter() - STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def child(args: list[str]) -> dict:
    """Run this script in a fresh process; its JSON answer, with its peak RSS."""
    command = [sys.executable, __file__, *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out = process.stdout.read() if process.stdout else b""
    if process.wait() != 0:
        raise RuntimeError(f"{' '.join(command)} failed with status {process.returncode}")
    return json.loads(out.decode().strip().splitlines()[-1])


def link_share(store: Store, dim: int, settings: IndexSettings, sample: int, seed: int) -> dict:
    """Share of the exhaustive pairs of sampled names that the stored links hold, per threshold."""
    manifest = store.manifest()
    aliases = store.read("aliases", manifest, columns=["name", "type"])
    links = store.read("name_links", manifest, columns=["type", "name_a", "name_b", "similarity"])
    cache = VectorCache.for_model(store, "name", manifest.config["embedder"], dim)
    rng = random.Random(seed)
    found = {settings.synonym_threshold: [0, 0], settings.entity_threshold: [0, 0]}
    for (type_,), group in sorted(aliases.partition_by("type", as_dict=True).items()):
        names = sorted(group.get_column("name").to_list())
        picked = sorted(rng.sample(names, min(sample, len(names))))
        vectors = cache.vectors(names)
        picked_vectors = cache.vectors(picked)
        rule = LinkRule.of(settings).exhaustive()
        i, j, s = pairs_between(picked, picked_vectors, names, vectors, rule)
        pairs = {(min(picked[a], names[b]), max(picked[a], names[b])): sim for a, b, sim in zip(i, j, s, strict=True)
                 if picked[a] != names[b]}
        stored = {(a, b) for a, b in links.filter(pl.col("type") == type_).select("name_a", "name_b").iter_rows()}
        for threshold, tally in found.items():
            wanted = [p for p, sim in pairs.items() if sim >= threshold]
            tally[0] += sum(1 for p in wanted if p in stored)
            tally[1] += len(wanted)
    return {f"{t:.2f}": {"found": f, "exhaustive": n, "share": round(f / n, 5) if n else 1.0}
            for t, (f, n) in sorted(found.items())}


def tree_mb(path: Path) -> float:
    """What the files under ``path`` take on disk, in MB."""
    total = sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    return round(total / 1e6, 1)


def build_in_batches(store: Store, root: Path, documents, records, dim: int, buckets: int, size: int,
                     after_batch=None) -> dict:
    """Ingest ``documents`` in batches of ``size``, each in a fresh process (:func:`child`);
    ``after_batch`` is given the batches done so far after each (a run stopped part-way keeps them)."""
    batches, started, cpu = [], time.perf_counter(), 0.0
    for first in range(0, len(documents), size):
        part = documents[first:first + size]
        folder = write_documents(root / "batch", part, records)
        done = child(["--child-ingest", store.uri, str(folder), str(dim), str(buckets)])
        shutil.rmtree(folder, ignore_errors=True)
        done.update({"documents_before": first, "disk_mb": tree_mb(Path(store.uri))})
        batches.append(done)
        cpu += done["cpu_s"]
        say(f"batch of {len(part)} documents after {first}: {done['seconds']} s, peak RSS {done['peak_rss_mb']} MB, "
            f"store {done['disk_mb']} MB")
        if after_batch is not None:
            after_batch(batches)
    return {"seconds": round(time.perf_counter() - started, 3), "cpu_s": round(cpu, 3), "batches": batches,
            "peak_rss_mb": max(b["peak_rss_mb"] for b in batches)}


def singles(store_uri: str, doc_ids: list[str], settings: IndexSettings) -> tuple[list[float], list[float]]:
    """The wall and CPU seconds of each one-document deletion, each through a new Store object."""
    times, cpu = [], []
    for doc_id in doc_ids:
        t0, c0 = time.perf_counter(), time.process_time()
        operations.delete(Store(store_uri), [doc_id], settings)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return times, cpu


def singles_figures(times: list[float], cpu: list[float]) -> dict:
    """The figures of step 2 from its deletions' wall and CPU seconds."""
    return {"delete_one_s": round(statistics.median(times), 4), "delete_one_cpu_s": round(statistics.median(cpu), 4),
            "delete_one_max_s": round(max(times), 4), "delete_one_times_s": [round(t, 4) for t in times]}


def interleaved_singles(built: Path, other: Path, seed: int, n_singles: int, result: dict) -> str:
    """Step 2 on the store kept in ``built`` and on the one in ``other`` (``--compare-built``, a
    store of the comparison size), their deletions alternating so that the shared machine's state
    weighs on both alike. ``other``'s median goes under ``delete_one_s_<N>k``, N its live documents
    in thousands, which this returns."""
    settings, rng = IndexSettings(), random.Random(seed)
    stores = {path: Store(str(path)) for path in (built, other)}
    ids = {path: sorted(live_doc_ids(store)) for path, store in stores.items()}
    chosen = {path: rng.sample(ids[path], n_singles) for path in stores}
    times: dict[Path, list[float]] = {path: [] for path in stores}
    cpu: dict[Path, list[float]] = {path: [] for path in stores}
    for i in range(n_singles):
        for path, store in stores.items():
            wall, used = singles(store.uri, [chosen[path][i]], settings)
            times[path] += wall
            cpu[path] += used
    key = f"delete_one_s_{round(len(ids[other]) / 1000)}k"
    compared = singles_figures(times[other], cpu[other])
    result.update({"passages": len(ids[built]), "built_store": str(built), **singles_figures(times[built], cpu[built]),
                   key: compared["delete_one_s"],
                   "compare_built": {"store": str(other), "passages": len(ids[other]), **compared}})
    result["delete_one_cpu_ratio"] = round(result["delete_one_cpu_s"] / result["compare_built"]["delete_one_cpu_s"], 3)
    say(f"one-document deletions, alternating: p50 {result['delete_one_s']} s on {built}, {result[key]} s on {other}")
    return key


def run_on_built(built: Path, later_dataset: Path | None, build_json: Path | None, seed: int, n_singles: int,
                 singles_only: bool, dim: int, result: dict, save) -> dict:
    """Steps 2 to 4 on a store built earlier (``--keep`` of a run stopped part-way, say), its live
    documents the ones deleted, ``later_dataset`` the documents of the ingest; the build's figures
    from that run's JSON file when given."""
    store = Store(str(built))
    ids = sorted(live_doc_ids(store))
    result.update({"passages": len(ids), "dim": dim, "built_store": str(built), "counts_full": counts(store),
                   "disk_mb": {"build": tree_mb(built)}})
    if build_json is not None:
        earlier = json.loads(build_json.read_text())
        batches = earlier.get("build_batches", [])
        result.update({"build_batch": earlier.get("build_batch"), "build_batches": batches,
                       "full_build_s": round(sum(b["seconds"] for b in batches), 3),
                       "full_build_cpu_s": round(sum(b["cpu_s"] for b in batches), 3),
                       "peak_rss_mb": max((b["peak_rss_mb"] for b in batches), default=None),
                       "generate_s": earlier.get("generate_s")})
        for key in ("compare", "delete_one_s_100k", "delete_one_s_10k"):
            if key in earlier:
                result[key] = earlier[key]
    save("build")
    say(f"{len(ids)} live documents in {built}")
    root = Path(tempfile.mkdtemp(prefix="lightfoot-scale-"))
    try:
        return after_build(store, root, ids, seed, n_singles, singles_only, result, save, lambda: later_dataset, dim)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(passages: int, dim: int, seed: int, buckets: int, n_singles: int, singles_only: bool, sample: int,
        verify: bool, result: dict, save, build_batch: int = 0, keep: Path | None = None) -> dict:
    """The steps of the module docstring, filling ``result`` and calling ``save`` after each."""
    settings = IndexSettings()
    embedder = HashingEmbedder(dim=dim)
    t0 = time.perf_counter()
    extra = 0 if singles_only else INGEST_DOCS
    every, records = synthetic_documents_and_records(passages + extra, seed)
    documents, later = every[:passages], every[passages:]
    result.update({"passages": passages, "dim": dim, "buckets": buckets, "generate_s": round(time.perf_counter() - t0, 3)})
    say(f"generated {len(every)} documents")
    root = Path(tempfile.mkdtemp(prefix="lightfoot-scale-"))
    try:
        store = Store(str(keep if keep is not None else root / "store"), n_buckets=buckets)
        t0, c0 = time.perf_counter(), time.process_time()
        if build_batch:
            def after_batch(batches: list[dict]) -> None:
                result["build_batch"], result["build_batches"] = build_batch, batches
                save(f"build batch {len(batches)}")

            built_in = build_in_batches(store, root, documents, records, dim, buckets, build_batch, after_batch)
            result["full_build_s"], result["full_build_cpu_s"] = built_in["seconds"], built_in["cpu_s"]
            result["build_batch"], result["build_batches"] = build_batch, built_in["batches"]
            result["peak_rss_mb"] = built_in["peak_rss_mb"]
        else:
            built = operations.ingest(store, documents, ReplayExtractor(records), embedder, settings)
            result["full_build_s"] = round(time.perf_counter() - t0, 3)
            result["full_build_cpu_s"] = round(time.process_time() - c0, 3)
            result["peak_rss_mb"] = peak_rss_mb()
            result["build_graph"] = built.graph.as_dict()
            result["build_stages_s"] = built.stage_seconds
        result["counts_full"] = counts(store)
        result.setdefault("disk_mb", {})["build"] = tree_mb(Path(store.uri))
        save("build")
        say(f"built in {result['full_build_s']} s, peak RSS {result['peak_rss_mb']} MB: {result['counts_full']}")

        ids = [d.doc_id for d in documents]
        later_dir = None if singles_only else write_documents(root / "later", later, records)
        if not verify:  # nothing reads the corpus again: let it go (5.4 GB at 1M) before the deletions
            every, documents, later, records = [], [], [], {}
            gc.collect()
        after_build(store, root, ids, seed, n_singles, singles_only, result, save, lambda: later_dir, dim)
        if singles_only or not verify:
            return result
        live = live_doc_ids(store)
        by_id = {d.doc_id: d for d in every}
        survivors_dir = write_documents(root / "survivors", [by_id[d] for d in sorted(live)], records)
        fresh = child(["--child-build", str(root / "fresh"), str(survivors_dir), str(dim), str(buckets)])
        mine = fingerprint(Store(store.uri)).digest
        result["fresh_build"] = fresh
        result["fingerprint"] = mine
        result["fingerprint_equal"] = fresh["fingerprint"] == mine
        result["verified_docs"] = len(live)
        save("fresh_build")
        say(f"fresh build of {len(live)} survivors in {fresh['seconds']} s: fingerprint equal {result['fingerprint_equal']}")

        shares = link_share(Store(store.uri), dim, settings, sample, seed)
        result["link_pairs"] = shares
        result["link_pairs_found_share"] = min(v["share"] for v in shares.values())
        say(f"link pairs found: {shares}")
        result["peak_rss_mb_run"] = peak_rss_mb()
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def after_build(store: Store, root: Path, ids: list[str], seed: int, n_singles: int, singles_only: bool,
                result: dict, save, later_dir, dim: int) -> dict:
    """Steps 2 to 4 of the module docstring on the built ``store`` of documents ``ids``;
    ``later_dir()`` gives the dataset folder of the 1,000-document ingest."""
    settings = IndexSettings()
    rng = random.Random(seed)
    chosen = rng.sample(ids, n_singles)
    times, cpu = singles(store.uri, chosen, settings)
    result.update(singles_figures(times, cpu))
    result["disk_mb"]["delete_one"] = tree_mb(Path(store.uri))
    save("delete_one")
    say(f"one-document deletions: p50 {result['delete_one_s']} s, max {result['delete_one_max_s']} s")
    if singles_only:
        return result

    survivors = sorted(set(ids) - set(chosen))
    doomed = sorted(rng.sample(survivors, round(len(ids) * 0.1)))
    doomed_file = root / "doomed.json"
    doomed_file.write_text(json.dumps(doomed))
    deleted = child(["--child-delete", store.uri, f"@{doomed_file}"])  # its own process: its own peak RSS
    result["delete_10pct_s"] = deleted["seconds"]
    result["delete_10pct_cpu_s"] = deleted["cpu_s"]
    result["delete_10pct_peak_rss_mb"] = deleted["peak_rss_mb"]
    if "full_build_s" in result:
        result["delete_10pct_ratio"] = round(result["delete_10pct_s"] / result["full_build_s"], 4)
    result["delete_10pct_graph"] = deleted["graph"]
    result["disk_mb"]["delete_10pct"] = tree_mb(Path(store.uri))
    save("delete_10pct")
    say(f"10% deletion in {result['delete_10pct_s']} s (ratio {result.get('delete_10pct_ratio')})")

    survivors = sorted(set(survivors) - set(doomed))
    fresh_one = child(["--child-delete", store.uri, survivors[0]])
    result["delete_one_fresh"] = fresh_one
    save("delete_one_fresh")
    say(f"one-document deletion in a fresh process: {fresh_one}")
    fresh_ingest = child(["--child-ingest", store.uri, str(later_dir()), str(dim)])
    result["ingest_1k_s"] = fresh_ingest["seconds"]
    result["ingest_1k"] = fresh_ingest
    result["disk_mb"]["ingest_1k"] = tree_mb(Path(store.uri))
    save("ingest_1k")
    say(f"{fresh_ingest['ingested']}-document ingest in a fresh process: {fresh_ingest}")
    return result


def child_main(argv: list[str]) -> int:
    """The fresh-process steps: one answer line of JSON on stdout."""
    settings = IndexSettings()
    mode, args = argv[0], argv[1:]
    if mode == "--child-delete":  # one id, or @FILE: a JSON list of them
        store_uri, doc_id = args
        doc_ids = json.loads(Path(doc_id[1:]).read_text()) if doc_id.startswith("@") else [doc_id]
        t0 = time.perf_counter()
        report = operations.delete(Store(store_uri), doc_ids, settings)
        out = {"seconds": round(time.perf_counter() - t0, 4), "deleted": report.deleted[:10],
               "deleted_count": len(report.deleted), "graph": report.graph.as_dict()}
    elif mode == "--child-ingest":  # [buckets]: those of a store the ingest creates
        store_uri, dataset, dim, *buckets = args
        documents, records = load_corpus(dataset), load_recorded_extractions(dataset)
        t0 = time.perf_counter()
        store = Store(store_uri, n_buckets=int(buckets[0])) if buckets else Store(store_uri)
        report = operations.ingest(store, documents, ReplayExtractor(records), HashingEmbedder(dim=int(dim)), settings)
        out = {"seconds": round(time.perf_counter() - t0, 3), "ingested": report.ingested,
               "links_added": report.graph.links_added, "entities_recomputed": report.graph.entities_recomputed,
               "stages_s": report.stage_seconds}
    elif mode == "--child-build":
        store_uri, dataset, dim, buckets = args
        documents, records = load_corpus(dataset), load_recorded_extractions(dataset)
        store = Store(store_uri, n_buckets=int(buckets))
        t0 = time.perf_counter()
        built = operations.ingest(store, documents, ReplayExtractor(records), HashingEmbedder(dim=int(dim)), settings)
        seconds = round(time.perf_counter() - t0, 3)
        out = {"seconds": seconds, "stages_s": built.stage_seconds, "fingerprint": fingerprint(store).digest}
    else:
        raise SystemExit(f"unknown child mode {mode}")
    out["peak_rss_mb"] = peak_rss_mb()
    out["cpu_s"] = round(time.process_time() - CPU_STARTED, 3)  # the step's, imports included
    print(json.dumps(out))
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1].startswith("--child-"):
        return child_main(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384, help="hashing-embedder dimensions (MiniLM has 384)")
    parser.add_argument("--buckets", type=int, default=256, help="hash buckets of every table")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--singles", type=int, default=9, help="one-document deletions to time (median)")
    parser.add_argument("--sample", type=int, default=500, help="names per type whose exhaustive pairs are checked")
    parser.add_argument("--singles-only", action="store_true", help="only build and time one-document deletions")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip steps 5 and 6 (the fresh build of the survivors and the links' share)")
    parser.add_argument("--compare-at", type=int, default=COMPARE_AT,
                        help="also time one-document deletions at this many passages (0: no)")
    parser.add_argument("--build-batch", type=int, default=0, metavar="DOCS",
                        help="build in batches of this many documents, each in a fresh process (0: one commit)")
    parser.add_argument("--compare-buckets", type=int, default=0,
                        help="buckets of the --compare-at run's store (0: those of --buckets)")
    parser.add_argument("--compare-all", action="store_true",
                        help="the --compare-at run takes every step but the verification (the 10%% deletion and the "
                             "1,000-document ingest too), not only the one-document deletions")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="build the store in DIR (a new folder) and keep it after the run")
    parser.add_argument("--built", type=Path, default=None, metavar="DIR",
                        help="skip the build: take steps 2 to 4 on the store in DIR (kept by --keep), deleting among "
                             "its live documents and ingesting those of --later")
    parser.add_argument("--later", type=Path, default=None, metavar="DATASET",
                        help="with --built: a dataset folder of documents the store does not hold, for the ingest")
    parser.add_argument("--build-json", type=Path, default=None, metavar="FILE",
                        help="with --built: the JSON file of the run that built it (its batches and comparison)")
    parser.add_argument("--compare-built", type=Path, default=None, metavar="DIR",
                        help="with --built and --singles-only: time the one-document deletions on the store in DIR "
                             "(kept by a run at the comparison size) too, alternating with those on --built, so "
                             "that their ratio comes from this run")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args()
    if args.built is None and (args.later is not None or args.build_json is not None or args.compare_built):
        parser.error("--later, --build-json and --compare-built go with --built")
    if args.built is not None and args.later is None and not args.singles_only:
        parser.error("--built needs --later (the documents of the ingest), unless --singles-only")
    if args.compare_built is not None and not args.singles_only:
        parser.error("--compare-built times one-document deletions only: give --singles-only")
    if args.passages < 10 or args.singles < 1 or args.buckets < 1 or args.build_batch < 0 or args.compare_buckets < 0:
        parser.error("--passages must be at least 10, --singles and --buckets at least 1, --build-batch and "
                     "--compare-buckets not negative")
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep {args.keep}: the folder exists (the store is built in a new one)")
    result: dict = {}

    def save(step: str = "end") -> None:
        result["load_average"] = [round(x, 2) for x in os.getloadavg()]
        result.setdefault("load_by_step", {})[step] = result["load_average"][0]
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result, indent=2, default=float) + "\n")

    compare_key = f"delete_one_s_{args.compare_at // 1000}k"
    if args.compare_built is not None:
        compare_key = interleaved_singles(args.built, args.compare_built, args.seed, args.singles, result)
    elif args.built is not None:
        run_on_built(args.built, args.later, args.build_json, args.seed, args.singles, args.singles_only, args.dim,
                     result, save)
        compare_key = next((key for key in result if key.startswith("delete_one_s_")), compare_key)
    elif args.compare_at and args.passages > args.compare_at and not args.singles_only:
        steps = "every step but the verification" if args.compare_all else "one-document deletions"
        say(f"{steps} at {args.compare_at} passages, in a separate run")
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "compare.json"
            subprocess.run([sys.executable, __file__, "--passages", str(args.compare_at), "--dim", str(args.dim),
                            "--buckets", str(args.compare_buckets or args.buckets), "--seed", str(args.seed),
                            "--singles", str(args.singles), "--compare-at", "0",
                            "--build-batch", str(min(args.build_batch, args.compare_at)),
                            *(["--no-verify"] if args.compare_all else ["--singles-only"]), "--json", str(out)],
                           check=True)
            compared = json.loads(out.read_text())
            result[compare_key] = compared["delete_one_s"]
            if args.compare_all:
                result["compare"] = compared
        save("compare")
    if args.built is None:
        run(args.passages, args.dim, args.seed, args.buckets, args.singles, args.singles_only, args.sample,
            not args.no_verify, result, save, build_batch=args.build_batch, keep=args.keep)
    if compare_key in result:
        result["delete_one_ratio"] = round(result["delete_one_s"] / result[compare_key], 3)
    if "compare" in result and "ingest_1k_s" in result:
        result["ingest_1k_ratio"] = round(result["ingest_1k_s"] / result["compare"]["ingest_1k_s"], 3)
        result["ingest_1k_cpu_ratio"] = round(result["ingest_1k"]["cpu_s"] / result["compare"]["ingest_1k"]["cpu_s"], 3)
    save()
    for key in ("passages", "full_build_s", "delete_10pct_s", "delete_10pct_ratio", "delete_one_s", compare_key,
                "delete_one_ratio", "ingest_1k_s", "ingest_1k_ratio", "peak_rss_mb", "fingerprint_equal", "link_pairs_found_share"):
        if key in result:
            print(f"{key:<24} {result[key]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
