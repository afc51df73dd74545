"""Migrate a Dagster instance from a partition per document to a partition per batch.

    DAGSTER_HOME=… python -m assets.migrate [--store URI] [--dry-run]

Instances made before batches held one ``documents`` partition per document, with per-document
materializations of ``passages``, ``extraction_cache``, ``extractions`` and ``forms``. The
migration, run once with the daemon and webserver stopped:

1. refuses while an ingestion, sync or deletion run is queued or running;
2. gives the store's live documents that no batch holds a batch of their own,
   ``migrated-<digest>`` (one store commit that logs them in ``batch_documents``; no model call);
3. wipes the event history of the four per-document assets (what older versions wrote there
   included document titles, which Dagster's storage would otherwise keep after an erasure) and
   removes every ``documents`` partition;
4. adds the migrated batch as a partition and records one materialization of each per-batch asset
   for it that counts its documents, so the UI shows where the store's documents came from.

The store is not otherwise touched: its log keeps the history of every commit. Pending drops and
erasure requests are asked again under their batches by the sensors once the daemon is back.
Until the migration has run, the sensors and schedules refuse to ask for runs and say why.
"""

from __future__ import annotations

import argparse
import sys

import dagster as dg

from assets.keys import DELETION_JOB, INGESTION_JOB, PER_BATCH_ASSETS, SYNC_JOB
from assets.partitions import BATCHES, LEGACY_DOCUMENTS
from assets.provenance import batch_metadata
from assets.receipts import runs_in_flight
from lightfoot_pipeline.operations.batches import adopt_unbatched, batch_counts, unbatched
from lightfoot_pipeline.store.batches import DAGSTER
from lightfoot_pipeline.store.store import Store

MIGRATED = "migrated"  # the kind of batch the live documents no batch holds are given
WRITING_JOBS = [INGESTION_JOB, DELETION_JOB, SYNC_JOB]  # a run of one in flight refuses the migration


class MigrationRefused(RuntimeError):
    """The instance cannot be migrated now (a run in flight)."""


def legacy_keys(instance: dg.DagsterInstance) -> list[str]:
    return list(instance.get_dynamic_partitions(LEGACY_DOCUMENTS))


def _remove_legacy_partitions(instance: dg.DagsterInstance, keys: list[str]) -> None:
    for i, key in enumerate(keys, 1):
        instance.delete_dynamic_partition(LEGACY_DOCUMENTS, key)
        if i % 10_000 == 0:
            print(f"  removed {i:,} of {len(keys):,} per-document partitions", file=sys.stderr)


def migrate(instance: dg.DagsterInstance, store: Store, dry_run: bool = False) -> dict:
    """Migrate the instance (see the module docstring); returns what was done, as counts and ids."""
    keys = legacy_keys(instance)
    report: dict = {"legacy_partitions": len(keys), "migrated_batch": None, "documents": 0, "dry_run": dry_run}
    if not keys:
        report["outcome"] = "nothing to migrate: the instance has no per-document partitions"
        return report
    busy = runs_in_flight(instance, WRITING_JOBS)
    if busy:
        raise MigrationRefused(f"runs {', '.join(busy)} are queued or running: let them finish (or cancel them) "
                               "and stop the daemon, then migrate")
    if dry_run:
        report["documents"] = len(unbatched(store))
        report["outcome"] = "dry run: nothing changed"
        return report
    batch_id, adopted = adopt_unbatched(store, MIGRATED, DAGSTER)
    instance.wipe_assets(list(PER_BATCH_ASSETS))
    _remove_legacy_partitions(instance, keys)
    if batch_id is not None:
        instance.add_dynamic_partitions(BATCHES.name, [batch_id])
        counts = batch_counts(store, batch_id)
        for key in PER_BATCH_ASSETS:
            instance.report_runless_asset_event(dg.AssetMaterialization(
                asset_key=key, partition=batch_id,
                description="the documents stored before batches, migrated from the per-document layout",
                metadata={**batch_metadata(batch_id, counts), "store_commit": dg.MetadataValue.int(store.manifest().seq)},
            ))
    report.update(migrated_batch=batch_id, documents=adopted,
                  outcome=f"removed {len(keys)} per-document partitions; "
                  + (f"{adopted} documents now in batch {batch_id}" if batch_id else "every document already had a batch"))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assets.migrate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default=None, help="store root (default $LIGHTFOOT_STORE, else .lightfoot/store)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be done, change nothing")
    args = parser.parse_args(argv)
    instance = dg.DagsterInstance.get()
    try:
        report = migrate(instance, Store(args.store), dry_run=args.dry_run)
    except MigrationRefused as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(report["outcome"])
    for key in ("legacy_partitions", "migrated_batch", "documents"):
        print(f"  {key}: {report[key]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
