"""The relink job against the one-process link stage, on synthetic passages.

    python benchmarks/relink.py [--passages 30000] [--processes 2] [--piece-size N] [--relink-batch DOCS] [--json OUT.json]

Synthetic extractions (benchmarks/synthetic.py) replayed into a temporary local store with the
hashing embedder (384 dimensions, as MiniLM); then the whole graph derived again twice, from two
copies of that store:

1. ``one_process``: ``operations.migrate`` in a fresh process: its wall time, the seconds of its
   link stage (``link_added_names``, every live name added; ``keys_s`` of it computing the names'
   band keys, which the job's prepare step reuses from the store when the embedder and settings
   are unchanged) and the process's peak RSS;
2. ``job``: the Dagster ``relink_job`` on the multiprocess executor with ``--processes``
   steps at once (a temporary instance): its wall time, each step's seconds, the span of its link
   stage (from the first ``link_pieces`` step's start to the last one's end), and the peak RSS of
   each step (each runs in its own process: prepare, the piece steps, the commit);
3. ``fingerprint_equal``: both copies have the same fingerprint.

Progress goes to stderr; the load average is recorded at the start and after each step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory import peak_rss_mb
from synthetic import synthetic_documents_and_records

STARTED = time.perf_counter()


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} +{time.perf_counter() - STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def one_process(store_uri: str, dim: int) -> dict:
    """``operations.migrate`` with its link stage timed (run in a fresh process)."""
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.index import reconcile
    from lightfoot_pipeline.index.links import LinkRule
    from lightfoot_pipeline.models.embedder import HashingEmbedder
    from lightfoot_pipeline.settings import IndexSettings
    from lightfoot_pipeline.store.store import Store

    linked = {}
    original = reconcile.link_added_names

    def timed(*args):
        t0, c0 = time.perf_counter(), time.process_time()
        links = original(*args)
        linked["links_s"] = round(time.perf_counter() - t0, 3)
        linked["links_cpu_s"] = round(time.process_time() - c0, 3)
        return links

    reconcile.link_added_names = timed
    keys = LinkRule.keys

    def timed_keys(self, names, vectors):  # the sign bits of every name: computed here, stored ones reused by the job
        t0 = time.perf_counter()
        out = keys(self, names, vectors)
        linked["keys_s"] = round(linked.get("keys_s", 0.0) + time.perf_counter() - t0, 3)
        return out

    LinkRule.keys = timed_keys
    t0, c0 = time.perf_counter(), time.process_time()
    change = operations.migrate(Store(store_uri), HashingEmbedder(dim=dim), IndexSettings())
    return {"migrate_s": round(time.perf_counter() - t0, 3), "migrate_cpu_s": round(time.process_time() - c0, 3),
            **linked, "links": change.links_added,
            "names": change.names_added, "peak_rss_mb": peak_rss_mb()}


def job(store_uri: str, dim: int, processes: int) -> dict:
    """The relink_job on the multiprocess executor; step seconds and piece steps' peak RSS."""
    import dagster as dg

    target = dg.build_reconstructable_job("assets.defs.relink", "relink_job_for",
                                          reconstructable_args=(store_uri, f"hashing:{dim}"))
    config = {"execution": {"config": {"max_concurrent": processes}}}
    with dg.instance_for_test() as instance:
        t0 = time.perf_counter()
        with dg.execute_job(target, instance=instance, run_config=config) as result:
            wall = time.perf_counter() - t0
            if not result.success:
                raise RuntimeError("the relink job failed")
            events = result.all_events
            logged = [e for e in instance.all_logs(result.run_id) if e.dagster_event is not None]
            starts = {e.step_key: e.timestamp for e in logged if e.dagster_event.event_type_value == "STEP_START"}
            ends = {e.step_key: e.timestamp for e in logged if e.dagster_event.event_type_value == "STEP_SUCCESS"}
            rss = {e.step_key: e.event_specific_data.metadata["peak_rss_mb"].value for e in events
                   if e.event_type_value == "STEP_OUTPUT" and "peak_rss_mb" in e.event_specific_data.metadata}
            rss.update({e.step_key: e.event_specific_data.materialization.metadata["peak_rss_mb"].value
                        for e in events if e.event_type_value == "ASSET_MATERIALIZATION"})
            pieces = [e.event_specific_data.metadata["pieces"].value for e in events
                      if e.event_type_value == "STEP_OUTPUT" and "pieces" in e.event_specific_data.metadata]
            cpu = {e.step_key: e.event_specific_data.metadata["cpu_s"].value for e in events
                   if e.event_type_value == "STEP_OUTPUT" and "cpu_s" in e.event_specific_data.metadata}
    steps = {key: round(ends[key] - starts[key], 3) for key in sorted(starts)}
    piece_keys = [k for k in starts if k.startswith("link_pieces[")]
    return {"wall_s": round(wall, 3), "steps_s": steps, "piece_steps_cpu_s": cpu, "link_steps": len(piece_keys), "link_pieces": sum(pieces),
            "link_stage_s": round(max(ends[k] for k in piece_keys) - min(starts[k] for k in piece_keys), 3),
            "step_peak_rss_mb": rss, "max_piece_step_peak_rss_mb": max(v for k, v in rss.items() if k in piece_keys)}


def child(mode: str, *args: str) -> dict:
    command = [sys.executable, __file__, mode, *args]
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-migrate":
        print(json.dumps(one_process(sys.argv[2], int(sys.argv[3]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=30_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--buckets", type=int, default=16)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--piece-size", type=int, default=None, help="LIGHTFOOT_LINK_PIECE_SIZE for the job")
    parser.add_argument("--relink-batch", type=int, default=None,
                        help="LIGHTFOOT_RELINK_BATCH for the job: its commit step derives the graph this many documents "
                             "a commit (0: in one transaction, as migrate)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args()
    if args.piece_size is not None:
        os.environ["LIGHTFOOT_LINK_PIECE_SIZE"] = str(args.piece_size)
    if args.relink_batch is not None:
        os.environ["LIGHTFOOT_RELINK_BATCH"] = str(args.relink_batch)

    from lightfoot_pipeline import operations
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor
    from lightfoot_pipeline.models.embedder import HashingEmbedder
    from lightfoot_pipeline.settings import IndexSettings, link_piece_size, relink_batch
    from lightfoot_pipeline.store.fingerprint import fingerprint
    from lightfoot_pipeline.store.store import Store

    result: dict = {"passages": args.passages, "dim": args.dim, "processes": args.processes,
                    "piece_size": link_piece_size(), "relink_batch": relink_batch(), "cores": os.cpu_count(), "load_start": load()}
    root = Path(tempfile.mkdtemp(prefix="lightfoot-relink-"))
    try:
        documents, records = synthetic_documents_and_records(args.passages, args.seed)
        built = root / "built"
        t0 = time.perf_counter()
        operations.ingest(Store(str(built), n_buckets=args.buckets), documents, ReplayExtractor(records),
                        HashingEmbedder(dim=args.dim), IndexSettings())
        result["build_s"] = round(time.perf_counter() - t0, 3)
        say(f"built {args.passages} passages in {result['build_s']} s")
        for name in ("one", "job"):
            shutil.copytree(built, root / name)
        result["one_process"] = child("--child-migrate", str(root / "one"), str(args.dim))
        result["load_after_one_process"] = load()
        say(f"one process: {result['one_process']}")
        result["job"] = job(str(root / "job"), args.dim, args.processes)
        result["load_after_job"] = load()
        say(f"job: {result['job']}")
        one, spread = fingerprint(Store(str(root / "one"))), fingerprint(Store(str(root / "job")))
        result["fingerprint_equal"] = one.digest == spread.digest
        linking = result["one_process"]["links_s"] - result["one_process"].get("keys_s", 0.0)
        result["ratios"] = {
            "link_stage_job_over_one_process": round(result["job"]["link_stage_s"] / result["one_process"]["links_s"], 3),
            "link_stage_job_over_one_process_without_keys": round(result["job"]["link_stage_s"] / linking, 3),
            "wall_job_over_migrate": round(result["job"]["wall_s"] / result["one_process"]["migrate_s"], 3),
            "piece_step_rss_over_one_process": round(result["job"]["max_piece_step_peak_rss_mb"]
                                                     / result["one_process"]["peak_rss_mb"], 3),
            "commit_step_rss_over_one_process": round(result["job"]["step_peak_rss_mb"]["commit_relink"]
                                                      / result["one_process"]["peak_rss_mb"], 3),
        }
        say(f"fingerprint equal: {result['fingerprint_equal']}; ratios {result['ratios']}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
