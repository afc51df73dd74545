"""What the definitions know of batches: the batch a step writes in, and what a deletion does to
the batch partitions that held the deleted documents (their counts are the engine's:
lightfoot_pipeline/operations/batches.py).

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import dagster as dg

from assets.keys import DELETION_TAG, PER_BATCH_ASSETS
from assets.partitions import BATCHES, PARTITION_TAG
from lightfoot_pipeline.operations.batches import batch_deletions
from lightfoot_pipeline.store.batches import DAGSTER, Batch, writing_batch
from lightfoot_pipeline.store.store import Store

TOMBSTONED = "tombstoned"


def run_batch_id(run: dg.DagsterRun) -> str:
    """The batch a run's commits belong to: its partition, the deletion a deletion run applies
    (its tag), or ``run-<run id>``."""
    return run.tags.get(PARTITION_TAG) or run.tags.get(DELETION_TAG) or f"run-{run.run_id}"


@contextlib.contextmanager
def dagster_batch(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> Iterator[Batch]:
    """Within the block, store commits record the run's batch and run id, made by Dagster."""
    run = context.run
    with writing_batch(Batch(run_batch_id(run), run.run_id, DAGSTER)) as batch:
        yield batch


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


def deletion_events(store: Store, instance: dg.DagsterInstance, deleted: Sequence[str], seq: int, *,
                    unrecorded_only: bool = False) -> DeletionEvents:
    """Observations of the per-batch assets of every batch that held one of the ``deleted``
    documents (counts of its deleted and live documents), and the batches left empty.

    The counts are the observation's own (``documents_live`` and ``documents_deleted`` appear in no
    materialization), so a batch's panel shows one value of each. With ``unrecorded_only``, a
    batch that keeps live documents and whose latest tombstone observation already counts as many
    deleted documents as it has now is left out: those deletions are recorded. (A batch left empty
    is never left out: its partition must go.)"""
    out = DeletionEvents()
    for batch in batch_deletions(store, deleted):
        if not instance.has_dynamic_partition(BATCHES.name, batch.batch_id):
            continue
        if unrecorded_only and batch.live and recorded_deletions(instance, batch.batch_id) == batch.deleted:
            continue
        (out.touched if batch.live else out.emptied).append(batch.batch_id)
        for key in PER_BATCH_ASSETS:
            out.observations.append(dg.AssetObservation(
                asset_key=key, partition=batch.batch_id,
                description="tombstone: every document of the batch is deleted" if not batch.live
                else f"tombstone: {batch.deleted_now} documents of the batch deleted",
                metadata={"status": dg.MetadataValue.text(TOMBSTONED if not batch.live else "partly deleted"),
                          "documents_deleted": dg.MetadataValue.int(batch.deleted),
                          "documents_deleted_now": dg.MetadataValue.int(batch.deleted_now),
                          "documents_live": dg.MetadataValue.int(batch.live),
                          "deletion_commit": dg.MetadataValue.int(seq)},
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
