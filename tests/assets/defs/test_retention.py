"""Deletion on Dagster: erasure requests, tombstones, the retention schedule and partition removal."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import dagster as dg
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.landing import LandedDocument, Landing, utc_now
from lightfoot_pipeline.ingest.receipts import Receipts

pytestmark = [pytest.mark.dagster]


def erase(lightfoot, tick) -> None:
    (result,) = lightfoot.launch(tick, "erasure_inbox", "document_deletion")
    assert result is not None and result.success


def test_the_erasure_sensor_records_requests_and_asks_for_one_deletion_run(lightfoot, twenty, sample_records):
    docs = twenty[:4]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    ids = [d.doc_id for d in docs]
    lightfoot.erasure_inbox.mkdir(parents=True)
    (lightfoot.erasure_inbox / "ids.txt").write_text(f"{ids[0]}\n{ids[1]}\n")
    lightfoot.drop_erasure_request("soft.json", [ids[2], "never-ingested"], erase=False, reason="duplicate")
    (lightfoot.erasure_inbox / "bad.json").write_text(json.dumps({"doc_ids": ids[3]}))
    tick = lightfoot.tick("erasure_inbox")
    (request,) = tick.run_requests
    receipts = {r.origin.rsplit("/", 1)[1]: r for r in Receipts(lightfoot.store()).pending("erasure")}
    assert sorted(receipts) == ["ids.txt", "soft.json"]
    first = receipts["ids.txt"]
    assert first.doc_ids == (ids[0], ids[1]) and first.erase_ids == (ids[0], ids[1])
    assert receipts["soft.json"].erase_ids == ()
    assert request.run_key == f"erasure-{first.receipt_id}-0"
    assert request.tags.items() >= {"lightfoot/trigger": "erasure-inbox", "lightfoot/erasure-request": first.receipt_id,
                                    "lightfoot/attempt": "0"}.items()
    pending = {r.doc_id: r for r in Landing(lightfoot.store()).deletion_requests()}
    assert sorted(pending) == sorted([*ids[:3], "never-ingested"])
    assert pending[ids[0]].erase and not pending[ids[2]].erase and pending[ids[2]].reason == "duplicate"
    assert sorted(p.name for p in lightfoot.erasure_inbox.iterdir()) == ["rejected"]

    # One run applies both files' requests; the next tick settles both receipts and asks for nothing.
    erase(lightfoot, tick)
    assert lightfoot.stored_ids() == [ids[3]]
    after = lightfoot.tick("erasure_inbox")
    assert after.run_requests == []
    assert after.skip_message == f"no new request file in {lightfoot.erasure_inbox}; 2 requests done"
    book = Receipts(lightfoot.store())
    assert book.pending("erasure") == []
    assert book.receipt("erasure", first.receipt_id).outcome.endswith("succeeded")
    assert book.receipt("erasure", receipts["soft.json"].receipt_id).outcome == "its documents were already deleted"


def test_a_reset_cursor_drops_no_request(lightfoot, twenty, sample_records):
    docs = twenty[:3]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("first.json", [docs[0].doc_id])
    erase(lightfoot, lightfoot.tick("erasure_inbox"))
    lightfoot.cursors["erasure_inbox"] = None  # "Edit cursor" in the UI, or a cursor from before
    lightfoot.drop_erasure_request("second.json", [docs[1].doc_id])
    erase(lightfoot, lightfoot.tick("erasure_inbox"))
    assert lightfoot.stored_ids() == [docs[2].doc_id]
    lightfoot.cursors["erasure_inbox"] = json.dumps({"batch": 0, "kept": {}})
    lightfoot.drop_erasure_request("third.json", [docs[2].doc_id])
    erase(lightfoot, lightfoot.tick("erasure_inbox"))
    assert lightfoot.stored_ids() == []
    keys = {r.dagster_run.tags["dagster/run_key"] for r in lightfoot.instance.get_run_records(
        dg.RunsFilter(job_name="document_deletion"))}
    assert len(keys) == 3


def test_a_request_whose_run_was_dropped_is_asked_again(lightfoot, twenty, sample_records):
    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("gdpr.json", [docs[0].doc_id], reason="data subject request")
    dropped = lightfoot.tick("erasure_inbox")  # the daemon never makes this run
    assert not lightfoot.erasure_inbox.joinpath("gdpr.json").exists()

    again = lightfoot.tick("erasure_inbox")
    assert [r.run_key for r in again.run_requests] == [r.run_key for r in dropped.run_requests]
    erase(lightfoot, again)
    assert lightfoot.stored_ids() == [docs[1].doc_id]
    erased = lightfoot.store().read("tombstones")
    assert erased.get_column("doc_id").to_list() == [docs[0].doc_id]
    assert erased.get_column("erased_at").null_count() == 0
    # The same key asked once more is dropped as a duplicate, and the receipt is settled by its run.
    assert lightfoot.launch(again, "erasure_inbox", "document_deletion") == [None]
    settled = lightfoot.tick("erasure_inbox")
    assert settled.run_requests == [] and "1 requests done" in settled.skip_message


def test_a_wiped_instance_asks_again_for_what_is_pending_and_not_for_what_is_done(lightfoot, twenty, sample_records):
    docs = twenty[:3]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("done.json", [docs[0].doc_id])
    erase(lightfoot, lightfoot.tick("erasure_inbox"))
    lightfoot.tick("erasure_inbox")
    lightfoot.drop_erasure_request("pending.json", [docs[1].doc_id])
    asked = lightfoot.tick("erasure_inbox")

    old, lightfoot.instance = lightfoot.instance, dg.DagsterInstance.ephemeral()
    try:
        lightfoot.cursors.clear()
        tick = lightfoot.tick("erasure_inbox")
        assert [r.run_key for r in tick.run_requests] == [r.run_key for r in asked.run_requests]
        erase(lightfoot, tick)
        assert lightfoot.stored_ids() == [docs[2].doc_id]
        assert lightfoot.tick("erasure_inbox").run_requests == []
    finally:
        lightfoot.instance.dispose()
        lightfoot.instance = old


def test_a_failed_run_leaves_the_request_pending_and_the_next_tick_retries_it(
    lightfoot, twenty, sample_records, monkeypatch
):
    import assets.defs.retention as retention

    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("gdpr.json", [docs[0].doc_id])
    first = lightfoot.tick("erasure_inbox")

    def store_unavailable(*args, **kwargs):
        raise OSError("the store is unreachable")

    with monkeypatch.context() as patch:
        patch.setattr(retention, "tombstone_requests", store_unavailable)
        (failed,) = lightfoot.launch(first, "erasure_inbox", "document_deletion")
    assert not failed.success
    assert lightfoot.stored_ids() == [d.doc_id for d in docs]
    (receipt,) = Receipts(lightfoot.store()).pending("erasure")

    retry = lightfoot.tick("erasure_inbox")
    (request,) = retry.run_requests
    assert request.run_key == f"erasure-{receipt.receipt_id}-1" != first.run_requests[0].run_key
    assert request.tags["lightfoot/attempt"] == "1"
    erase(lightfoot, retry)
    assert lightfoot.stored_ids() == [docs[1].doc_id]
    assert lightfoot.tick("erasure_inbox").run_requests == []
    assert Receipts(lightfoot.store()).receipt("erasure", receipt.receipt_id).is_done


def test_a_request_whose_runs_keep_failing_waits_longer_before_each_attempt(
    lightfoot, twenty, sample_records, monkeypatch
):
    import assets.defs.retention as retention
    import assets.receipts as receipts

    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("gdpr.json", [docs[0].doc_id])

    def store_unavailable(*args, **kwargs):
        raise OSError("the store is unreachable")

    tick = lightfoot.tick("erasure_inbox")
    with monkeypatch.context() as patch:
        patch.setattr(retention, "tombstone_requests", store_unavailable)
        for _ in range(2):  # the first failure is retried at once, the second is not
            (failed,) = lightfoot.launch(tick, "erasure_inbox", "document_deletion")
            assert not failed.success
            tick = lightfoot.tick("erasure_inbox")
    assert tick.run_requests == []
    assert "1 requests whose runs failed repeatedly wait before their next attempt" in tick.skip_message
    (receipt,) = Receipts(lightfoot.store()).pending("erasure")
    waited = receipts.receipt_runs(lightfoot.instance, receipt)
    assert waited.attempt == 2 and waited.backing_off()
    assert not waited.backing_off(now=waited.retry_at + 1)

    monkeypatch.setattr(receipts.time, "time", lambda: waited.retry_at + 1)  # a minute later
    retry = lightfoot.tick("erasure_inbox")
    (request,) = retry.run_requests
    assert request.run_key == f"erasure-{receipt.receipt_id}-2"
    erase(lightfoot, retry)
    assert lightfoot.stored_ids() == [docs[1].doc_id]


def test_the_wait_after_failures_doubles_up_to_an_hour():
    from assets.receipts import retry_delay_s

    assert [retry_delay_s(n) for n in (1, 2, 3, 4)] == [0.0, 60.0, 120.0, 240.0]
    assert retry_delay_s(50) == 3600.0


def test_a_request_waits_while_its_run_is_running_and_is_asked_again_once_canceled(lightfoot, twenty, sample_records):
    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("gdpr.json", [docs[0].doc_id])
    (request,) = lightfoot.tick("erasure_inbox").run_requests
    job = lightfoot.defs.resolve_job_def("document_deletion")
    running = lightfoot.instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED, tags=request.tags)

    waiting = lightfoot.tick("erasure_inbox")
    assert waiting.run_requests == [] and "1 requests waiting for their runs" in waiting.skip_message
    lightfoot.drop_erasure_request("later.json", [docs[1].doc_id])
    behind = lightfoot.tick("erasure_inbox")
    assert behind.run_requests == [] and f"wait for deletion run {running.run_id}" in behind.skip_message

    lightfoot.instance.report_run_canceled(running)
    retry = lightfoot.tick("erasure_inbox")
    (again,) = retry.run_requests
    assert again.tags["lightfoot/attempt"] == "1" and again.tags["lightfoot/erasure-request"] == \
        request.tags["lightfoot/erasure-request"]
    erase(lightfoot, retry)
    assert lightfoot.stored_ids() == []
    settled = lightfoot.tick("erasure_inbox")
    assert settled.run_requests == [] and "2 requests done" in settled.skip_message


def test_a_request_file_taken_before_is_not_applied_again(lightfoot, twenty, sample_records, monkeypatch):
    from lightfoot_pipeline.ingest.inbox import Inbox

    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    path = lightfoot.drop_erasure_request("gdpr.json", [docs[0].doc_id])
    with monkeypatch.context() as patch:
        patch.setattr(Inbox, "remove", lambda self, item: (_ for _ in ()).throw(PermissionError("read-only inbox")))
        erase(lightfoot, lightfoot.tick("erasure_inbox"))
        assert path.exists()
        lightfoot.cursors["erasure_inbox"] = None
        assert lightfoot.tick("erasure_inbox").run_requests == []
    # The document comes back; the old file, seen again, does not delete it a second time.
    lightfoot.ingest_through_the_inbox([docs[0]], sample_records)
    tick = lightfoot.tick("erasure_inbox")
    assert tick.run_requests == [] and not path.exists()
    assert lightfoot.stored_ids() == sorted(d.doc_id for d in docs)
    assert len(lightfoot.instance.get_run_records(dg.RunsFilter(job_name="document_deletion"))) == 1


def test_two_requests_with_the_same_content_in_different_files_are_both_honoured(lightfoot, twenty, sample_records):
    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("monday.json", [docs[0].doc_id], reason="gdpr")
    erase(lightfoot, lightfoot.tick("erasure_inbox"))
    assert lightfoot.stored_ids() == [docs[1].doc_id]

    lightfoot.ingest_through_the_inbox([docs[0]], sample_records)  # it comes back, and is asked away again
    lightfoot.drop_erasure_request("tuesday.json", [docs[0].doc_id], reason="gdpr")
    tick = lightfoot.tick("erasure_inbox")
    assert len(tick.run_requests) == 1
    erase(lightfoot, tick)
    assert lightfoot.stored_ids() == [docs[1].doc_id]
    runs = lightfoot.instance.get_run_records(dg.RunsFilter(job_name="document_deletion"))
    assert len({r.dagster_run.tags["lightfoot/erasure-request"] for r in runs}) == 2


def test_a_soft_deletion_tombstones_the_partition_and_keeps_history(lightfoot, twenty, sample_records):
    docs = twenty[:4]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("soft.json", [docs[1].doc_id, "never-ingested"], erase=False, reason="duplicate")
    result = lightfoot.run(lightfoot.tick("erasure_inbox").run_requests[0], "document_deletion")
    assert result.success
    tombstones = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()]
    log = next(m for m in tombstones if m.asset_key.to_user_string() == "tombstones")
    assert log.metadata["deleted"].value == [docs[1].doc_id]
    assert log.metadata["not_found"].value == ["never-ingested"]
    assert log.metadata["model_calls"].value == 0
    assert not [m for m in tombstones if m.partition == docs[1].doc_id], "a deletion is no materialization"
    observed = [e.event_specific_data.asset_observation for e in result.get_asset_observation_events()]
    per_partition = [m for m in observed if m.partition == docs[1].doc_id]
    assert sorted(m.asset_key.to_user_string() for m in per_partition) == ["extraction_cache", "extractions", "forms", "passages"]
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
    lightfoot.ingest_through_the_inbox(docs, sample_records)
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
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    store = lightfoot.store()
    operations.delete(store, [docs[2].doc_id], reason="lightfoot delete")
    assert docs[2].doc_id in Landing(store).landed_ids()  # a soft delete leaves the landed copy

    tick = lightfoot.tick("deleted_partitions")
    assert docs[2].doc_id not in lightfoot.partitions()
    assert docs[2].doc_id not in Landing(store).landed_ids(), "the stale landed copy goes with the partition"
    events = {(e.asset_key.to_user_string(), e.partition) for e in tick.asset_events}
    assert events == {(a, docs[2].doc_id) for a in ("passages", "extraction_cache", "extractions", "forms")}
    assert all(e.metadata["status"].value == "tombstoned" for e in tick.asset_events)
    assert lightfoot.tick("deleted_partitions").dynamic_partitions_requests == []


def test_a_document_landed_again_after_its_deletion_keeps_its_partition(lightfoot, twenty, sample_records):
    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    store = lightfoot.store()
    operations.delete(store, [docs[0].doc_id], reason="test")
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
    lightfoot.ingest_through_the_inbox([expired, twenty[1], lasting], sample_records)
    from assets.resources import InboxResource

    resources = {**lightfoot.resources, "inbox": InboxResource(
        documents=str(lightfoot.document_inbox), erasure_requests=str(lightfoot.erasure_inbox),
        retention_policy=str(policy_file))}
    at = lambda day: lightfoot.schedule_tick(  # noqa: E731
        "retention_schedule", dt.datetime(2026, *day, 3, 0, tzinfo=dt.UTC), resources)

    assert at((1, 31)) == []  # nothing is past its date yet
    (request,) = at((3, 2))
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


def test_a_failed_retention_run_is_asked_again_by_the_erasure_sensor(
    lightfoot_on_disk, twenty, sample_records, monkeypatch
):
    import assets.defs.retention as retention

    lightfoot = lightfoot_on_disk
    expired = dataclasses.replace(twenty[0], retention_until=dt.date(2026, 3, 1))
    lightfoot.ingest_through_the_inbox([expired, twenty[1]], sample_records)
    (request,) = lightfoot.schedule_tick("retention_schedule", dt.datetime(2026, 3, 2, 3, 0, tzinfo=dt.UTC))
    (receipt,) = Receipts(lightfoot.store()).pending("erasure")
    assert receipt.origin == "retention schedule 2026-03-02" and receipt.erase_ids == (expired.doc_id,)
    assert request.tags["lightfoot/erasure-request"] == receipt.receipt_id

    with monkeypatch.context() as patch:
        patch.setattr(retention, "erase_history", lambda *args: (_ for _ in ()).throw(OSError("storage is down")))
        assert not lightfoot.run(request, "document_deletion").success
    assert lightfoot.stored_ids() == [twenty[1].doc_id]  # deleted, but its history is not erased

    tick = lightfoot.tick("erasure_inbox")
    (retry,) = tick.run_requests
    assert retry.run_key == f"erasure-{receipt.receipt_id}-1"
    erase(lightfoot, tick)
    assert lightfoot.store().read("tombstones").get_column("erased_at").null_count() == 0
    assert lightfoot.tick("erasure_inbox").run_requests == []
    assert Receipts(lightfoot.store()).receipt("erasure", receipt.receipt_id).is_done


def test_a_bad_policy_file_fails_the_schedule_with_its_reason(lightfoot_on_disk, tmp_path):
    from assets.resources import InboxResource
    from lightfoot_pipeline.ingest.retention import PolicyError

    (tmp_path / "bad.json").write_text('{"rules": [{"keep_days": "ten"}]}')
    resources = {**lightfoot_on_disk.resources, "inbox": InboxResource(retention_policy=str(tmp_path / "bad.json"))}
    with pytest.raises(dg.DagsterError, match="evaluation of schedule retention_schedule") as failure:
        lightfoot_on_disk.schedule_tick("retention_schedule", dt.datetime(2026, 3, 2, tzinfo=dt.UTC), resources)
    assert isinstance(failure.value.__cause__, PolicyError)
    assert "rule 1: keep_days must be a whole number of days" in str(failure.value.__cause__)
