"""Deletion on Dagster: erasure requests, tombstones, the retention schedule and partition removal."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest

from lightfoot_pipeline.ingest.landing import LandedDocument, Landing, utc_now
from lightfoot_pipeline.ingest.receipts import Receipts

pytestmark = [pytest.mark.dagster]


def erase(lightfoot, tick) -> None:
    (result,) = lightfoot.launch(tick, "erasure_sensor", "deletion_job")
    assert result is not None and result.success


def test_the_erasure_sensor_records_requests_and_asks_for_one_deletion_run(lightfoot, twenty, sample_records):
    docs = twenty[:4]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    ids = [d.doc_id for d in docs]
    lightfoot.erasure_inbox.mkdir(parents=True)
    (lightfoot.erasure_inbox / "ids.txt").write_text(f"{ids[0]}\n{ids[1]}\n")
    lightfoot.drop_erasure_request("soft.json", [ids[2], "never-ingested"], erase=False, reason="duplicate")
    (lightfoot.erasure_inbox / "bad.json").write_text(json.dumps({"doc_ids": ids[3]}))
    tick = lightfoot.tick("erasure_sensor")
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
    after = lightfoot.tick("erasure_sensor")
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
    erase(lightfoot, lightfoot.tick("erasure_sensor"))
    lightfoot.cursors["erasure_sensor"] = None  # "Edit cursor" in the UI, or a cursor from before
    lightfoot.drop_erasure_request("second.json", [docs[1].doc_id])
    erase(lightfoot, lightfoot.tick("erasure_sensor"))
    assert lightfoot.stored_ids() == [docs[2].doc_id]
    lightfoot.cursors["erasure_sensor"] = json.dumps({"batch": 0, "kept": {}})
    lightfoot.drop_erasure_request("third.json", [docs[2].doc_id])
    erase(lightfoot, lightfoot.tick("erasure_sensor"))
    assert lightfoot.stored_ids() == []
    keys = {r.dagster_run.tags["dagster/run_key"] for r in lightfoot.instance.get_run_records(
        dg.RunsFilter(job_name="deletion_job"))}
    assert len(keys) == 3


def test_a_request_whose_run_was_dropped_is_asked_again(lightfoot, twenty, sample_records):
    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("gdpr.json", [docs[0].doc_id], reason="data subject request")
    dropped = lightfoot.tick("erasure_sensor")  # the daemon never makes this run
    assert not lightfoot.erasure_inbox.joinpath("gdpr.json").exists()

    again = lightfoot.tick("erasure_sensor")
    assert [r.run_key for r in again.run_requests] == [r.run_key for r in dropped.run_requests]
    erase(lightfoot, again)
    assert lightfoot.stored_ids() == [docs[1].doc_id]
    erased = lightfoot.store().read("tombstones")
    assert erased.get_column("doc_id").to_list() == [docs[0].doc_id]
    assert erased.get_column("erased_at").null_count() == 0
    # The same key asked once more is dropped as a duplicate, and the receipt is settled by its run.
    assert lightfoot.launch(again, "erasure_sensor", "deletion_job") == [None]
    settled = lightfoot.tick("erasure_sensor")
    assert settled.run_requests == [] and "1 requests done" in settled.skip_message


def test_a_wiped_instance_asks_again_for_what_is_pending_and_not_for_what_is_done(lightfoot, twenty, sample_records):
    docs = twenty[:3]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("done.json", [docs[0].doc_id])
    erase(lightfoot, lightfoot.tick("erasure_sensor"))
    lightfoot.tick("erasure_sensor")
    lightfoot.drop_erasure_request("pending.json", [docs[1].doc_id])
    asked = lightfoot.tick("erasure_sensor")

    wiped = lightfoot.root / "wiped_home"  # a fresh instance on disk, as after wiping DAGSTER_HOME
    wiped.mkdir()
    old, lightfoot.instance = lightfoot.instance, dg.DagsterInstance.from_config(str(wiped))
    try:
        lightfoot.cursors.clear()
        tick = lightfoot.tick("erasure_sensor")
        assert [r.run_key for r in tick.run_requests] == [r.run_key for r in asked.run_requests]
        erase(lightfoot, tick)
        assert lightfoot.stored_ids() == [docs[2].doc_id]
        assert lightfoot.tick("erasure_sensor").run_requests == []
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
    first = lightfoot.tick("erasure_sensor")

    def store_unavailable(*args, **kwargs):
        raise OSError("the store is unreachable")

    with monkeypatch.context() as patch:
        patch.setattr(retention, "apply_deletion_requests", store_unavailable)
        (failed,) = lightfoot.launch(first, "erasure_sensor", "deletion_job")
    assert not failed.success
    assert lightfoot.stored_ids() == [d.doc_id for d in docs]
    (receipt,) = Receipts(lightfoot.store()).pending("erasure")

    retry = lightfoot.tick("erasure_sensor")
    (request,) = retry.run_requests
    assert request.run_key == f"erasure-{receipt.receipt_id}-1" != first.run_requests[0].run_key
    assert request.tags["lightfoot/attempt"] == "1"
    erase(lightfoot, retry)
    assert lightfoot.stored_ids() == [docs[1].doc_id]
    assert lightfoot.tick("erasure_sensor").run_requests == []
    assert Receipts(lightfoot.store()).receipt("erasure", receipt.receipt_id).is_done


def test_a_request_whose_runs_keep_failing_waits_longer_before_each_attempt(
    lightfoot, twenty, sample_records, monkeypatch
):
    import assets.defs.retention as retention
    import assets.receipts as receipts
    import lightfoot_pipeline.ingest.receipts as engine_receipts

    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("gdpr.json", [docs[0].doc_id])

    def store_unavailable(*args, **kwargs):
        raise OSError("the store is unreachable")

    tick = lightfoot.tick("erasure_sensor")
    with monkeypatch.context() as patch:
        patch.setattr(retention, "apply_deletion_requests", store_unavailable)
        for _ in range(2):  # the first failure is retried at once, the second is not
            (failed,) = lightfoot.launch(tick, "erasure_sensor", "deletion_job")
            assert not failed.success
            tick = lightfoot.tick("erasure_sensor")
    assert tick.run_requests == []
    assert "1 requests whose runs failed repeatedly wait before their next attempt" in tick.skip_message
    (receipt,) = Receipts(lightfoot.store()).pending("erasure")
    waited = receipts.receipt_runs(lightfoot.instance, receipt)
    assert waited.attempt == 2 and waited.backing_off()
    assert not waited.backing_off(now=waited.retry_at + 1)

    monkeypatch.setattr(engine_receipts.time, "time", lambda: waited.retry_at + 1)  # a minute later
    retry = lightfoot.tick("erasure_sensor")
    (request,) = retry.run_requests
    assert request.run_key == f"erasure-{receipt.receipt_id}-2"
    erase(lightfoot, retry)
    assert lightfoot.stored_ids() == [docs[1].doc_id]


def test_a_request_waits_while_its_run_is_running_and_is_asked_again_once_canceled(lightfoot, twenty, sample_records):
    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("gdpr.json", [docs[0].doc_id])
    (request,) = lightfoot.tick("erasure_sensor").run_requests
    job = lightfoot.defs.resolve_job_def("deletion_job")
    running = lightfoot.instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED, tags=request.tags)

    waiting = lightfoot.tick("erasure_sensor")
    assert waiting.run_requests == [] and "1 requests waiting for their runs" in waiting.skip_message
    lightfoot.drop_erasure_request("later.json", [docs[1].doc_id])
    behind = lightfoot.tick("erasure_sensor")
    assert behind.run_requests == [] and f"wait for deletion run {running.run_id}" in behind.skip_message

    lightfoot.instance.report_run_canceled(running)
    retry = lightfoot.tick("erasure_sensor")
    (again,) = retry.run_requests
    assert again.tags["lightfoot/attempt"] == "1" and again.tags["lightfoot/erasure-request"] == \
        request.tags["lightfoot/erasure-request"]
    erase(lightfoot, retry)
    assert lightfoot.stored_ids() == []
    settled = lightfoot.tick("erasure_sensor")
    assert settled.run_requests == [] and "2 requests done" in settled.skip_message


def test_a_request_file_taken_before_is_not_applied_again(lightfoot, twenty, sample_records, monkeypatch):
    from lightfoot_pipeline.ingest.inbox import Inbox

    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    path = lightfoot.drop_erasure_request("gdpr.json", [docs[0].doc_id])
    with monkeypatch.context() as patch:
        patch.setattr(Inbox, "remove", lambda self, item: (_ for _ in ()).throw(PermissionError("read-only inbox")))
        erase(lightfoot, lightfoot.tick("erasure_sensor"))
        assert path.exists()
        lightfoot.cursors["erasure_sensor"] = None
        assert lightfoot.tick("erasure_sensor").run_requests == []
    # The document comes back; the old file, seen again, does not delete it a second time.
    lightfoot.ingest_through_the_inbox([docs[0]], sample_records)
    tick = lightfoot.tick("erasure_sensor")
    assert tick.run_requests == [] and not path.exists()
    assert lightfoot.stored_ids() == sorted(d.doc_id for d in docs)
    assert len(lightfoot.instance.get_run_records(dg.RunsFilter(job_name="deletion_job"))) == 1


def test_two_requests_with_the_same_content_in_different_files_are_both_honoured(lightfoot, twenty, sample_records):
    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("monday.json", [docs[0].doc_id], reason="gdpr")
    erase(lightfoot, lightfoot.tick("erasure_sensor"))
    assert lightfoot.stored_ids() == [docs[1].doc_id]

    lightfoot.ingest_through_the_inbox([docs[0]], sample_records)  # it comes back, and is asked away again
    lightfoot.drop_erasure_request("tuesday.json", [docs[0].doc_id], reason="gdpr")
    tick = lightfoot.tick("erasure_sensor")
    assert len(tick.run_requests) == 1
    erase(lightfoot, tick)
    assert lightfoot.stored_ids() == [docs[1].doc_id]
    runs = lightfoot.instance.get_run_records(dg.RunsFilter(job_name="deletion_job"))
    assert len({r.dagster_run.tags["lightfoot/erasure-request"] for r in runs}) == 2


PER_BATCH = ("extraction_cache", "extractions", "forms", "passages")


def observations(result, batch: str) -> dict[str, dg.AssetObservation]:
    """The run's observations of a batch's per-batch assets, by asset."""
    observed = [e.event_specific_data.asset_observation for e in result.get_asset_observation_events()]
    return {o.asset_key.to_user_string(): o for o in observed if o.partition == batch}


def ingest_batch(lightfoot, documents, records) -> str:
    """Ingest documents through the inbox as one batch; its partition key."""
    before = set(lightfoot.partitions())
    lightfoot.ingest_through_the_inbox(documents, records)
    (batch,) = set(lightfoot.partitions()) - before
    return batch


def test_a_soft_deletion_tombstones_within_the_batch_and_keeps_history(lightfoot, twenty, sample_records):
    docs = twenty[:4]
    batch = ingest_batch(lightfoot, docs, sample_records)
    lightfoot.drop_erasure_request("soft.json", [docs[1].doc_id, "never-ingested"], erase=False, reason="duplicate")
    (request,) = lightfoot.tick("erasure_sensor").run_requests
    assert request.partition_key is None and request.tags["lightfoot/deletion"].startswith("erase-")
    result = lightfoot.run(request, "deletion_job")
    assert result.success
    made = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()]
    log = next(m for m in made if m.asset_key.to_user_string() == "tombstones")
    assert log.partition is None and log.metadata["batch"].value == request.tags["lightfoot/deletion"]
    assert log.metadata["documents_deleted"].value == 1 and log.metadata["not_found"].value == 1
    assert log.metadata["erase_requested"].value == 0
    assert log.metadata["model_calls"].value == 0
    assert (log.metadata["batches_partly_deleted"].value, log.metadata["batches_tombstoned"].value) == (1, 0)
    assert not [m for m in made if m.asset_key.to_user_string() in PER_BATCH], "a deletion is no materialization"
    per_asset = observations(result, batch)
    assert sorted(per_asset) == list(PER_BATCH)
    for observed in per_asset.values():
        assert observed.metadata["status"].value == "partly deleted"
        assert observed.metadata["documents_deleted"].value == 1 and observed.metadata["documents_live"].value == 3
    erasures = next(m for m in made if m.asset_key.to_user_string() == "erasures")
    assert erasures.metadata["erased_count"].value == 0
    store = lightfoot.store()
    assert docs[1].doc_id not in store.read("documents").get_column("doc_id").to_list()
    assert store.read("tombstones").get_column("erased_at").to_list() == [None], "a soft deletion keeps history"
    assert Landing(store).deletion_requests() == []
    assert docs[1].doc_id not in Landing(store).landed_ids()
    assert lightfoot.partitions() == [batch], "the batch keeps its live documents"


def test_a_batch_whose_documents_are_all_erased_loses_its_partition_and_the_others_count_theirs(
    lightfoot, twenty, sample_records
):
    whole, part = twenty[:2], twenty[2:5]
    emptied = ingest_batch(lightfoot, whole, sample_records)
    kept = ingest_batch(lightfoot, part, sample_records)
    assert sorted(lightfoot.partitions()) == sorted([emptied, kept])
    doomed = [whole[0].doc_id, whole[1].doc_id, part[0].doc_id]
    lightfoot.drop_erasure_request("gdpr.json", doomed, reason="data subject request")
    tick = lightfoot.tick("erasure_sensor")
    (result,) = lightfoot.launch(tick, "erasure_sensor", "deletion_job")
    assert result.success
    assert lightfoot.instance.get_dynamic_partitions("batches") == [kept]
    gone = observations(result, emptied)
    assert sorted(gone) == list(PER_BATCH)
    assert all(o.metadata["status"].value == "tombstoned" and o.metadata["documents_deleted"].value == 2
               and o.metadata["documents_live"].value == 0 for o in gone.values())
    partly = observations(result, kept)
    assert sorted(partly) == list(PER_BATCH)
    assert all(o.metadata["status"].value == "partly deleted" and o.metadata["documents_deleted"].value == 1
               and o.metadata["documents_deleted_now"].value == 1 and o.metadata["documents_live"].value == 2
               for o in partly.values())
    log = next(m for m in result.asset_materializations_for_node("tombstones"))
    assert (log.metadata["batches_tombstoned"].value, log.metadata["batches_partly_deleted"].value) == (1, 1)
    # The instance keeps the observations, the audit trail of the deletion (ids and counts only).
    recorded = lightfoot.instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("passages"), asset_partitions=[kept]), limit=5).records
    assert recorded and recorded[0].asset_observation.metadata["documents_deleted"].value == 1
    assert lightfoot.stored_ids() == sorted(d.doc_id for d in part[1:])
    # A deletion a Dagster run made is not recorded a second time by the outside_deletions_sensor.
    assert lightfoot.tick("outside_deletions_sensor").asset_events in (None, [])


def test_a_redropped_request_already_honoured_is_settled_without_a_run(lightfoot, twenty, sample_records):
    docs = twenty[:2]
    lightfoot.ingest_through_the_inbox(docs, sample_records)
    lightfoot.drop_erasure_request("gdpr.json", [docs[0].doc_id], reason="data subject request")
    erase(lightfoot, lightfoot.tick("erasure_sensor"))
    assert lightfoot.tick("erasure_sensor").run_requests == []

    lightfoot.drop_erasure_request("gdpr-again.json", [docs[0].doc_id], reason="data subject request")
    tick = lightfoot.tick("erasure_sensor")
    assert tick.run_requests == []
    assert "took 1 request files" in tick.skip_message and "1 requests done" in tick.skip_message
    book = Receipts(lightfoot.store())
    assert book.pending("erasure") == []
    done = [json.loads(p.read_text()) for p in sorted(Path(book.root, "erasure", "done").glob("*.json"))]
    (again,) = [r for r in done if r["origin"].endswith("gdpr-again.json")]
    assert again["outcome"].startswith("already honoured"), again["outcome"]
    assert len(lightfoot.instance.get_run_records(dg.RunsFilter(job_name="deletion_job"))) == 1
    assert Landing(lightfoot.store()).deletion_requests() == []
    assert lightfoot.stored_ids() == [docs[1].doc_id]


def test_a_deletion_run_succeeds_although_another_batch_has_passages_without_extractions(
    lightfoot, twenty, sample_records
):
    from assets.defs.ingestion import passages

    done, unfinished = twenty[:3], twenty[3:5]
    ingest_batch(lightfoot, done, sample_records)
    lightfoot.drop_documents("unfinished", unfinished, sample_records)
    (request,) = lightfoot.tick("inbox_sensor").run_requests
    # Only the batch's passages step runs: its passages are stored, and nothing extracts them.
    assert dg.materialize([passages], instance=lightfoot.instance, resources=lightfoot.resources,
                          partition_key=request.partition_key).success
    store = lightfoot.store()
    waiting = {d.doc_id for d in unfinished}
    assert set(store.read("passages").get_column("doc_id").to_list()) >= waiting
    assert not waiting & set(store.read("extractions").get_column("doc_id").to_list())

    lightfoot.drop_erasure_request("gdpr.json", [done[0].doc_id])
    tick = lightfoot.tick("erasure_sensor")
    (result,) = lightfoot.launch(tick, "erasure_sensor", "deletion_job")
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert "passages_accounted_for" not in checks, "another batch's unfinished extraction is that batch's failure"
    assert checks and lightfoot.checks_passed(result), checks
    assert done[0].doc_id not in lightfoot.stored_ids()


def test_a_deletion_on_the_command_line_is_recorded_in_its_batches(lightfoot, twenty, sample_records):
    from lightfoot_pipeline.cli import main as command_line

    first, second = twenty[:2], twenty[2:3]
    partly = ingest_batch(lightfoot, first, sample_records)
    emptied = ingest_batch(lightfoot, second, sample_records)
    store = lightfoot.store()
    gone = [first[0].doc_id, second[0].doc_id]
    assert command_line(["delete", *gone, "--store", lightfoot.store_uri]) == 0
    assert set(gone) <= set(Landing(store).landed_ids())  # a soft delete leaves the landed copy

    tick = lightfoot.tick("outside_deletions_sensor")
    assert lightfoot.partitions() == [partly]
    assert not set(gone) & set(Landing(store).landed_ids()), "the stale landed copies go with the deletion"
    assert first[1].doc_id in Landing(store).landed_ids()
    events = {(e.asset_key.to_user_string(), e.partition): e.metadata for e in tick.asset_events}
    assert set(events) == {(a, b) for a in PER_BATCH for b in (partly, emptied)}
    assert {m["status"].value for (_, b), m in events.items() if b == partly} == {"partly deleted"}
    assert {m["status"].value for (_, b), m in events.items() if b == emptied} == {"tombstoned"}
    assert {m["documents_deleted"].value for m in events.values()} == {1}
    again = lightfoot.tick("outside_deletions_sensor")
    assert again.dynamic_partitions_requests == [] and not again.asset_events


def test_the_outside_deletions_sensor_without_a_cursor_records_no_deletion_twice(lightfoot, twenty, sample_records):
    """A new or renamed sensor, or a reset cursor, looks at the whole batch log again: the
    instance's tombstone observations say which deletions are recorded, and only the others are."""
    from lightfoot_pipeline.cli import main as command_line

    docs = twenty[:3]
    batch = ingest_batch(lightfoot, docs, sample_records)
    assert command_line(["delete", docs[0].doc_id, "--store", lightfoot.store_uri]) == 0
    assert {e.partition for e in lightfoot.tick("outside_deletions_sensor").asset_events} == {batch}

    lightfoot.cursors["outside_deletions_sensor"] = None  # as the sensor starts under a new name
    fresh = lightfoot.tick("outside_deletions_sensor")
    assert not fresh.asset_events and not fresh.dynamic_partitions_requests, "nothing recorded twice"
    assert "no deletion outside Dagster left to record" in fresh.skip_message
    assert lightfoot.partitions() == [batch]

    assert command_line(["delete", docs[1].doc_id, "--store", lightfoot.store_uri]) == 0
    lightfoot.cursors["outside_deletions_sensor"] = None
    tick = lightfoot.tick("outside_deletions_sensor")
    assert {e.partition for e in tick.asset_events} == {batch}, "a deletion not yet recorded still is"
    assert {e.metadata["documents_deleted"].value for e in tick.asset_events} == {2}
    assert not lightfoot.tick("outside_deletions_sensor").asset_events

    assert command_line(["delete", docs[2].doc_id, "--store", lightfoot.store_uri]) == 0
    lightfoot.cursors["outside_deletions_sensor"] = None
    emptied = lightfoot.tick("outside_deletions_sensor")
    assert {e.metadata["status"].value for e in emptied.asset_events} == {"tombstoned"}
    assert lightfoot.partitions() == [], "a batch left empty loses its partition"


def test_a_document_landed_again_after_its_deletion_keeps_its_landed_copy(lightfoot, twenty, sample_records):
    from lightfoot_pipeline.cli import main as command_line

    docs = twenty[:2]
    batch = ingest_batch(lightfoot, docs, sample_records)
    store = lightfoot.store()
    assert command_line(["delete", docs[0].doc_id, "--store", lightfoot.store_uri]) == 0
    Landing(store).put_documents([LandedDocument(docs[0], sample_records[docs[0].doc_id], utc_now(), "again")])
    tick = lightfoot.tick("outside_deletions_sensor")
    assert {e.partition for e in tick.asset_events} == {batch}
    assert lightfoot.partitions() == [batch]
    assert docs[0].doc_id in Landing(store).landed_ids(), "a copy landed after the deletion waits to be ingested"


@pytest.fixture
def policy_file(tmp_path):
    path = tmp_path / "retention.json"
    path.write_text(json.dumps({"rules": [{"doc_id": "musique-0001", "delete_after": "2026-01-31"}]}))
    return path


def test_the_retention_schedule_erases_documents_past_their_date(lightfoot, twenty, sample_records, policy_file):
    lightfoot = lightfoot
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

    assert lightfoot.run(request, "deletion_job").success
    assert lightfoot.store().read("documents").get_column("doc_id").to_list() == [lasting.doc_id]
    erased = lightfoot.store().read("tombstones")
    assert erased.get_column("erased_at").null_count() == 0 and erased.height == 2


def test_a_failed_retention_run_is_asked_again_by_the_erasure_sensor(
    lightfoot, twenty, sample_records, monkeypatch
):
    import assets.defs.retention as retention

    lightfoot = lightfoot
    expired = dataclasses.replace(twenty[0], retention_until=dt.date(2026, 3, 1))
    lightfoot.ingest_through_the_inbox([expired, twenty[1]], sample_records)
    (request,) = lightfoot.schedule_tick("retention_schedule", dt.datetime(2026, 3, 2, 3, 0, tzinfo=dt.UTC))
    (receipt,) = Receipts(lightfoot.store()).pending("erasure")
    assert receipt.origin == "retention schedule 2026-03-02" and receipt.erase_ids == (expired.doc_id,)
    assert request.tags["lightfoot/erasure-request"] == receipt.receipt_id

    with monkeypatch.context() as patch:
        patch.setattr(retention, "erase_history", lambda *args: (_ for _ in ()).throw(OSError("storage is down")))
        assert not lightfoot.run(request, "deletion_job").success
    assert lightfoot.stored_ids() == [twenty[1].doc_id]  # deleted, but its history is not erased

    tick = lightfoot.tick("erasure_sensor")
    (retry,) = tick.run_requests
    assert retry.run_key == f"erasure-{receipt.receipt_id}-1"
    erase(lightfoot, tick)
    assert lightfoot.store().read("tombstones").get_column("erased_at").null_count() == 0
    assert lightfoot.tick("erasure_sensor").run_requests == []
    assert Receipts(lightfoot.store()).receipt("erasure", receipt.receipt_id).is_done


def test_a_bad_policy_file_fails_the_schedule_with_its_reason(lightfoot, tmp_path):
    from assets.resources import InboxResource
    from lightfoot_pipeline.ingest.retention import PolicyError

    (tmp_path / "bad.json").write_text('{"rules": [{"keep_days": "ten"}]}')
    resources = {**lightfoot.resources, "inbox": InboxResource(retention_policy=str(tmp_path / "bad.json"))}
    with pytest.raises(dg.DagsterError, match="evaluation of schedule retention_schedule") as failure:
        lightfoot.schedule_tick("retention_schedule", dt.datetime(2026, 3, 2, tzinfo=dt.UTC), resources)
    assert isinstance(failure.value.__cause__, PolicyError)
    assert "rule 1: keep_days must be a whole number of days" in str(failure.value.__cause__)

