"""The partitions: one per ingestion batch. Documents are rows.

A drop in the inbox, the hourly schedule's pick-up of landed documents and a sync run are each a
partition of ``batches``. An erasure request or a day's retention run is a deletion run, named by
its key under the ``lightfoot/deletion`` tag, not a partition: the ``tombstones`` asset is one
deletion log whose materializations each name their run's key (a partition set of deletion runs is
empty until the first, and the UI shows an asset with no partition as "All" materialized, missing
and failed at once). Keys are opaque and content-free (lightfoot_pipeline/store/batches.py): the kind of
work and a digest or a time with random digits, such as ``drop-3f1c…`` (the drop's receipt id),
``sync-20261201t170501-9a0b1c2d`` or ``erase-…``. The store logs which batch added, replaced,
kept or deleted each document (``batch_documents``), so the per-batch assets read a batch's
documents from there, and a run writes one materialization per asset whatever its size.

An instance of the earlier layout (a ``documents`` partition per document) is migrated by
``python -m assets.migrate`` (assets/migrate.py); until then the sensors refuse to ask for runs.
"""

from __future__ import annotations

import hashlib

import dagster as dg

from assets.keys import BATCH_GROUP
from assets.provenance import STORE_POOL
from lightfoot_pipeline.ingest.receipts import ERASURE, INGESTION, Receipt
from lightfoot_pipeline.store.batches import check_batch_id

BATCHES = dg.DynamicPartitionsDefinition(name="batches")
# The per-document partitions of the earlier layout (assets/migrate.py removes them).
LEGACY_DOCUMENTS = "documents"
PARTITION_TAG = "dagster/partition"

# What every per-batch asset is (``@dg.asset(**PER_BATCH, deps=…, kinds=…)``): one partition per
# batch, in the documents group, writing through the store pool.
PER_BATCH = {"partitions_def": BATCHES, "group_name": BATCH_GROUP, "pool": STORE_POOL}

DROP, SYNC = "drop", "sync"  # kinds of ingestion batch (the hourly pick-up of landed documents is a drop)
ERASE, RETENTION = "erase", "retention"  # kinds of deletion run (their keys name no partition)


def receipt_batch(receipt: Receipt, kind: str | None = None) -> str:
    """The key of a receipt's batch: its kind and the receipt's id (a digest); a drop's partition,
    or the deletion a deletion run applies."""
    kind = kind or (DROP if receipt.kind == INGESTION else ERASE)
    return check_batch_id(f"{kind}-{receipt.receipt_id}")


def receipt_of(batch_id: str) -> tuple[str, str] | None:
    """The receipt kind and id a batch key names, or None for a batch with no receipt (a sync)."""
    kind, _, rest = batch_id.partition("-")
    if kind == DROP:
        return INGESTION, rest
    if kind in (ERASE, RETENTION):
        return ERASURE, rest
    return None


def sync_batch(changes: str, hour: str) -> str:
    """The key of a sync's batch: a digest of the changes it mirrors (their signature) and the hour,
    so the same changes get one batch an hour at most."""
    return check_batch_id(f"{SYNC}-{hashlib.sha256(f'{changes}-{hour}'.encode()).hexdigest()[:32]}")


def legacy_layout(instance: dg.DagsterInstance) -> bool:
    """Whether the instance still holds per-document partitions of the earlier layout."""
    return bool(instance.get_paginated_dynamic_partitions(LEGACY_DOCUMENTS, limit=1, ascending=True).results)


LEGACY_HINT = ("this Dagster instance holds a partition per document (the earlier layout): run "
               "`python -m assets.migrate` once (README: Migrating a Dagster instance)")
