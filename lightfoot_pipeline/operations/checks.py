"""The invariants checked after a change, as an orchestrated run checks them: every passage of a
batch's documents accounted for (:func:`account_for_passages`), no reference dangling
(``dangling_references``, index/references.py) and the store equal to a fresh rebuild of its live
documents (:func:`compare_with_rebuild`, and as a check of a staged snapshot before it is
published, :func:`rebuild_check`). Each returns what it found as ids,
counts and digests (never a passage's text or a failure's full reason, which may quote it).
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.index.references import dangling_references
from lightfoot_pipeline.ingest.extraction.outcome import FAILED, OK, reason_kind
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.operations.migration import rebuild
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.snapshot.format import SnapshotInfo
from lightfoot_pipeline.snapshot.verdict import CheckVerdict, StagedCheck
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.scratch import new_scratch
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENTS, EXTRACTIONS, PASSAGES

__all__ = ["REBUILD_CHECK", "PassageAccount", "RebuildComparison", "account_for_passages", "compare_with_rebuild",
           "dangling_references", "live_documents", "rebuild_check", "rebuild_skip_reason"]


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


def account_for_passages(store: Store, doc_ids: Iterable[str] | None = None,
                         set_aside: Iterable[str] = ()) -> PassageAccount:
    """Whether every live passage of these documents (of every document, when None, but those
    ``set_aside``) has exactly one extraction: a record, or a failure that says why."""
    manifest = store.manifest()
    if doc_ids is not None:
        ids = sorted(set(doc_ids))
        passages = (store.rows(PASSAGES.name, "doc_id", ids, manifest) if ids else PASSAGES.empty()).select(
            "chunk_id", "doc_id")
        aside = passages.clear()
    else:
        passages = store.read(PASSAGES.name, manifest, columns=["chunk_id", "doc_id"])
        others = sorted(set(set_aside))
        aside = passages.filter(pl.col("doc_id").is_in(others))
        passages = passages.filter(~pl.col("doc_id").is_in(others))
    extractions = store.read(EXTRACTIONS.name, manifest, columns=["chunk_id", "doc_id", "status", "reason"])
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
    return store.read(DOCUMENTS.name, columns=["doc_id"]).height


def rebuild_skip_reason(*, configured: bool, enabled: bool, live: int, limit: int | None,
                        mid_way: list[str]) -> str | None:
    """Why a change's comparison with a fresh rebuild does not run, or None when it does: turned
    off for the run (``configured``) or for the store (``enabled``), more than ``limit`` live
    documents (the ingestion job's limit; a deletion always compares), or other runs ``mid_way``
    (documents or deletions committed, graph stage not yet run: the store then equals no rebuild
    until their own check compares it)."""
    if not configured:
        return "the rebuild comparison is disabled in this run's config"
    if not enabled:
        return "the rebuild comparison is turned off in the store resource (compare_with_rebuild)"
    if limit is not None and live > limit:
        return (f"the store holds {live:,} live documents, more than the ingestion job's limit of {limit:,} "
                "(ingestion_limit); the deletion job always compares")
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


REBUILD_CHECK = "matches_fresh_rebuild"


def rebuild_check(embedder: Embedder, settings: IndexSettings, *, reuse_vector_cache: bool = True) -> StagedCheck:
    """The comparison with a fresh rebuild as a check of a staged snapshot (snapshot/export.py:
    ``publish_checked``): the store the snapshot was exported from must equal a fresh index of its
    live documents. Skipped when the store has changed since the export (the next export's check
    compares it)."""

    def matches_fresh_rebuild(store: Store, staged: SnapshotInfo) -> CheckVerdict:
        found = compare_with_rebuild(store, embedder, settings, reuse_vector_cache=reuse_vector_cache)
        metadata = {"snapshot_id": staged.snapshot_id, "store_commit": found.store_commit,
                    "store_fingerprint": found.store_fingerprint, "rebuild_fingerprint": found.rebuild_fingerprint,
                    "differing_tables": found.differing, "rebuild_seconds": round(found.seconds, 3)}
        if found.store_fingerprint != staged.fingerprint:
            return CheckVerdict(REBUILD_CHECK, passed=False, metadata=metadata,
                                skipped=f"the store has changed since the snapshot was exported (commit "
                                f"{staged.store_seq}, now {found.store_commit}): the next export's check compares it")
        reason = None if not found.differing else f"differs from a fresh rebuild in {', '.join(found.differing)}"
        return CheckVerdict(REBUILD_CHECK, passed=not found.differing, reason=reason, metadata=metadata)

    return matches_fresh_rebuild
