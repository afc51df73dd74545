"""The invariants checked after a change, as an orchestrated run checks them: every passage of a
batch's documents accounted for (:func:`account_for_passages`), no reference dangling
(``dangling_references``, index/references.py) and the store equal to a fresh rebuild of its live
documents (:func:`check_exactness`: the whole store against a fresh rebuild,
:func:`compare_with_rebuild`, while a rebuild is cheap, and above that the components a run
changed, derived again, exactness.py; as a check of a staged snapshot before it is published,
:func:`rebuild_check`). Each returns what it found as ids, counts and digests (never a passage's
text or a failure's full reason, which may quote it).
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.index.references import dangling_references
from lightfoot_pipeline.ingest.extraction.outcome import FAILED, OK, reason_kind
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.operations.exactness import ChangeComparison, ExactnessBounds, compare_changes
from lightfoot_pipeline.operations.migration import rebuild
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.snapshot.format import SnapshotInfo
from lightfoot_pipeline.snapshot.verdict import CheckVerdict, StagedCheck
from lightfoot_pipeline.store.batches import ADDED, DELETED, REPLACED
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.scratch import new_scratch
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import BATCH_DOCUMENTS, DOCUMENTS, EXTRACTIONS, PASSAGES

__all__ = ["AUTO", "CHANGED", "EXACTNESS_MODES", "FULL", "FULL_REBUILD_LIMIT", "REBUILD_CHECK", "ExactnessBounds",
           "ExactnessVerdict", "PassageAccount", "RebuildComparison", "account_for_passages", "check_exactness",
           "compare_with_rebuild", "dangling_references", "latest_run", "live_documents", "rebuild_check",
           "rebuild_skip_reason"]


@dataclass
class PassageAccount:
    """Passages and their extractions: which documents have passages without one, with several,
    with an unknown status or with a failure that gives no reason."""

    store_commit: int
    passages: int = 0
    extracted: int = 0
    failed: int = 0
    missing: int = 0
    failed_without_reason: int = 0
    set_aside: int = 0  # passages of the documents left out (those of other runs mid-way)
    failure_reasons: dict[str, int] = field(default_factory=dict)  # kinds of reason, the ten most common
    problems: dict[str, list[str]] = field(default_factory=dict)  # what is wrong: the documents, sorted

    @property
    def passed(self) -> bool:
        return not any(self.problems.values())

    def describe(self, shown: int = 5) -> str | None:
        """What is wrong, naming the first ``shown`` documents of each problem (None when nothing is)."""
        return "; ".join(
            f"{len(docs)} documents have passages {what} ({', '.join(docs[:shown])}{', …' if len(docs) > shown else ''})"
            for what, docs in self.problems.items() if docs) or None


EXTRACTION_COLUMNS = ["chunk_id", "doc_id", "status", "reason"]  # what accounting for passages reads of them


def account_for_passages(store: Store, doc_ids: Iterable[str] | None = None,
                         set_aside: Iterable[str] = ()) -> PassageAccount:
    """Whether every live passage of these documents (of every document, when None, but those
    ``set_aside``) has exactly one extraction: a record, or a failure that says why."""
    manifest = store.manifest()
    if doc_ids is not None:
        ids = sorted(set(doc_ids))
        # The batch's buckets only: a batch's check reads what the batch wrote, not the store.
        passages = (store.rows(PASSAGES.name, "doc_id", ids, manifest) if ids else PASSAGES.empty()).select(
            "chunk_id", "doc_id")
        extractions = (store.rows(EXTRACTIONS.name, "doc_id", ids, manifest) if ids else EXTRACTIONS.empty()).select(
            EXTRACTION_COLUMNS)
        aside = passages.clear()
    else:
        passages = store.read_columns(PASSAGES.name, manifest, ["chunk_id", "doc_id"])
        others = sorted(set(set_aside))
        aside = passages.filter(pl.col("doc_id").is_in(others))
        passages = passages.filter(~pl.col("doc_id").is_in(others))
        extractions = store.read_columns(EXTRACTIONS.name, manifest, EXTRACTION_COLUMNS)
    extractions = extractions.filter(pl.col("chunk_id").is_in(passages.get_column("chunk_id").implode()))
    missing = passages.join(extractions, on="chunk_id", how="anti")
    duplicated = extractions.group_by("chunk_id").len().filter(pl.col("len") > 1)
    unknown_status = extractions.filter(~pl.col("status").is_in([OK, FAILED]))
    failed = extractions.filter(pl.col("status") == FAILED)
    unexplained = failed.filter(pl.col("reason").fill_null("").str.strip_chars() == "")
    # Kinds of reason, not reasons: a reason may quote the passage (extraction/outcome.py, reason_kind).
    kinds = Counter(reason_kind(r or "") for r in failed.get_column("reason").to_list())
    doc_of = dict(passages.select("chunk_id", "doc_id").iter_rows())

    def documents(chunk_ids: pl.Series) -> list[str]:
        return sorted({doc_of.get(c, c.rsplit("::", 1)[0]) for c in chunk_ids.to_list()})

    return PassageAccount(
        store_commit=manifest.seq, passages=passages.height,
        extracted=extractions.filter(pl.col("status") == OK).height, failed=failed.height, missing=missing.height,
        failed_without_reason=unexplained.height, set_aside=aside.height,
        failure_reasons=dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))[:10]),
        problems={
            "without an extraction": documents(missing.get_column("chunk_id")),
            "with a failure that gives no reason": documents(unexplained.get_column("chunk_id")),
            "with several extractions": documents(duplicated.get_column("chunk_id")),
            "with an unknown status": documents(unknown_status.get_column("chunk_id")),
        },
    )


def live_documents(store: Store) -> int:
    """How many documents the store holds."""
    return store.row_count(DOCUMENTS.name, store.manifest())


def rebuild_skip_reason(*, configured: bool, enabled: bool, mid_way: list[str]) -> str | None:
    """Why a change's comparison with a fresh build does not run, or None when it does: turned
    off for the run (``configured``) or for the store (``enabled``), or other runs ``mid_way``
    (documents or deletions committed, graph stage not yet run: the store then equals no rebuild
    until their own check compares it)."""
    if not configured:
        return "the rebuild comparison is disabled in this run's config"
    if not enabled:
        return "the rebuild comparison is turned off in the store resource (compare_with_rebuild)"
    if mid_way:
        several = len(mid_way) > 1
        return (f"run{'s' if several else ''} {', '.join(mid_way)} {'are' if several else 'is'} mid-way (documents "
                "or deletions committed, graph step not yet run): the store is compared by the check of a run "
                "that finds none mid-way")
    return None


@dataclass(frozen=True)
class RebuildComparison:
    """The store's fingerprint against a fresh rebuild's, and the tables that differ."""

    store_commit: int
    store_fingerprint: str
    rebuild_fingerprint: str
    differing: list[str]
    rows: dict[str, int]  # every fingerprinted table's rows in the store
    seconds: float


def compare_with_rebuild(store: Store, embedder: Embedder, settings: IndexSettings, *,
                         reuse_vector_cache: bool = True) -> RebuildComparison:
    """Rebuild a fresh index of the store's live documents and stored extractions in a scratch
    store (no model call; with ``reuse_vector_cache`` its name vectors are seeded from the store's,
    which depend on model and name only) and compare fingerprints table by table."""
    manifest = store.manifest()
    scratch = new_scratch("rebuild-check")
    try:
        target = Store(str(scratch / "store"), n_buckets=store.n_buckets)
        root = store.local_root()
        if reuse_vector_cache and root is not None and (root / "vectors").exists():
            shutil.copytree(root / "vectors", scratch / "store" / "vectors")
        started = time.perf_counter()
        rebuild(store, target, embedder, settings, manifest)
        seconds = time.perf_counter() - started
        mine, fresh = fingerprint(store, manifest), fingerprint(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return RebuildComparison(manifest.seq, mine.digest, fresh.digest, mine.differences(fresh),
                             {name: table.rows for name, table in mine.tables.items()}, seconds)


# How the exactness check compares: the whole store with a fresh rebuild (FULL), the components
# and facts a run changed and a sample of the rest (CHANGED), or FULL up to FULL_REBUILD_LIMIT live
# documents and CHANGED above (AUTO): a rebuild costs a full build, seconds below the limit
# (docs/deployment.md, "What each stage costs"), while CHANGED costs the change.
FULL, CHANGED, AUTO = "full", "changed", "auto"
EXACTNESS_MODES = (AUTO, FULL, CHANGED)
FULL_REBUILD_LIMIT = 20_000
# The tables each way compares (the full comparison: every fingerprinted table).
CHANGED_TABLES = ("forms", "fact_sources", "aliases", "entities", "mentions", "synonym_edges", "facts")


@dataclass(frozen=True)
class ExactnessVerdict:
    """What the exactness check compared, how, and what differed: ids, counts and digests."""

    mode: str  # FULL or CHANGED, as run
    live_documents: int
    full: RebuildComparison | None = None
    changes: ChangeComparison | None = None

    @property
    def differing(self) -> list[str]:
        """The tables that differ from a fresh build."""
        if self.full is not None:
            return self.full.differing
        assert self.changes is not None
        return [table for table, ids in self.changes.differing.items() if ids]

    @property
    def compared_tables(self) -> tuple[str, ...]:
        return tuple(self.full.rows) if self.full is not None else CHANGED_TABLES

    @property
    def passed(self) -> bool:
        return not self.differing

    @property
    def seconds(self) -> float:
        return self.full.seconds if self.full is not None else self.changes.seconds if self.changes else 0.0

    def describe(self) -> str:
        """One line: what was compared and the outcome (components and tables, never content)."""
        if self.changes is not None:
            return self.changes.summary()
        assert self.full is not None
        head = f"the whole store ({self.live_documents:,} live documents) against a fresh rebuild"
        return f"{head}; passed" if self.passed else f"{head}; differs in {', '.join(self.differing)}"

    def metadata(self) -> dict:
        """Plain values for an orchestrator: counts, sizes, seconds and digests."""
        common = {"mode": self.mode, "live_documents": self.live_documents, "seconds": round(self.seconds, 3),
                  "differing_tables": self.differing}
        if self.full is not None:
            return {**common, "store_commit": self.full.store_commit, "store_fingerprint": self.full.store_fingerprint,
                    "rebuild_fingerprint": self.full.rebuild_fingerprint, "rebuild_seconds": round(self.full.seconds, 3)}
        found = self.changes
        assert found is not None
        return {**common, "store_commit": found.store_commit, "run_documents": found.run_documents,
                "live_run_documents": found.live_run_documents, "compared_documents": found.compared_documents,
                "changed_names": found.changed_names, "changed_components": found.changed_components,
                "compared_changed_components": found.compared_changed, "sampled": found.sampled,
                "untouched_components": found.untouched_compared, "changed_facts": found.changed_facts,
                "compared_changed_facts": found.compared_facts, "untouched_facts": found.untouched_facts,
                "names_compared": found.names_compared, "rows_compared": found.rows,
                "store_digests": found.store_digests, "derived_digests": found.derived_digests,
                "differing": {t: ids[:20] for t, ids in found.differing.items() if ids},
                "unreadable_commits": found.unreadable_commits}


def check_exactness(store: Store, settings: IndexSettings, embedder: Callable[[], Embedder], *,
                    run_id: str | None, mode: str = AUTO, full_limit: int | None = FULL_REBUILD_LIMIT,
                    bounds: ExactnessBounds | None = None, reuse_vector_cache: bool = True) -> ExactnessVerdict:
    """Whether the store equals a fresh build, checked in the way ``mode`` says (AUTO: the whole
    store while it holds at most ``full_limit`` live documents, None: always; above it the
    components and facts run ``run_id`` changed, exactness.py). ``embedder()`` is called only for a
    whole-store rebuild."""
    if mode not in EXACTNESS_MODES:
        raise ValueError(f"exactness mode {mode!r}: expected one of {', '.join(EXACTNESS_MODES)}")
    live = live_documents(store)
    if mode == FULL or (mode == AUTO and (full_limit is None or live <= full_limit)):
        return ExactnessVerdict(FULL, live, full=compare_with_rebuild(store, embedder(), settings,
                                                                      reuse_vector_cache=reuse_vector_cache))
    return ExactnessVerdict(CHANGED, live, changes=compare_changes(store, settings, run_id, bounds=bounds))


def latest_run(store: Store) -> str | None:
    """The run of the newest document added, replaced or deleted in the store's batch log (None
    before the first): what a command-line check compares the changes of."""
    log = store.read_columns(BATCH_DOCUMENTS.name, store.manifest(), ["seq", "run_id", "action"])
    log = log.filter(pl.col("action").is_in([ADDED, REPLACED, DELETED]))
    return None if log.height == 0 else log.sort("seq").get_column("run_id")[-1]


REBUILD_CHECK = "matches_fresh_rebuild"


def rebuild_check(embedder: Callable[[], Embedder], settings: IndexSettings, *, mode: str = FULL,
                  reuse_vector_cache: bool = True) -> StagedCheck:
    """The exactness check as a check of a staged snapshot (snapshot/export.py:
    ``publish_checked``): the store the snapshot was exported from must equal a fresh index of its
    live documents, compared whole (FULL), by the components the newest run changed (CHANGED,
    :func:`latest_run`), or as AUTO chooses. Skipped when the store has changed since the export
    (the next export's check compares it)."""

    def matches_fresh_rebuild(store: Store, staged: SnapshotInfo) -> CheckVerdict:
        found = check_exactness(store, settings, embedder, run_id=latest_run(store), mode=mode,
                                reuse_vector_cache=reuse_vector_cache)
        metadata = {"snapshot_id": staged.snapshot_id, **found.metadata()}
        if found.full is not None:
            moved = found.full.store_fingerprint != staged.fingerprint
        else:  # a commit that changed no fingerprinted table leaves the snapshot current
            moved = metadata["store_commit"] != staged.store_seq and fingerprint(store).digest != staged.fingerprint
        if moved:
            return CheckVerdict(REBUILD_CHECK, passed=False, metadata=metadata,
                                skipped=f"the store has changed since the snapshot was exported (commit "
                                f"{staged.store_seq}, now {metadata['store_commit']}): the next export's check "
                                "compares it")
        return CheckVerdict(REBUILD_CHECK, passed=found.passed, reason=None if found.passed else found.describe(),
                            metadata=metadata)

    return matches_fresh_rebuild
