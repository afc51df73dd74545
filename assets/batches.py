"""What the definitions know of batches: the batch a step writes in, a batch's documents and
counts, its link, and what a deletion does to the batches that held the deleted documents.

Every store commit a step makes is made inside :func:`dagster_batch`: the store log then records
the batch (the run's partition, or ``run-<run id>`` for a run with none), the Dagster run id and
``by: dagster`` (lightfoot_pipeline/store/batches.py), which is how the page and ``explain`` show
the runs that produced a document, and how the store-log observation tells Dagster's commits
from the command line's.

A deletion is a tombstone within the batches that held the document: each such batch's
per-batch assets get an observation that counts its deleted and live documents, and a batch
whose documents are all deleted is tombstoned as a whole: its partition is removed at once, so
nothing deleted shows as materialized (:func:`deletion_events`). The instance keeps those
observations, so it also says which deletions a batch's tombstone counts already
(:func:`recorded_deletions`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import dagster as dg
import polars as pl

from assets.keys import PER_BATCH_ASSETS
from assets.partitions import BATCHES, PARTITION_TAG
from lightfoot_pipeline.store.batches import (
    DAGSTER,
    DELETED,
    READERS,
    Batch,
    batch_log,
    documents_of_batch,
    holding_batches,
    writing_batch,
)
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.store import Store

TOMBSTONED = "tombstoned"


def run_batch_id(run: dg.DagsterRun) -> str:
    """The batch a run's commits belong to: its partition, or ``run-<run id>``."""
    return run.tags.get(PARTITION_TAG) or f"run-{run.run_id}"


@contextlib.contextmanager
def dagster_batch(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> Iterator[Batch]:
    """Within the block, store commits record the run's batch and run id, made by Dagster."""
    run = context.run
    with writing_batch(Batch(run_batch_id(run), run.run_id, DAGSTER)) as batch:
        yield batch


def batch_doc_ids(store: Store, batch_id: str, manifest=None) -> list[str]:
    """The live documents a batch added, replaced or kept, sorted."""
    rows = documents_of_batch(store, batch_id, manifest).filter(pl.col("action") != DELETED)
    ids = set(rows.get_column("doc_id").to_list())
    return sorted(live_doc_ids(store, manifest, among=ids)) if ids else []


def batch_counts(store: Store, batch_id: str, manifest=None) -> dict[str, int]:
    """A batch's documents by what it did to them, and how many of them are live now."""
    rows = documents_of_batch(store, batch_id, manifest)
    latest = rows.sort("seq").unique("doc_id", keep="last")
    by_action = dict(latest.group_by("action").len().iter_rows())
    held = set(rows.filter(pl.col("action") != DELETED).get_column("doc_id").to_list())
    live = live_doc_ids(store, manifest, among=held) if held else set()
    return {
        "documents": len(held),
        "added": int(by_action.get("added", 0)),
        "replaced": int(by_action.get("replaced", 0)),
        "unchanged": int(by_action.get("unchanged", 0)),
        "readers_changed": int(by_action.get(READERS, 0)),
        "deleted_by_batch": int(by_action.get(DELETED, 0)),
        "live": len(live),
        "deleted_since": len(held) - len(live),
    }


@dataclass
class DeletionEvents:
    """What deleting documents does to the batch partitions that held them."""

    observations: list[dg.AssetObservation] = field(default_factory=list)
    emptied: list[str] = field(default_factory=list)  # batches whose documents are all deleted
    touched: list[str] = field(default_factory=list)  # batches that keep live documents


def recorded_deletions(instance: dg.DagsterInstance, batch_id: str) -> int | None:
    """How many deleted documents the latest tombstone observation of a batch counts (None before
    its first), whoever recorded it: a deletion run's step, a sync's, or the outside deletions sensor."""
    records = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=PER_BATCH_ASSETS[0], asset_partitions=[batch_id]), limit=1).records
    observation = records[0].asset_observation if records else None
    value = observation.metadata.get("documents_deleted") if observation is not None else None
    return value.value if value is not None and isinstance(value.value, int) else None


def deletion_events(store: Store, instance: dg.DagsterInstance, deleted: Iterable[str], seq: int, *,
                    unrecorded_only: bool = False) -> DeletionEvents:
    """Observations of the per-batch assets of every batch that held one of the ``deleted``
    documents (counts of its deleted and live documents), and the batches left empty.

    With ``unrecorded_only``, a batch that keeps live documents and whose latest tombstone
    observation already counts as many deleted documents as it has now is left out: those
    deletions are recorded. (A batch left empty is never left out: its partition must go.)"""
    holders = holding_batches(store, deleted)
    out = DeletionEvents()
    if not holders:
        return out
    log = batch_log(store)
    live_now = live_doc_ids(store)
    for batch_id in sorted(set(holders.values())):
        if not instance.has_dynamic_partition(BATCHES.name, batch_id):
            continue
        held = set(log.filter((pl.col("batch") == batch_id) & (pl.col("action") != DELETED))
                   .get_column("doc_id").to_list())
        live = len(held & live_now)
        if unrecorded_only and live and recorded_deletions(instance, batch_id) == len(held) - live:
            continue
        gone = sum(1 for d, b in holders.items() if b == batch_id)
        (out.touched if live else out.emptied).append(batch_id)
        for key in PER_BATCH_ASSETS:
            out.observations.append(dg.AssetObservation(
                asset_key=key, partition=batch_id,
                description="tombstone: every document of the batch is deleted" if not live
                else f"tombstone: {gone} documents of the batch deleted",
                metadata={"status": dg.MetadataValue.text(TOMBSTONED if not live else "partly deleted"),
                          "documents_deleted": dg.MetadataValue.int(len(held) - live),
                          "documents_deleted_now": dg.MetadataValue.int(gone),
                          "documents_live": dg.MetadataValue.int(live),
                          "store_commit": dg.MetadataValue.int(seq)},
            ))
    return out


def apply_deletion_events(context: dg.AssetExecutionContext, events: DeletionEvents) -> None:
    """Log the observations and remove the emptied batches' partitions, from within a step."""
    for event in events.observations:
        context.log_event(event)
    for batch_id in events.emptied:
        context.instance.delete_dynamic_partition(BATCHES.name, batch_id)
    if events.emptied or events.touched:
        context.log.info(f"deletion: {len(events.emptied)} batches tombstoned as a whole, {len(events.touched)} "
                         "keep live documents")
