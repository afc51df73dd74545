"""Deletion on Dagster: erasure requests, tombstones, the retention schedule and partition removal."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import dagster as dg
import pytest

from lightfoot_pipeline import pipeline
from lightfoot_pipeline.ingest.landing import LandedDocument, Landing, utc_now


def ingest_through_the_inbox(lightfoot, documents, records) -> None:
    lightfoot.drop_documents(f"drop-{len(lightfoot.partitions())}", documents, records)
    for request in lightfoot.tick("document_inbox").run_requests:
        assert lightfoot.run(request).success


def test_the_erasure_sensor_records_requests_and_asks_for_one_deletion_run(lightfoot):
    lightfoot.erasure_inbox.mkdir(parents=True)
    (lightfoot.erasure_inbox / "ids.txt").write_text("doc-1\ndoc-2\n")
    lightfoot.drop_erasure_request("soft.json", ["doc-3"], erase=False, reason="duplicate")
    (lightfoot.erasure_inbox / "bad.json").write_text('{"doc_ids": "doc-4"}')
    tick = lightfoot.tick("erasure_inbox")
    (request,) = tick.run_requests
    assert request.run_key == "erasure-1" and request.tags["lightfoot/trigger"] == "erasure-inbox"
    pending = {r.doc_id: r for r in Landing(lightfoot.store()).deletion_requests()}
    assert sorted(pending) == ["doc-1", "doc-2", "doc-3"]
    assert pending["doc-1"].erase and not pending["doc-3"].erase and pending["doc-3"].reason == "duplicate"
    assert sorted(p.name for p in lightfoot.erasure_inbox.iterdir()) == ["rejected"]
    assert lightfoot.tick("erasure_inbox").run_requests == []


def test_a_soft_deletion_tombstones_the_partition_and_keeps_history(lightfoot, twenty, sample_records):
    docs = twenty[:4]
    ingest_through_the_inbox(lightfoot, docs, sample_records)
    lightfoot.drop_erasure_request("soft.json", [docs[1].doc_id, "never-ingested"], erase=False, reason="duplicate")
    result = lightfoot.run(lightfoot.tick("erasure_inbox").run_requests[0], "document_deletion")
    assert result.success
    tombstones = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()]
    log = next(m for m in tombstones if m.asset_key.to_user_string() == "tombstones")
    assert log.metadata["deleted"].value == [docs[1].doc_id]
    assert log.metadata["not_found"].value == ["never-ingested"]
    assert log.metadata["model_calls"].value == 0
    per_partition = [m for m in tombstones if m.partition == docs[1].doc_id]
    assert sorted(m.asset_key.to_user_string() for m in per_partition) == ["extractions", "forms", "passages"]
    assert all(m.metadata["reason"].value == "duplicate" and m.metadata["erase"].value is False for m in per_partition)
    erasures = next(m for m in tombstones if m.asset_key.to_user_string() == "erasures")
    assert erasures.metadata["erased"].value == []
    store = lightfoot.store()
    assert docs[1].doc_id not in store.read("documents").get_column("doc_id").to_list()
    assert Landing(store).deletion_requests() == []
    assert docs[1].doc_id not in Landing(store).landed_ids()

    lightfoot.tick("deleted_partitions")
    assert docs[1].doc_id not in lightfoot.partitions()
    assert len(lightfoot.partitions()) == 3


def test_a_partition_stays_until_its_history_is_erased(lightfoot, twenty, sample_records):
    from assets.defs.graph import graph
    from assets.defs.retention import tombstones

    docs = twenty[:3]
    ingest_through_the_inbox(lightfoot, docs, sample_records)
    lightfoot.drop_erasure_request("erase.json", [docs[0].doc_id])
    lightfoot.tick("erasure_inbox")
    # Tombstone and graph, but not yet the erasure.
    assert dg.materialize([tombstones, graph], instance=lightfoot.instance, resources=lightfoot.resources).success
    lightfoot.tick("deleted_partitions")
    assert docs[0].doc_id in lightfoot.partitions(), "removed before its history was erased"

    result = lightfoot.run(dg.RunRequest(), "document_deletion")
    assert result.success
    erased = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()
              if e.event_specific_data.materialization.asset_key.to_user_string() == "erasures"]
    assert erased[0].metadata["erased"].value == [docs[0].doc_id]
    lightfoot.tick("deleted_partitions")
    assert docs[0].doc_id not in lightfoot.partitions()


def test_a_deletion_on_the_command_line_is_recorded_on_its_partition(lightfoot, twenty, sample_records):
    docs = twenty[:3]
    ingest_through_the_inbox(lightfoot, docs, sample_records)
    store = lightfoot.store()
    pipeline.delete(store, [docs[2].doc_id], reason="lightfoot delete")
    assert docs[2].doc_id in Landing(store).landed_ids()  # a soft delete leaves the landed copy

    tick = lightfoot.tick("deleted_partitions")
    assert docs[2].doc_id not in lightfoot.partitions()
    assert docs[2].doc_id not in Landing(store).landed_ids(), "the stale landed copy goes with the partition"
    events = {(e.asset_key.to_user_string(), e.partition) for e in tick.asset_events}
    assert events == {(a, docs[2].doc_id) for a in ("passages", "extractions", "forms")}
    assert all(e.metadata["status"].value == "tombstoned" for e in tick.asset_events)
    assert lightfoot.tick("deleted_partitions").dynamic_partitions_requests == []


def test_a_document_landed_again_after_its_deletion_keeps_its_partition(lightfoot, twenty, sample_records):
    docs = twenty[:2]
    ingest_through_the_inbox(lightfoot, docs, sample_records)
    store = lightfoot.store()
    pipeline.delete(store, [docs[0].doc_id], reason="test")
    Landing(store).put_documents([LandedDocument(docs[0], sample_records[docs[0].doc_id], utc_now(), "again")])
    lightfoot.tick("deleted_partitions")
    assert docs[0].doc_id in lightfoot.partitions()


@pytest.fixture
def policy_file(tmp_path):
    path = tmp_path / "retention.json"
    path.write_text(json.dumps({"rules": [{"doc_id": "musique-0001", "delete_after": "2026-01-31"}]}))
    return path


def test_the_retention_schedule_erases_documents_past_their_date(lightfoot_on_disk, twenty, sample_records, policy_file):
    lightfoot = lightfoot_on_disk
    expired = dataclasses.replace(twenty[0], retention_until=dt.date(2026, 3, 1))
    lasting = dataclasses.replace(twenty[2], retention_until=dt.date(2027, 1, 1))
    ingest_through_the_inbox(lightfoot, [expired, twenty[1], lasting], sample_records)
    from assets.resources import InboxResource

    resources = {**lightfoot.resources, "inbox": InboxResource(
        documents=str(lightfoot.document_inbox), erasure_requests=str(lightfoot.erasure_inbox),
        retention_policy=str(policy_file))}
    schedule = lightfoot.defs.resolve_schedule_def("retention_schedule")
    at = lambda day: dg.build_schedule_context(  # noqa: E731
        instance=lightfoot.instance, resources=resources,
        scheduled_execution_time=dt.datetime(2026, *day, 3, 0, tzinfo=dt.timezone.utc))

    assert schedule.evaluate_tick(at((1, 31))).run_requests == []  # nothing is past its date yet
    (request,) = schedule.evaluate_tick(at((3, 2))).run_requests
    assert request.run_key == "retention-2026-03-02"
    pending = {r.doc_id: r for r in Landing(lightfoot.store()).deletion_requests()}
    assert sorted(pending) == [expired.doc_id, twenty[1].doc_id]
    assert all(r.erase for r in pending.values())
    assert "retention_until expired on 2026-03-01" in pending[expired.doc_id].reason
    assert "policy rule" in pending[twenty[1].doc_id].reason

    assert lightfoot.run(request, "document_deletion").success
    assert lightfoot.store().read("documents").get_column("doc_id").to_list() == [lasting.doc_id]
    erased = lightfoot.store().read("tombstones")
    assert erased.get_column("erased_at").null_count() == 0 and erased.height == 2


def test_a_bad_policy_file_fails_the_schedule_with_its_reason(lightfoot_on_disk, tmp_path):
    from assets.resources import InboxResource
    from lightfoot_pipeline.ingest.retention import PolicyError

    (tmp_path / "bad.json").write_text('{"rules": [{"keep_days": "ten"}]}')
    resources = {**lightfoot_on_disk.resources, "inbox": InboxResource(retention_policy=str(tmp_path / "bad.json"))}
    context = dg.build_schedule_context(instance=lightfoot_on_disk.instance, resources=resources,
                                        scheduled_execution_time=dt.datetime(2026, 3, 2, tzinfo=dt.timezone.utc))
    with pytest.raises(dg.DagsterError, match="evaluation of schedule retention_schedule") as failure:
        lightfoot_on_disk.defs.resolve_schedule_def("retention_schedule").evaluate_tick(context)
    assert isinstance(failure.value.__cause__, PolicyError)
    assert "rule 1: keep_days must be a whole number of days" in str(failure.value.__cause__)
