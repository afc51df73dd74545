"""End to end on an instance on disk: 20 documents arrive in the inbox and are ingested in one
run, 3 are erased through an erasure request, and the store equals a fresh build of the other 17."""

from __future__ import annotations

import dagster as dg
import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.ingest.landing import Landing
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store

pytestmark = [pytest.mark.dagster]


def materializations(result, asset: str) -> list[dg.AssetMaterialization]:
    return [e.event_specific_data.materialization for e in result.get_asset_materialization_events()
            if e.event_specific_data.materialization.asset_key.to_user_string() == asset]


def test_twenty_arrive_three_are_erased_and_the_store_equals_a_fresh_build_of_seventeen(
    lightfoot, twenty, sample_records, tmp_path
):
    ids = sorted(d.doc_id for d in twenty)
    lightfoot.drop_documents("batch-1", twenty, sample_records)

    # The sensor lands the drop, adds its batch as one partition and asks for one run of it.
    tick = lightfoot.tick("inbox_sensor")
    assert len(tick.run_requests) == 1, "20 new documents are one run, not one per document"
    batch = tick.run_requests[0].partition_key
    assert lightfoot.partitions() == [batch] and batch.startswith("drop-")
    ingestion = lightfoot.run(tick.run_requests[0])
    assert ingestion.success
    assert lightfoot.instance.get_runs_count() == 1
    for asset in ("passages", "extraction_cache", "extractions", "forms"):
        (made,) = materializations(ingestion, asset)  # one per batch, the documents its rows
        assert made.partition == batch and made.metadata["documents"].value == 20, asset
    assert len(materializations(ingestion, "serving_snapshot")) == 1
    assert list(lightfoot.document_inbox.iterdir()) == [], "a landed drop leaves the inbox"
    store = Store(lightfoot.store_uri)
    assert store.read("documents").height == 20
    facts = materializations(ingestion, "facts")[0]
    assert facts.metadata["store_fingerprint"].value == fingerprint(store).digest

    # Three documents are erased through a request file.
    doomed = sorted([twenty[2].doc_id, twenty[9].doc_id, twenty[15].doc_id])
    lightfoot.drop_erasure_request("gdpr-17.json", doomed, reason="data subject request")
    tick = lightfoot.tick("erasure_sensor")
    assert len(tick.run_requests) == 1
    deletion = lightfoot.run(tick.run_requests[0], "deletion_job")
    assert deletion.success
    checks = {(e.asset_key.to_user_string(), e.check_name): e.passed for e in deletion.get_asset_check_evaluations()}
    assert ("facts", "matches_fresh_rebuild") in checks and ("entities", "no_dangling_references") in checks
    assert lightfoot.checks_passed(deletion), checks  # the rebuild comparison is test_checks.py's; the fingerprints are compared below
    observed = [e.event_specific_data.asset_observation for e in deletion.get_asset_observation_events()]
    for asset in ("passages", "extraction_cache", "extractions", "forms"):
        assert materializations(deletion, asset) == [], "a deletion is no materialization"
        (tombstone,) = [o for o in observed if o.asset_key.to_user_string() == asset]
        assert tombstone.partition == batch and tombstone.metadata["status"].value == "partly deleted"
        assert (tombstone.metadata["documents_deleted"].value, tombstone.metadata["documents_live"].value) == (3, 17)
    (erased,) = materializations(deletion, "erasures")
    assert erased.metadata["erased_count"].value == 3
    # Issue 35: the report listed every erased id, so the event grew with the erasure; counts and a digest now.
    assert not [d for d in doomed if any(d in str(v.value) for v in erased.metadata.values())]
    assert len(erased.metadata["erased_ids_digest"].value) == 16
    # Issue 35: a partly deleted batch's panel showed documents_live twice (the observation's above
    # the materialization's): the tombstone observation's values are its own.
    (passages,) = materializations(ingestion, "passages")
    own = {k for o in observed if o.asset_key.to_user_string() == "passages" for k in o.metadata}
    assert own and not own & set(passages.metadata), own & set(passages.metadata)
    assert Landing(store).landed_ids() == sorted(set(ids) - set(doomed))

    # The batch keeps its 17 live documents, and so its partition.
    assert lightfoot.partitions() == [batch]

    # The store equals a fresh build of the 17 survivors, table for table.
    fresh = Store(str(tmp_path / "fresh"))
    survivors = [d for d in twenty if d.doc_id not in doomed]
    operations.ingest(fresh, survivors, ReplayExtractor(sample_records), HashingEmbedder(dim=32))
    mine, theirs = fingerprint(store), fingerprint(fresh)
    assert mine.differences(theirs) == []
    assert mine.digest == theirs.digest
    assert store.read("documents").height == 17

    # The published snapshot holds the survivors only.
    snapshot = load_snapshot(store)
    assert set(snapshot.passages.get_column("doc_id").to_list()) == set(ids) - set(doomed)
    assert snapshot.passages.filter(pl.col("doc_id").is_in(doomed)).height == 0
