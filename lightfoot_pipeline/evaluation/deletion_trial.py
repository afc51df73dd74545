"""The deletion trial: delete a seeded fraction of a dataset and prove the result is exact.

:func:`run_trial` is what both ``lightfoot audit-deletion`` and ``lightfoot eval-deletion`` run:

1. Build the store of the whole dataset from its recorded extractions (no model call).
2. Delete a seeded random fraction of its documents through the engine's deletion path
   (``operations.delete``), timing it and counting the model calls (every language-model client of
   the process, :meth:`LLMClient.calls_started`) and embedder calls it makes: there are none.
3. Build a fresh store of the surviving documents only, in this process or, with an embedder
   spec, in a separate one (``lightfoot ingest``), which shares nothing in memory with the first.
4. Compare the two stores' fingerprints and per-table counts.

An ``observe`` callback sees the store at each phase — ``before`` the deletion, ``after`` it, and
the ``fresh`` build — which is where ``eval-deletion`` runs its questions (deletion_eval.py).
:func:`audit_deletion` is ``audit-deletion``'s report of the trial.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lightfoot_pipeline import operations
from lightfoot_pipeline.evaluation.harness import HarnessError
from lightfoot_pipeline.ingest.dataset import (
    CORPUS_FILE,
    EXTRACTIONS_FILE,
    DatasetError,
    Document,
    has_recorded_extractions,
    load_corpus,
    load_recorded_extractions,
)
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import Embedder, embedding_chunks
from lightfoot_pipeline.models.llm import LLMClient
from lightfoot_pipeline.store.fingerprint import Fingerprint, counts, fingerprint
from lightfoot_pipeline.store.scratch import new_scratch
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.vectors import EMBED_CHUNK

BEFORE, AFTER, FRESH = "before", "after", "fresh"
Observer = Callable[[str, Store], None]  # (phase, the store as it is in that phase)


class CountingEmbedder:
    """An embedder that counts the calls made to it and the texts it embeds."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.calls = 0
        self.texts = 0

    def chunks(self, texts: Sequence[str]) -> list[list[int]]:
        return embedding_chunks(self._inner, texts, EMBED_CHUNK)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        return self._inner.embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self.calls += 1
        self.texts += 1
        return self._inner.embed_query(text)


def choose_deletions(doc_ids: list[str], fraction: float, seed: int) -> list[str]:
    """A seeded random ``fraction`` of the documents (at least one), sorted."""
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


@dataclass
class Trial:
    """What the audit did and found: the builds, the deletion, the two fingerprints."""

    documents: list[Document]
    doomed: list[str]
    built: operations.IngestReport
    build_seconds: float
    counts_built: dict[str, int]  # table rows of the whole dataset's store
    deleted: operations.DeleteReport
    counts_deleted: dict[str, int]  # table rows after the deletion
    model_calls: int  # counted during the deletion, by every client of the process
    embedder_calls: int  # counted during the deletion
    fresh: Store
    fresh_seconds: float
    fresh_model_calls: int
    mine: Fingerprint  # the store after the deletion
    theirs: Fingerprint  # the fresh build of the survivors

    @property
    def fingerprint_equal(self) -> bool:
        return self.mine.digest == self.theirs.digest

    @property
    def survivors(self) -> list[Document]:
        doomed = set(self.doomed)
        return [d for d in self.documents if d.doc_id not in doomed]


def run_trial(
    dataset_dir: Path,
    full: Store,
    fresh: Store,
    embedder: Embedder,
    *,
    fraction: float = 0.1,
    seed: int = 0,
    separate_process: str | None = None,
    scratch: Path | None = None,
    observe: Observer | None = None,
    echo: Callable[[str], None] = lambda line: None,
) -> Trial:
    """Build, delete, build the survivors afresh, compare (the module docstring has the steps).

    ``separate_process`` is the embedder spec that ``lightfoot ingest`` builds the fresh store
    with in a separate process (the survivors' dataset is written under ``scratch`` first); None
    builds it here, with ``embedder``.
    """
    dataset_dir = Path(dataset_dir)
    if not has_recorded_extractions(dataset_dir):
        raise DatasetError(f"{dataset_dir} has no extractions.jsonl: the audit builds its stores with no model call")
    if separate_process is not None and scratch is None:
        raise ValueError("a fresh build in a separate process needs a scratch directory for the survivors")
    for store in (full, fresh):
        if store.exists():
            raise HarnessError(f"the audit builds its own stores; {store.uri} already holds one")
    documents = load_corpus(dataset_dir)
    records = load_recorded_extractions(dataset_dir)
    doomed = choose_deletions([d.doc_id for d in documents], fraction, seed)
    counting = CountingEmbedder(embedder)
    observe = observe or (lambda phase, store: None)

    started = time.perf_counter()
    built = operations.ingest(full, documents, ReplayExtractor(records), counting)
    build_seconds = round(time.perf_counter() - started, 3)
    counts_built = counts(full)
    echo(f"built {len(documents)} documents in {build_seconds}s with {built.model_calls} model calls")
    observe(BEFORE, full)

    models_before, embeds_before = LLMClient.calls_started(), counting.calls
    deleted = operations.delete(full, doomed, reason=f"deletion audit (fraction {fraction}, seed {seed})")
    model_calls, embedder_calls = LLMClient.calls_started() - models_before, counting.calls - embeds_before
    counts_deleted = counts(full)
    echo(f"deleted {len(deleted.deleted)} of {len(documents)} documents in {deleted.seconds:.2f}s with "
         f"{model_calls} model calls and {embedder_calls} embedder calls")
    observe(AFTER, full)

    doomed_set = set(doomed)
    survivors = [d for d in documents if d.doc_id not in doomed_set]
    started = time.perf_counter()
    if separate_process is None:
        fresh_model_calls = operations.ingest(fresh, survivors, ReplayExtractor(records), counting).model_calls
    else:
        fresh_model_calls = _ingest_elsewhere(dataset_dir, survivors, fresh, separate_process, scratch)
    fresh_seconds = round(time.perf_counter() - started, 3)
    mine, theirs = fingerprint(full), fingerprint(fresh)
    observe(FRESH, fresh)
    return Trial(documents=documents, doomed=doomed, built=built, build_seconds=build_seconds,
                 counts_built=counts_built, deleted=deleted, counts_deleted=counts_deleted, model_calls=model_calls,
                 embedder_calls=embedder_calls, fresh=fresh, fresh_seconds=fresh_seconds,
                 fresh_model_calls=fresh_model_calls, mine=mine, theirs=theirs)


def _ingest_elsewhere(dataset_dir: Path, survivors: Sequence[Document], fresh: Store, embedder_spec: str,
                      scratch: Path) -> int:
    """``lightfoot ingest`` of the survivors into ``fresh`` in a separate process; its model calls."""
    subset = scratch / "survivors"
    write_subset(dataset_dir, {d.doc_id for d in survivors}, subset)
    command = [sys.executable, "-m", "lightfoot_pipeline.cli", "ingest", "--dataset", str(subset),
               "--store", fresh.uri, "--embedder", embedder_spec, "--extractor", "replay", "--json"]
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        raise RuntimeError(f"the fresh build of the survivors failed:\n{completed.stderr[-4000:]}")
    return int(json.loads(completed.stdout).get("model_calls", 0))


def audit_deletion(dataset_dir: Path, store: Store, embedder: Embedder, embedder_spec: str, fraction: float = 0.1,
                   seed: int = 0, work_dir: Path | None = None) -> dict:
    """``lightfoot audit-deletion``: the trial with the fresh build in a separate process, as a report.

    The survivors' dataset and the fresh store stay in ``work_dir`` for inspection when one is
    given; otherwise they are built in a temporary directory, removed at the end (they copy the
    documents' text, which a temporary directory would otherwise keep after the audit).
    """
    keep = work_dir is not None
    scratch = Path(work_dir) if work_dir is not None else new_scratch("audit")
    fresh = Store(str(scratch / "fresh-store"))
    try:
        trial = run_trial(dataset_dir, store, fresh, embedder, fraction=fraction, seed=seed,
                          separate_process=embedder_spec, scratch=scratch)
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return {
        "dataset": str(dataset_dir),
        "fraction": fraction,
        "seed": seed,
        "embedder": embedder.model_id,
        "fingerprint_equal": trial.fingerprint_equal,
        "tables_differing": trial.mine.differences(trial.theirs),
        "fingerprint_after_delete": trial.mine.digest,
        "fingerprint_fresh": trial.theirs.digest,
        "deleted_docs": len(trial.deleted.deleted),
        "surviving_docs": len(trial.survivors),
        "deleted_doc_ids": trial.deleted.deleted,
        "counts_full_store": trial.counts_built,
        "counts_after_delete": trial.mine.counts(),
        "counts_fresh_store": trial.theirs.counts(),
        "counts_after_delete_tables": trial.counts_deleted,
        "build_seconds": trial.build_seconds,
        "delete_seconds": round(trial.deleted.seconds, 3),
        "rebuild_seconds": trial.fresh_seconds,
        "model_calls": trial.model_calls,
        "reported_model_calls": trial.deleted.model_calls,
        "embedder_calls": trial.embedder_calls,
        "build_model_calls": trial.built.model_calls,
        "rebuild_model_calls": trial.fresh_model_calls,
        "graph_change": trial.deleted.graph.as_dict(),
        "fresh_store": fresh.uri if keep else None,
        "work_dir": str(scratch) if keep else None,
    }
