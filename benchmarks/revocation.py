"""Revocation latency: from a narrowing commit to the first request that no longer sees the document.

    python benchmarks/revocation.py [--passages 11402] [--repeats 3] [--poll 2.0] [--json OUT.json] [--work DIR]

The synthetic corpus of the scale benchmark (benchmarks/synthetic.py) at ``--passages``, built with
the hashing embedder at 384 dimensions, readers from a seeded rule over four reader sets (public;
staff; legal; staff and legal), and its snapshot exported. A :class:`QueryService` over it watches
the store every ``--poll`` seconds (``lightfoot serve``'s default: 2 s), as `lightfoot serve` does;
requests go through ``QueryService.query`` (the HTTP layer adds nothing that depends on the store).
No snapshot is exported after the first: the service narrows its views from the store log.

- **cli_readers**: a document that staff reads through ``staff`` alone and that ranks first for a
  question in staff's view; ``lightfoot readers DOC --nobody`` in a child process; staff asks the
  question until the document is not ranked.
- **cli_delete**: a document that ranks first for a question in the operator's view;
  ``lightfoot delete DOC`` in a child process; the operator asks until it is not ranked (the
  operator's view is then derived from the snapshot's access tables, all but one document).
- **library_delete**: the same through ``operations.delete`` in this process, in a batch written
  ``by: dagster``: what a Dagster step commits through (the service reads the store log whoever
  wrote it; Dagster's own sensors and an export play no part).
- **public_cli_delete**: then every document made public and a snapshot exported, which keeps no
  access tables; ``lightfoot delete`` of a document ranked first for the operator. A service reads
  the store's forms, fact assertions and name links for such a snapshot once it serves it
  (service/queries.py ``_with_store_access``: ``public_access_read_s``, from the switch to the
  snapshot until they are read and its base derived), so the deletion, committed after that,
  derives its views from the base as for a snapshot with access tables; each repeat exports again
  first.

Each is measured from the commit's ``committed_at`` in the store log to the first request whose
ranking lacks the document (``seconds``), with the part after the watcher saw the commit
(``after_seen_s``: the view's build, which the request waits for; the watcher counts a narrowing
once it has read the store, so the read is before it). Also the size of the access tables in the
restricted snapshot and the time to read them from the store (a fresh process, nothing cached).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency import MUSIQUE_PASSAGES, READER_SETS, VIEW_PRINCIPALS, synthetic_questions, synthetic_store

from lightfoot_pipeline import operations
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL
from lightfoot_pipeline.service.queries import QueryService
from lightfoot_pipeline.snapshot.collect import read_access
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import ACCESS_FILE, ACCESS_TABLES, TABLE_SUFFIX
from lightfoot_pipeline.store.batches import DAGSTER, Batch, writing_batch
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.store import Store

ROOT = Path(__file__).resolve().parents[1]


def access_cost(store: Store, snapshot_id: str, export_s: float) -> dict:
    folder = Path(store.uri) / "snapshots" / snapshot_id
    files = [folder / f"{name}{TABLE_SUFFIX}" for name in ACCESS_TABLES] + [folder / ACCESS_FILE]
    total = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    started = time.perf_counter()
    read_access(Store(store.uri), store.manifest(), always=True)
    return {"access_mb": round(sum(f.stat().st_size for f in files) / 2**20, 1),
            "snapshot_mb": round(total / 2**20, 1), "read_access_s": round(time.perf_counter() - started, 2),
            "export_s": round(export_s, 2)}


def first_ranked(service: QueryService, principal, questions: list[str], wanted) -> tuple[str, str]:
    """A question whose top passage is of a document ``wanted(doc_id)`` accepts, and that document."""
    for question in questions:
        hits = service.query(question, top_k=1, answer=False, rerank=False, principal=principal)["passages"]
        if hits and wanted(hits[0]["doc_id"]):
            return question, hits[0]["doc_id"]
    raise RuntimeError("no question ranks such a document first")


def until_gone(service: QueryService, store: Store, principal, question: str, doc_id: str, narrowings: int) -> dict:
    """Ask until the ranking lacks ``doc_id``; seconds from the commit's time in the store log."""
    seen = None
    while True:
        if seen is None and service.narrowings > narrowings:
            seen = time.time()
        hits = service.query(question, top_k=10, answer=False, rerank=False, principal=principal)["passages"]
        if all(hit["doc_id"] != doc_id for hit in hits):
            break
        time.sleep(0.01)
    done = time.time()
    committed = store.manifest().committed_at
    assert committed is not None
    seen = seen if seen is not None else done
    return {"seconds": round(done - committed.timestamp(), 3), "after_seen_s": round(done - seen, 3)}


def cli(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "lightfoot_pipeline.cli", *args], check=True, env=env,
                   stdout=subprocess.DEVNULL, cwd=ROOT)


def run(store: Store, passages: int, repeats: int, poll: float, seed: int = 0) -> dict:
    records = synthetic_store(store, passages, seed)
    embedder = HashingEmbedder(dim=384)
    doc_ids = sorted(live_doc_ids(store))
    rng = random.Random(seed)
    readers = {d: rng.choice(READER_SETS) for d in doc_ids}
    operations.set_readers(store, readers, reason="benchmark: four reader sets")
    started = time.perf_counter()
    info = export_snapshot(store, embedder)
    figures: dict = {"passages": passages, "documents": len(doc_ids), "poll_s": poll,
                     "access_tables": access_cost(store, info.snapshot_id, time.perf_counter() - started)}
    questions = synthetic_questions(records, 400, seed)
    staff = VIEW_PRINCIPALS[1]
    service = QueryService(store, embedder, charge_ledger=False)
    assert service.refresh()
    service.watch(poll)
    load_before = os.getloadavg()[0]
    try:
        paths = {"cli_readers": [], "cli_delete": [], "library_delete": []}
        asked: set[str] = set()
        for i in range(repeats):
            for path, times in paths.items():
                principal = staff if path == "cli_readers" else OPERATOR_PRINCIPAL
                wanted = ((lambda d: readers[d] == ("staff",) and d not in asked) if path == "cli_readers"
                          else (lambda d: d not in asked))
                question, doc_id = first_ranked(service, principal, [q for q in questions if q not in asked], wanted)
                asked.update((question, doc_id))
                narrowings = service.narrowings
                time.sleep(rng.uniform(0, poll))  # the commit lands anywhere in the watcher's interval
                if path == "cli_readers":
                    cli("readers", doc_id, "--nobody", "--store", store.uri)
                elif path == "cli_delete":
                    cli("delete", doc_id, "--store", store.uri)
                else:
                    with writing_batch(Batch(f"benchmark-{i}", f"run-{i}", DAGSTER)):
                        operations.delete(store, [doc_id], reason="benchmark")
                times.append(until_gone(service, store, principal, question, doc_id, narrowings))
                print(f"  {path}: {times[-1]}", file=sys.stderr)
        for path, times in paths.items():
            seconds = [t["seconds"] for t in times]
            figures[path] = {"runs": times, "median_s": round(float(np.median(seconds)), 3),
                             "max_s": round(max(seconds), 3)}
        figures["narrowed"] = service.current().narrowing.as_dict()
        operations.set_readers(store, dict.fromkeys(live_doc_ids(store), "public"), reason="benchmark: all public")
        public, reads = [], []
        for _ in range(repeats):
            info = export_snapshot(store, embedder)
            assert not (Path(store.uri) / "snapshots" / info.snapshot_id / ACCESS_FILE).exists()
            while service.snapshot.snapshot_id != info.snapshot_id:
                time.sleep(0.01)
            switched = time.perf_counter()
            while service.snapshot.access is None:  # read from the store once the snapshot serves
                if time.perf_counter() - switched > 300:
                    raise RuntimeError("the service did not read the access tables of a public snapshot")
                time.sleep(0.01)
            reads.append(round(time.perf_counter() - switched, 3))
            question, doc_id = first_ranked(service, OPERATOR_PRINCIPAL, [q for q in questions if q not in asked],
                                            lambda d: d not in asked)
            asked.update((question, doc_id))
            narrowings = service.narrowings
            time.sleep(rng.uniform(0, poll))
            cli("delete", doc_id, "--store", store.uri)
            public.append(until_gone(service, store, OPERATOR_PRINCIPAL, question, doc_id, narrowings))
            print(f"  public_cli_delete: {public[-1]}", file=sys.stderr)
        seconds = [t["seconds"] for t in public]
        figures["public_cli_delete"] = {"runs": public, "median_s": round(float(np.median(seconds)), 3),
                                        "max_s": round(max(seconds), 3), "public_access_read_s": reads}
    finally:
        service.close()
    figures["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=MUSIQUE_PASSAGES)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--poll", type=float, default=2.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--work", default=None, help="keep the store in this directory")
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="lightfoot-revocation-"))
    try:
        result = {"measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                  "revocation": run(Store(str(work / f"synthetic-{args.passages}")), args.passages, args.repeats,
                                    args.poll)}
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2, sort_keys=True))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
