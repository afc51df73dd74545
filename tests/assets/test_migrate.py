"""Migrating an instance of the per-document layout: the sensors refuse it with the hint until
``python -m assets.migrate`` has run; the migration removes the per-document partitions and the
content older versions wrote to their events, and gives the stored documents a batch."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.keys import PER_BATCH_ASSETS
from assets.migrate import main, migrate
from assets.partitions import LEGACY_DOCUMENTS, LEGACY_HINT
from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction.replay import ReplayExtractor
from lightfoot_pipeline.store.batches import documents_of_batch

pytestmark = [pytest.mark.dagster]

TITLE = "Quillarbet memorandum"  # what an older version put in a partition's metadata


def _legacy_instance(harness, documents) -> None:
    """An instance as the per-document layout left it: a partition per document, each with a
    materialization whose metadata holds the document's title."""
    instance = harness.instance
    instance.add_dynamic_partitions(LEGACY_DOCUMENTS, [d.doc_id for d in documents])
    for d in documents:
        for key in PER_BATCH_ASSETS:
            instance.report_runless_asset_event(dg.AssetMaterialization(
                asset_key=key, partition=d.doc_id, metadata={"title": f"{TITLE} {d.doc_id}"}))


def _events_hold(instance: dg.DagsterInstance, needle: str) -> int:
    found = 0
    for key in PER_BATCH_ASSETS:
        records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=10_000).records
        found += sum(needle in str(r.asset_materialization.metadata) for r in records if r.asset_materialization)
    return found


def test_an_instance_of_the_per_document_layout_is_refused_then_migrated(lightfoot, twenty, sample_records,
                                                                          hashing_embedder, capsys, monkeypatch):
    store = lightfoot.store()
    documents = twenty[:6]
    operations.ingest(store, documents, ReplayExtractor(sample_records), hashing_embedder)
    _legacy_instance(lightfoot, documents)
    assert _events_hold(lightfoot.instance, TITLE) == 6 * len(PER_BATCH_ASSETS)

    for sensor in ("inbox_sensor", "erasure_sensor", "sync_sensor"):
        tick = lightfoot.tick(sensor)
        assert not tick.run_requests
    assert lightfoot.tick("inbox_sensor").skip_message == LEGACY_HINT

    dry = migrate(lightfoot.instance, store, dry_run=True)
    assert dry["documents"] == 6 and lightfoot.partitions(LEGACY_DOCUMENTS)

    report = migrate(lightfoot.instance, store)
    batch = report["migrated_batch"]
    assert batch.startswith("migrated-") and report["documents"] == 6
    assert lightfoot.partitions(LEGACY_DOCUMENTS) == [] and lightfoot.partitions() == [batch]
    assert _events_hold(lightfoot.instance, TITLE) == 0  # the per-document events are wiped
    logged = documents_of_batch(store, batch)
    assert sorted(logged.get_column("doc_id").to_list()) == sorted(d.doc_id for d in documents)
    for key in PER_BATCH_ASSETS:
        latest = lightfoot.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=[batch]), limit=1).records[0]
        assert latest.asset_materialization.metadata["documents"].value == 6

    # Migrated, the inbox is followed again; a second migration has nothing to do.
    assert "nothing new" in lightfoot.tick("inbox_sensor").skip_message
    assert migrate(lightfoot.instance, store)["migrated_batch"] is None
    monkeypatch.setenv("DAGSTER_HOME", str(lightfoot.root / "dagster_home"))  # the command's instance
    capsys.readouterr()
    assert main(["--store", lightfoot.store_uri]) == 0
    assert "nothing to migrate" in capsys.readouterr().out


def test_the_migration_refuses_while_a_run_is_in_flight(lightfoot):
    from assets.migrate import WRITING_JOBS, MigrationRefused
    from assets.receipts import runs_in_flight

    lightfoot.instance.add_dynamic_partitions(LEGACY_DOCUMENTS, ["musique-0000"])
    assert runs_in_flight(lightfoot.instance, WRITING_JOBS) == []
    job = lightfoot.defs.resolve_job_def("deletion_job")
    started = lightfoot.instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED)
    assert runs_in_flight(lightfoot.instance, WRITING_JOBS) == [started.run_id]
    with pytest.raises(MigrationRefused, match=started.run_id):
        migrate(lightfoot.instance, lightfoot.store())
    assert lightfoot.partitions(LEGACY_DOCUMENTS) == ["musique-0000"]  # nothing was changed
