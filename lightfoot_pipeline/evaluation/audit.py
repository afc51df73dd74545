"""The deletion audit: delete a seeded fraction of a dataset and prove the result is exact.

1. Build the store of the whole dataset (model-free when the dataset has recorded extractions).
2. Delete a seeded random fraction of its documents through the engine's deletion path, timing it
   and counting model calls (there are none).
3. In a separate process, build a fresh store of the surviving documents only.
4. Compare the two stores' fingerprints and per-table counts.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lightfoot_pipeline import pipeline
from lightfoot_pipeline.ingest.dataset import CORPUS_FILE, EXTRACTIONS_FILE, load_corpus, load_recorded_extractions
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.store import Store


def choose_deletions(doc_ids: list[str], fraction: float, seed: int) -> list[str]:
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be between 0 and 1, got {fraction}")
    count = max(1, round(len(doc_ids) * fraction))
    return sorted(random.Random(seed).sample(sorted(doc_ids), count))


def write_subset(dataset_dir: Path, keep: set[str], target: Path) -> None:
    """A dataset directory holding only the kept documents (and their recorded extractions)."""
    target.mkdir(parents=True, exist_ok=True)
    for name in (CORPUS_FILE, EXTRACTIONS_FILE):
        source = dataset_dir / name
        if not source.exists():
            continue
        with source.open(encoding="utf-8") as src, (target / name).open("w", encoding="utf-8") as dst:
            for line in src:
                if line.strip() and json.loads(line).get("doc_id") in keep:
                    dst.write(line)


def audit_deletion(
    dataset_dir: Path,
    store: Store,
    embedder: Embedder,
    embedder_spec: str,
    fraction: float = 0.1,
    seed: int = 0,
    settings: IndexSettings | None = None,
    work_dir: Path | None = None,
) -> dict:
    settings = settings or IndexSettings()
    documents = load_corpus(dataset_dir)
    records = load_recorded_extractions(dataset_dir)
    if store.exists():
        raise RuntimeError(f"the audit builds its own store; {store.uri} already holds one")

    started = time.perf_counter()
    built = pipeline.ingest(store, documents, ReplayExtractor(records), embedder, settings)
    build_seconds = time.perf_counter() - started
    counts_before = pipeline.counts(store)

    doomed = choose_deletions([d.doc_id for d in documents], fraction, seed)
    deleted = pipeline.delete(store, doomed, settings, reason=f"deletion audit (fraction {fraction}, seed {seed})")
    counts_after = pipeline.counts(store)

    scratch = Path(work_dir or tempfile.mkdtemp(prefix="lightfoot-audit-"))
    survivors = scratch / "survivors"
    fresh_uri = str(scratch / "fresh-store")
    shutil.rmtree(survivors, ignore_errors=True)
    shutil.rmtree(fresh_uri, ignore_errors=True)
    keep = {d.doc_id for d in documents} - set(doomed)
    write_subset(dataset_dir, keep, survivors)
    started = time.perf_counter()
    command = [sys.executable, "-m", "lightfoot_pipeline.cli", "ingest", "--dataset", str(survivors),
               "--store", fresh_uri, "--embedder", embedder_spec, "--extractor", "replay", "--json"]
    completed = subprocess.run(command, capture_output=True, text=True)
    rebuild_seconds = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(f"the fresh build of the survivors failed:\n{completed.stderr[-4000:]}")
    fresh_report = json.loads(completed.stdout)
    fresh = Store(fresh_uri)

    mine, theirs = pipeline.fingerprint(store), pipeline.fingerprint(fresh)
    return {
        "dataset": str(dataset_dir),
        "fraction": fraction,
        "seed": seed,
        "embedder": embedder.model_id,
        "fingerprint_equal": mine.digest == theirs.digest,
        "tables_differing": mine.differences(theirs),
        "fingerprint_after_delete": mine.digest,
        "fingerprint_fresh": theirs.digest,
        "deleted_docs": len(deleted.deleted),
        "surviving_docs": len(keep),
        "deleted_doc_ids": deleted.deleted,
        "counts_full_store": counts_before,
        "counts_after_delete": mine.counts(),
        "counts_fresh_store": theirs.counts(),
        "counts_after_delete_tables": counts_after,
        "build_seconds": round(build_seconds, 3),
        "delete_seconds": round(deleted.seconds, 3),
        "rebuild_seconds": round(rebuild_seconds, 3),
        "model_calls": deleted.model_calls,
        "build_model_calls": built.model_calls,
        "rebuild_model_calls": fresh_report.get("model_calls", 0),
        "graph_change": deleted.graph.as_dict(),
        "fresh_store": fresh_uri,
    }
