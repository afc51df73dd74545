"""Hard erasure: after a deletion, remove the deleted text from everything the store keeps.

A deletion commit already removes the documents' rows from the current version of every table.
Erasure also removes what history and caches still hold:

1. extraction-cache entries that no live passage uses (the deleted passages' answers);
2. cached vectors (names, passages, facts) that no live row uses;
3. every Delta data file and log entry that the current table versions do not need (vacuum with
   zero retention, then a checkpoint and log clean-up);
4. every old LanceDB version and unreferenced data file;
5. the landed copies of documents that came through an inbox (landing.py);
6. every serving snapshot that holds an erased document (snapshot/export.py; a fresh one replaces the
   published one first);
7. the keys and links that relink runs staged (relink.py), whether or not they are still running;
8. the files of extraction batches that hold the text at the provider (batch_extraction.py: an open
   batch is cancelled, and every file of a batch holding the text is deleted there);
9. the scratch folders on this host (a check's fresh rebuild, an audit's stores, a batch's request
   file) whose process was killed before it could remove them (store/scratch.py);

and only then marks the tombstones as erased (``erased_at``; a document whose text a provider's
file may still hold, with no endpoint configured or a cancelled batch still cancelling, stays
pending, and ``lightfoot status`` lists the provider files), and vacuums what that commit left
of the deletion log's earlier version. After it, no file under the store root holds the text;
the tests plant a canary string and search every file for it.

An erasure asked for and not finished (its deletion committed, then the process stopped, or a
step above failed) is pending: a tombstone with ``erase`` and no ``erased_at``
(:func:`pending_erasures`). Every erase and vacuum finishes the pending ones too, and so does a
``sync`` whenever any is pending; ``lightfoot status`` lists them. (A plain ``delete`` does not
look: it reads only the buckets its documents touch.)

Steps 1-4 keep only what the live rows use, and step 6 also removes snapshots that hold the
earlier text of a document ingested again: so every erase, and :func:`vacuum` (``lightfoot
vacuum``, an erase of no document), also purges the text that re-ingesting a document replaced.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import polars as pl
import pyarrow as pa

from lightfoot_pipeline.index.facts import fact_text
from lightfoot_pipeline.index.link_pieces import remove_relink_staging
from lightfoot_pipeline.ingest.extraction.cache import ExtractionCache
from lightfoot_pipeline.ingest.landing import Landing
from lightfoot_pipeline.operations.batch_extraction import erase_at_provider, provider_api_from_env
from lightfoot_pipeline.snapshot.export import erase_from_snapshots
from lightfoot_pipeline.snapshot.format import passage_text
from lightfoot_pipeline.snapshot.verdict import StagedCheck
from lightfoot_pipeline.store.scratch import sweep_stale_scratch
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import ALIASES, DOCUMENTS, EXTRACTIONS, FACTS, PASSAGES, TOMBSTONES, erasure_owed
from lightfoot_pipeline.store.vectors import cleanup_vector_history, keys_of, purge_vector_caches


@dataclass
class EraseReport:
    documents: list[str] = field(default_factory=list)
    cache_entries_purged: int = 0
    provider_batches_cancelled: int = 0
    provider_files_deleted: int = 0
    provider_held: list[str] = field(default_factory=list)  # documents a provider's file may still hold
    vectors_purged: dict[str, int] = field(default_factory=dict)
    files_vacuumed: dict[str, int] = field(default_factory=dict)
    landed_copies_removed: int = 0
    snapshots_removed: int = 0
    scratch_removed: int = 0  # scratch folders of killed processes on this host
    erased_at: str = ""

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> dict:
        """The report as counts and a digest of the erased ids, never the ids themselves: what an
        orchestrator may keep for good, of a report that grows with the erasure."""
        return {
            "erased_count": len(self.documents),
            "erased_ids_digest": hashlib.sha256("\n".join(sorted(self.documents)).encode()).hexdigest()[:16],
            "cache_entries_purged": self.cache_entries_purged,
            "vectors_purged": sum(self.vectors_purged.values()),
            "files_vacuumed": sum(self.files_vacuumed.values()),
            "landed_copies_removed": self.landed_copies_removed,
            "snapshots_removed": self.snapshots_removed,
            "scratch_removed": self.scratch_removed,
            "provider_batches_cancelled": self.provider_batches_cancelled,
            "provider_files_deleted": self.provider_files_deleted,
            "provider_held_count": len(self.provider_held),
        }


def live_vector_keys(store: Store) -> dict[str, pa.Array]:
    """The cache keys of the texts whose vectors the live index uses, by cache kind: only the
    columns that make the texts are read, and their rows are hashed a chunk at a time
    (``keys_of``)."""
    manifest = store.manifest()
    # One table's columns held at a time: each is read, hashed and dropped before the next.
    return {
        "name": keys_of(store.read_columns(ALIASES.name, manifest, ["name"]).unique(), lambda name: name),
        "passage": keys_of(store.read_columns(PASSAGES.name, manifest, ["title", "text"]), passage_text),
        "fact": keys_of(store.read_columns(FACTS.name, manifest, ["subject", "predicate", "object"]), fact_text),
    }


def pending_erasures(store: Store) -> list[str]:
    """Deleted documents whose deletion asked for an erasure of their history not finished yet (a
    document stored again since is left out)."""
    manifest = store.manifest()
    if store.tally(TOMBSTONES.name, "erasures_owed", manifest) == 0:  # the store log says: none
        return []
    log = store.read_columns(TOMBSTONES.name, manifest, ["doc_id", "erase", "erased_at"])  # only these
    owed = set(log.filter(erasure_owed()).get_column("doc_id").to_list())
    if not owed:
        return []
    live = set(store.rows(DOCUMENTS.name, "doc_id", owed).get_column("doc_id").to_list())
    return sorted(owed - live)


def vacuum(store: Store, *, snapshot_checks: Sequence[StagedCheck] = ()) -> EraseReport:
    """Remove from the store's history, caches and snapshots everything no live row uses.

    An erase of no document but the pending ones: the text of documents deleted without an erase,
    and the earlier text of documents that were ingested again, leaves the store. No other
    tombstone changes.
    """
    return erase_history(store, [], snapshot_checks=snapshot_checks)


def erase_history(store: Store, doc_ids: Sequence[str], *, snapshot_checks: Sequence[StagedCheck] = (),
                  batch_api=None) -> EraseReport:
    """Erase the history of the deleted ``doc_ids`` and of every pending erasure (and whatever
    else no live row uses); the tombstones are marked erased once nothing holds the text. A
    published snapshot that holds them is replaced by a fresh one that must pass
    ``snapshot_checks`` to be published (snapshot/export.py: ``erase_from_snapshots``).
    ``batch_api``: the provider's Batch API whose files may hold the text (default: the one the
    environment names, if any)."""
    ids = sorted(set(doc_ids) | set(pending_erasures(store)))
    report = EraseReport(documents=ids)
    at_provider = erase_at_provider(store, ids, (lambda: batch_api) if batch_api is not None else provider_api_from_env)
    report.provider_batches_cancelled = len(at_provider.cancelled)
    report.provider_files_deleted = at_provider.files_deleted
    report.provider_held = at_provider.still_held
    manifest = store.manifest()
    live_keys = store.read_columns(EXTRACTIONS.name, manifest, ["cache_key"]).get_column("cache_key").to_list()
    report.cache_entries_purged = ExtractionCache(store).purge_except(k for k in live_keys if k)
    report.vectors_purged = purge_vector_caches(store, live_vector_keys(store))
    report.landed_copies_removed = Landing(store).forget(ids)  # documents that came through an inbox
    # Serving copies of the text: of the erased documents, and earlier versions of re-ingested ones.
    report.snapshots_removed = erase_from_snapshots(store, ids, replaced_text=True, checks=snapshot_checks)
    remove_relink_staging(store)  # staged links are derived from names that may be erased now
    report.scratch_removed = len(sweep_stale_scratch())  # copies a killed check or audit left
    report.files_vacuumed = store.vacuum()
    cleanup_vector_history(store)
    erased = [d for d in ids if d not in set(report.provider_held)]
    if erased:
        report.erased_at = mark_erased(store, erased).isoformat()
    return report



def mark_erased(store: Store, doc_ids: Sequence[str]) -> dt.datetime:
    """Commit ``erased_at`` on the documents' tombstones that lack it, then vacuum the deletion
    log and the store log, so that no earlier version of either is left behind."""
    now = dt.datetime.now(dt.UTC)
    with store.transaction() as tx:  # the rows of these ids only: their buckets are rewritten
        unmarked = pl.col("doc_id").is_in(list(doc_ids)) & pl.col("erased_at").is_null()
        rows = tx.rows(TOMBSTONES.name, "doc_id", doc_ids).filter(unmarked)
        tx.update(TOMBSTONES.name, remove=unmarked,
                  add=rows.with_columns(pl.lit(now, dtype=pl.Datetime("us", "UTC")).alias("erased_at")))
        tx.commit("erase", {"documents": len(doc_ids)})
    store.vacuum(only={TOMBSTONES.name, "store_log"})
    return now
