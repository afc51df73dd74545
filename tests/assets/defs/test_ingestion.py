"""Ingestion: the inbox sensor, the per-document assets and the hourly schedule."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import dagster as dg
import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.ingest.landing import LandedDocument, Landing, utc_now
from lightfoot_pipeline.ingest.receipts import Receipts
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store

pytestmark = [pytest.mark.dagster]

RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def test_the_inbox_sensor_lands_a_drop_and_asks_for_one_run(lightfoot, twenty, sample_records):
    docs = twenty[:5]
    lightfoot.drop_documents("five", docs, sample_records)
    tick = lightfoot.tick("document_inbox")
    ids = [d.doc_id for d in docs]
    (request,) = tick.run_requests
    assert request.job_name == "document_ingestion"
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == (ids[0], ids[-1])
    assert request.tags["lightfoot/trigger"] == "inbox"
    assert lightfoot.partitions() == ids
    assert Landing(lightfoot.store()).landed_ids() == ids
    assert Landing(lightfoot.store()).documents([ids[0]])[ids[0]].extraction == sample_records[ids[0]]
    assert not lightfoot.document_inbox.joinpath("five").exists()
    (receipt,) = Receipts(lightfoot.store()).pending("documents")
    assert receipt.doc_ids == tuple(ids) and receipt.origin.endswith("/five")
    assert request.run_key == f"inbox-{receipt.receipt_id}-0"
    assert request.tags["lightfoot/inbox-drop"] == receipt.receipt_id and request.tags["lightfoot/attempt"] == "0"
    assert lightfoot.run(request).success

    again = lightfoot.tick("document_inbox")
    assert again.run_requests == []
    assert again.skip_message == f"nothing new in {lightfoot.document_inbox}; 1 drops ingested"
    assert Receipts(lightfoot.store()).receipt("documents", receipt.receipt_id).is_done
    listed = []
    read = lightfoot.instance.get_dynamic_partitions
    lightfoot.instance.get_dynamic_partitions = lambda name: listed.append(name) or read(name)
    try:
        assert lightfoot.tick("document_inbox").skip_message == f"nothing new in {lightfoot.document_inbox}"
    finally:
        del lightfoot.instance.get_dynamic_partitions
    assert listed == [], "a tick with nothing to ask for lists no partition (100k of them take a second)"


def test_new_and_changed_documents_run_as_few_ranges_as_the_partition_order_allows(
    lightfoot, twenty, sample_records, tmp_path
):
    first = twenty[:5]
    lightfoot.drop_documents("first", first, sample_records)
    assert lightfoot.run(lightfoot.tick("document_inbox").run_requests[0]).success

    changed = dataclasses.replace(twenty[1], text=twenty[1].text + " It was renamed in 2001.")
    lightfoot.drop_documents("second", [changed, twenty[5], twenty[6]], sample_records)
    tick = lightfoot.tick("document_inbox")
    ranges = sorted((r.tags[RANGE_START], r.tags[RANGE_END]) for r in tick.run_requests)
    assert ranges == sorted([(twenty[1].doc_id, twenty[1].doc_id), (twenty[5].doc_id, twenty[6].doc_id)])
    for request in tick.run_requests:
        assert lightfoot.run(request).success

    final = [first[0], changed, *first[2:], twenty[5], twenty[6]]
    store = lightfoot.store()
    stored = store.read("passages").filter(pl.col("doc_id") == changed.doc_id).get_column("text").to_list()
    assert stored == [changed.text]
    fresh = Store(str(tmp_path / "fresh"))
    operations.ingest(fresh, final, ReplayExtractor(sample_records), HashingEmbedder(dim=32))
    assert fingerprint(store).differences(fingerprint(fresh)) == []


def test_an_unreadable_drop_is_rejected_with_its_reason(lightfoot):
    inbox = lightfoot.document_inbox
    inbox.mkdir(parents=True)
    (inbox / "broken.jsonl").write_text('{"doc_id": "a", "text": "fine"}\n{"doc_id": "b"\n')
    (inbox / "dots.jsonl").write_text(json.dumps({"doc_id": "a...b", "text": "x"}) + "\n")
    tick = lightfoot.tick("document_inbox")
    assert tick.run_requests == [] and "rejected" in tick.skip_message
    assert lightfoot.partitions() == []
    reasons = {p.name: p.read_text() for p in (inbox / "rejected").glob("*.reason.txt")}
    assert len(reasons) == 2
    assert any("broken.jsonl:2: not valid JSON" in r for r in reasons.values())
    assert any("'...'" in r and "partition key" in r for r in reasons.values())
    assert Landing(lightfoot.store()).landed_ids() == []


def per_document_and_graph(lightfoot):
    from assets.defs.extraction import extraction_cache, extractions, forms
    from assets.defs.graph import graph
    from assets.defs.ingestion import passages

    return [passages, extraction_cache, extractions, forms, graph]


def test_materializing_one_partition_reports_rows_versions_fingerprint_and_cost(lightfoot, twenty, sample_records):
    doc = twenty[0]
    store = lightfoot.store()
    Landing(store).put_documents([LandedDocument(doc, sample_records[doc.doc_id], utc_now(), "test")])
    lightfoot.instance.add_dynamic_partitions("documents", [doc.doc_id])
    result = dg.materialize(
        per_document_and_graph(lightfoot), partition_key=doc.doc_id, instance=lightfoot.instance,
        resources=lightfoot.resources,
    )
    assert result.success
    events = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()]
    by_asset = {m.asset_key.to_user_string(): m.metadata for m in events}
    digest = fingerprint(store).digest
    assert by_asset["passages"]["dagster/row_count"].value == 1
    first_commit = json.loads(store.history().row(0, named=True)["versions"])
    assert by_asset["passages"]["table_versions"].value == {t: first_commit[t] for t in ("passages", "documents")}
    assert by_asset["passages"]["store_commit"].value == 1
    assert by_asset["extractions"]["run_extracted"].value == 1 and by_asset["extractions"]["status"].value == "extracted"
    assert by_asset["extractions"]["run_model_calls"].value == 0  # replayed: no call, here or in extraction_cache
    assert by_asset["extraction_cache"]["model_calls"].value == 0 and by_asset["extraction_cache"]["cost_usd"].value == 0.0
    assert by_asset["forms"]["run_forms"].value == by_asset["forms"]["dagster/row_count"].value \
        == store.read("forms").height > 0
    assert by_asset["facts"]["store_fingerprint"].value == digest
    assert by_asset["entities"]["rows"].value["entities"] == store.read("entities").height
    assert by_asset["name_vectors"]["embedder"].value == "hashing-3gram-32d"
    history = store.history()
    assert history.get_column("operation").to_list() == ["passages", "extractions", "forms", "graph"]

    again = dg.materialize(
        per_document_and_graph(lightfoot), partition_key=doc.doc_id, instance=lightfoot.instance,
        resources=lightfoot.resources,
    )
    assert again.success
    assert store.history().height == 4, "a re-run on unchanged input commits nothing"


def test_a_partition_without_a_landed_copy_fails_saying_so(lightfoot):
    lightfoot.instance.add_dynamic_partitions("documents", ["ghost"])
    result = dg.materialize(
        per_document_and_graph(lightfoot)[:1], partition_key="ghost", instance=lightfoot.instance,
        resources=lightfoot.resources, raise_on_error=False,
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "no landed copy and no stored document (e.g. ghost)" in failure.event_specific_data.error.message


def test_a_passage_with_no_recording_fails_with_its_reason_and_is_still_accounted_for(lightfoot, twenty, sample_records):
    records = {twenty[0].doc_id: sample_records[twenty[0].doc_id]}  # the second document comes without one
    lightfoot.drop_documents("partial", twenty[:2], records)
    result = lightfoot.run(lightfoot.tick("document_inbox").run_requests[0])
    assert result.success
    (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == "passages_accounted_for"]
    assert check.passed
    assert check.metadata["failed"].value == 1 and check.metadata["missing"].value == 0
    extractions = lightfoot.store().read("extractions")
    failed = extractions.filter(pl.col("status") == "failed")
    assert failed.get_column("doc_id").to_list() == [twenty[1].doc_id]
    assert "replay mode" in failed.get_column("reason").item()


def test_the_hourly_schedule_ingests_landed_documents_the_store_lacks(lightfoot_on_disk, twenty, sample_records):
    lightfoot = lightfoot_on_disk
    docs = twenty[:3]
    Landing(lightfoot.store()).put_documents(
        [LandedDocument(d, sample_records[d.doc_id], utc_now(), "test") for d in docs]
    )
    (request,) = lightfoot.schedule_tick("hourly_ingestion", dt.datetime(2026, 6, 15, 10, 15, tzinfo=dt.UTC))
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == (docs[0].doc_id, docs[-1].doc_id)
    assert request.run_key == "hourly-20260615T1015"
    assert lightfoot.partitions() == [d.doc_id for d in docs]
    assert lightfoot.run(request, "document_ingestion").success
    assert lightfoot.schedule_tick("hourly_ingestion", dt.datetime(2026, 6, 15, 11, 15, tzinfo=dt.UTC)) == []


def test_a_reset_cursor_loses_no_drop(lightfoot, twenty, sample_records):
    lightfoot.drop_documents("first", twenty[:2], sample_records)
    assert all(r.success for r in lightfoot.launch(lightfoot.tick("document_inbox")))
    lightfoot.cursors["document_inbox"] = json.dumps({"batch": 0, "kept": {}})  # "Edit cursor", or one from before
    lightfoot.drop_documents("second", twenty[2:4], sample_records)
    assert all(r is not None and r.success for r in lightfoot.launch(lightfoot.tick("document_inbox")))
    lightfoot.cursors["document_inbox"] = None
    lightfoot.drop_documents("third", twenty[4:5], sample_records)
    lightfoot.tick("document_inbox")  # its run never comes to exist
    lightfoot.cursors["document_inbox"] = None
    assert all(r is not None and r.success for r in lightfoot.launch(lightfoot.tick("document_inbox")))
    assert lightfoot.stored_ids() == sorted(d.doc_id for d in twenty[:5])
    assert lightfoot.tick("document_inbox").run_requests == []
    assert Receipts(lightfoot.store()).pending("documents") == []


def test_a_failed_ingestion_run_is_asked_again_until_one_succeeds(lightfoot, twenty, sample_records, monkeypatch):
    import assets.defs.ingestion as ingestion

    docs = twenty[:3]
    lightfoot.drop_documents("drop", docs, sample_records)
    first = lightfoot.tick("document_inbox")

    def store_unavailable(*args, **kwargs):
        raise OSError("the store is unreachable")

    with monkeypatch.context() as patch:
        patch.setattr(ingestion, "upsert_documents", store_unavailable)
        (failed,) = lightfoot.launch(first)
    assert not failed.success and lightfoot.stored_ids() == []

    retry = lightfoot.tick("document_inbox")
    (request,) = retry.run_requests
    (receipt,) = Receipts(lightfoot.store()).pending("documents")
    assert request.run_key == f"inbox-{receipt.receipt_id}-1" and request.tags["lightfoot/attempt"] == "1"
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == (docs[0].doc_id, docs[-1].doc_id)
    assert all(r.success for r in lightfoot.launch(retry))
    assert lightfoot.stored_ids() == sorted(d.doc_id for d in docs)
    assert lightfoot.tick("document_inbox").run_requests == []


def test_a_wiped_instance_gets_the_partitions_and_runs_of_pending_drops_back(lightfoot, twenty, sample_records):
    lightfoot.drop_documents("done", twenty[:2], sample_records)
    assert all(r.success for r in lightfoot.launch(lightfoot.tick("document_inbox")))
    lightfoot.tick("document_inbox")
    lightfoot.drop_documents("pending", twenty[2:4], sample_records)
    lightfoot.tick("document_inbox")

    old, lightfoot.instance = lightfoot.instance, dg.DagsterInstance.ephemeral()
    try:
        tick = lightfoot.tick("document_inbox")
        (request,) = tick.run_requests
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == (twenty[2].doc_id, twenty[3].doc_id)
        assert lightfoot.partitions() == [twenty[2].doc_id, twenty[3].doc_id]
        assert all(r.success for r in lightfoot.launch(tick))
        assert lightfoot.stored_ids() == sorted(d.doc_id for d in twenty[:4])
    finally:
        lightfoot.instance.dispose()
        lightfoot.instance = old


def test_a_drop_landed_before_is_not_landed_again(lightfoot, twenty, sample_records, monkeypatch):
    from lightfoot_pipeline.ingest.inbox import Inbox

    path = lightfoot.drop_documents("drop", twenty[:2], sample_records)
    with monkeypatch.context() as patch:
        patch.setattr(Inbox, "remove", lambda self, item: (_ for _ in ()).throw(PermissionError("read-only inbox")))
        assert all(r.success for r in lightfoot.launch(lightfoot.tick("document_inbox")))
        lightfoot.cursors["document_inbox"] = None
        again = lightfoot.tick("document_inbox")
    assert again.run_requests == [] and path.exists()
    assert "1 drops ingested" in again.skip_message
    lightfoot.tick("document_inbox")
    assert not path.exists()
    assert len(lightfoot.instance.get_run_records(dg.RunsFilter(job_name="document_ingestion"))) == 1


def test_the_same_file_dropped_again_with_new_content_is_a_new_drop(lightfoot, twenty, sample_records):
    lightfoot.document_inbox.mkdir(parents=True)
    path = lightfoot.document_inbox / "news.jsonl"
    original = twenty[0]
    path.write_text(json.dumps({"doc_id": original.doc_id, "title": original.title, "text": original.text}) + "\n")
    assert all(r.success for r in lightfoot.launch(lightfoot.tick("document_inbox")))
    lightfoot.tick("document_inbox")
    path.write_text(json.dumps({"doc_id": original.doc_id, "title": original.title,
                                "text": original.text + " It was renamed in 2001."}) + "\n")
    (request,) = lightfoot.tick("document_inbox").run_requests
    assert request.tags["lightfoot/attempt"] == "0"
    assert lightfoot.run(request).success
    text = lightfoot.store().read("passages").filter(pl.col("doc_id") == original.doc_id).get_column("text").to_list()
    assert text == [original.text + " It was renamed in 2001."]


def test_the_hourly_schedule_asks_for_the_runs_of_pending_drops(lightfoot_on_disk, twenty, sample_records):
    lightfoot = lightfoot_on_disk
    docs = twenty[:2]
    lightfoot.drop_documents("drop", docs, sample_records)
    at = lambda hour: lightfoot.schedule_tick(  # noqa: E731
        "hourly_ingestion", dt.datetime(2026, 6, 15, hour, 15, tzinfo=dt.UTC))
    (request,) = at(10)
    (receipt,) = Receipts(lightfoot.store()).pending("documents")
    assert request.tags["lightfoot/inbox-drop"] == receipt.receipt_id
    assert request.tags["lightfoot/trigger"] == "schedule"
    assert lightfoot.partitions() == [d.doc_id for d in docs]
    assert lightfoot.run(request, "document_ingestion").success
    assert at(11) == []
    assert Receipts(lightfoot.store()).receipt("documents", receipt.receipt_id).is_done
    assert lightfoot.tick("document_inbox").run_requests == []
