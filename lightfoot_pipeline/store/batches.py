"""Ingestion batches: which batch, run and store commit added, replaced, kept, gave other readers to
or deleted each document.

A batch is one unit of ingestion or deletion work: an inbox drop, a sync run, a dataset ingest, a
deletion or retention run. It has an opaque id that says what kind of work it is and nothing of
its content (``drop-3f1c…``, ``cli-ingest-20261201T170501-9a0b…``); in Dagster it is the
partition key of the per-batch assets (assets/partitions.py).

Work done for a batch runs inside :func:`writing_batch`. Every store commit made there records
the batch, the run and who ran it (``by``: ``dagster`` or ``cli``) in the store log's details,
and the document changes it stages are logged in ``batch_documents`` (one row per batch,
document, action and commit). That table holds ids, commit numbers and times, never content: it
outlives an erasure, as the deletion log does, and says which batches and runs produced or
changed a document, and so which made an entity or fact (through the passages that mention it).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import re
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.store.tables import BATCH_DOCUMENTS, with_buckets

ADDED, REPLACED, UNCHANGED, DELETED = "added", "replaced", "unchanged", "deleted"
READERS = "readers"  # only the document's readers changed: its text, passages and extractions are as they were
ACTIONS = (ADDED, REPLACED, UNCHANGED, READERS, DELETED)
PRODUCED = (ADDED, REPLACED)  # the actions that put a document's current text in the store
DAGSTER, CLI = "dagster", "cli"
# A batch id: lower-case words, digits and dashes, at most 64 characters (a Dagster partition key).
BATCH_ID = re.compile(r"^[a-z][a-z0-9-]{2,63}$")


@dataclass(frozen=True)
class Batch:
    """The batch a piece of work belongs to, the run doing it, and what runs it (dagster or cli)."""

    batch_id: str
    run_id: str
    by: str = CLI
    # The store commits made in it by this process, oldest first (note_commit adds each).
    commits: list[int] = field(default_factory=list, compare=False, repr=False)

    def details(self) -> dict[str, str]:
        return {"batch": self.batch_id, "run_id": self.run_id, "by": self.by}


_current: contextvars.ContextVar[Batch | None] = contextvars.ContextVar("lightfoot_batch", default=None)


def new_batch_id(kind: str, now: dt.datetime | None = None) -> str:
    """A fresh batch id: its kind, the UTC time to the second, and 8 random hex digits."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dt%H%M%S")
    batch_id = f"{kind}-{stamp}-{secrets.token_hex(4)}"
    check_batch_id(batch_id)
    return batch_id


def check_batch_id(batch_id: str) -> str:
    if not BATCH_ID.match(batch_id or ""):
        raise ValueError(f"not a batch id: {batch_id!r} (lower-case letters, digits and dashes, at most 64)")
    return batch_id


@contextlib.contextmanager
def writing_batch(batch: Batch) -> Iterator[Batch]:
    """Within the block, store commits record ``batch`` and document changes are logged under it."""
    check_batch_id(batch.batch_id)
    token = _current.set(batch)
    try:
        yield batch
    finally:
        _current.reset(token)


def current_batch() -> Batch | None:
    return _current.get()


def commit_details() -> dict[str, str]:
    """What a commit records of the batch it is made in (nothing outside one)."""
    batch = _current.get()
    return batch.details() if batch is not None else {}


def note_commit(seq: int) -> None:
    """Count store commit ``seq`` among the current batch's commits (the transaction calls it once
    the commit's log row is written). Outside a batch, nothing."""
    batch = _current.get()
    if batch is not None:
        batch.commits.append(seq)


def log_documents(tx, actions: dict[str, Iterable[str]]) -> None:
    """Stage, for the current batch, one row per document and action (``added``, ``replaced``,
    ``unchanged``, ``readers``, ``deleted``) in the commit the transaction makes next. Outside a batch,
    nothing."""
    batch = _current.get()
    if batch is None:
        return
    seq = tx.manifest.seq + 1  # every commit lands on the version after the one it read
    now = dt.datetime.now(dt.UTC)
    rows = [{"batch": batch.batch_id, "doc_id": d, "action": action, "seq": seq, "run_id": batch.run_id, "at": now}
            for action, ids in actions.items() for d in sorted(set(ids))]
    if not rows:
        return
    frame = pl.DataFrame(rows, schema={"batch": pl.String, "doc_id": pl.String, "action": pl.String,
                                       "seq": pl.Int64, "run_id": pl.String, "at": pl.Datetime("us", "UTC")})
    tx.update(BATCH_DOCUMENTS.name, add=with_buckets(frame, BATCH_DOCUMENTS, tx.n_buckets))


def batch_log(store, manifest=None) -> pl.DataFrame:
    """Every row of ``batch_documents`` (batch, doc_id, action, seq, run_id, at)."""
    return store.read(BATCH_DOCUMENTS.name, manifest, columns=list(BATCH_DOCUMENTS.columns))


def documents_of_batch(store, batch_id: str, manifest=None) -> pl.DataFrame:
    """A batch's rows, oldest first."""
    return batch_log(store, manifest).filter(pl.col("batch") == batch_id).sort("seq", "doc_id", "action")


def batches_of_documents(store, doc_ids: Iterable[str], manifest=None) -> pl.DataFrame:
    """The rows of these documents in every batch, oldest first (read from their buckets only)."""
    ids = sorted(set(doc_ids))
    if not ids:
        return BATCH_DOCUMENTS.empty().drop("bucket")
    rows = store.rows(BATCH_DOCUMENTS.name, "doc_id", ids, manifest)
    return rows.filter(pl.col("doc_id").is_in(ids)).select(BATCH_DOCUMENTS.columns).sort("seq", "batch", "doc_id")


def holding_batches(store, doc_ids: Iterable[str], manifest=None) -> dict[str, str]:
    """For each document, the batch whose text of it is the current one: the latest batch that
    added or replaced it (a document re-dropped unchanged stays with the batch that produced it)."""
    rows = batches_of_documents(store, doc_ids, manifest).filter(pl.col("action").is_in(list(PRODUCED)))
    return {r["doc_id"]: r["batch"] for r in rows.sort("seq").iter_rows(named=True)}
