"""Ingestion: the inbox sensor, the per-batch assets and the hourly schedule (a partition per batch,
documents as rows)."""

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
from lightfoot_pipeline.ingest.receipts import Receipt, Receipts
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store

pytestmark = [pytest.mark.dagster]

RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
PER_BATCH = ("passages", "extraction_cache", "extractions", "forms")


def materializations(result) -> dict[str, list[dg.AssetMaterialization]]:
    """A run's materializations by asset."""
    out: dict[str, list[dg.AssetMaterialization]] = {}
    for event in result.get_asset_materialization_events():
        m = event.event_specific_data.materialization
        out.setdefault(m.asset_key.to_user_string(), []).append(m)
    return out


def test_the_inbox_sensor_lands_a_drop_and_asks_for_one_run(lightfoot, twenty, sample_records):
    docs = twenty[:5]
    lightfoot.drop_documents("five", docs, sample_records)
    tick = lightfoot.tick("inbox_sensor")
    ids = [d.doc_id for d in docs]
    (request,) = tick.run_requests
    assert request.job_name == "ingestion_job"
    (receipt,) = Receipts(lightfoot.store()).pending("documents")
    batch = f"drop-{receipt.receipt_id}"
    assert request.partition_key == batch, "one run of the drop's batch"
    assert RANGE_START not in request.tags and RANGE_END not in request.tags
    assert request.tags["lightfoot/trigger"] == "inbox"
    assert lightfoot.partitions() == [batch], "a partition for the batch, none per document"
    assert Landing(lightfoot.store()).landed_ids() == ids
    assert Landing(lightfoot.store()).documents([ids[0]])[ids[0]].extraction == sample_records[ids[0]]
    assert not lightfoot.document_inbox.joinpath("five").exists()
    assert receipt.doc_ids == tuple(ids) and receipt.origin.endswith("/five")
    assert request.run_key == f"inbox-{receipt.receipt_id}-0"
    assert request.tags["lightfoot/inbox-drop"] == receipt.receipt_id and request.tags["lightfoot/attempt"] == "0"
    result = lightfoot.run(request)
    assert result.success
    by_asset = materializations(result)
    for asset in PER_BATCH:  # one materialization of the batch, its documents counted as rows
        (m,) = by_asset[asset]
        assert m.partition == batch and m.metadata["batch"].value == batch
        assert m.metadata["documents"].value == len(ids)
    assert by_asset["passages"][0].metadata["documents_added"].value == len(ids)

    again = lightfoot.tick("inbox_sensor")
    assert again.run_requests == []
    assert again.skip_message == f"nothing new in {lightfoot.document_inbox}; 1 drops ingested"
    assert Receipts(lightfoot.store()).receipt("documents", receipt.receipt_id).is_done
    listed = []
    read = lightfoot.instance.get_dynamic_partitions
    lightfoot.instance.get_dynamic_partitions = lambda name: listed.append(name) or read(name)
    try:
        assert lightfoot.tick("inbox_sensor").skip_message == f"nothing new in {lightfoot.document_inbox}"
    finally:
        del lightfoot.instance.get_dynamic_partitions
    assert listed == [], "a tick with nothing to ask for lists no partition (100k of them take a second)"


def test_a_drop_of_new_and_changed_documents_is_one_run_of_its_own_batch(lightfoot, twenty, sample_records, tmp_path):
    # (Replaces the test that new and changed documents ran as few partition ranges as the order
    # allowed: partition ranges are gone, a drop is one batch whatever its documents.)
    first = twenty[:5]
    lightfoot.drop_documents("first", first, sample_records)
    assert lightfoot.run(lightfoot.tick("inbox_sensor").run_requests[0]).success
    (first_batch,) = lightfoot.partitions()

    changed = dataclasses.replace(twenty[1], text=twenty[1].text + " It was renamed in 2001.")
    lightfoot.drop_documents("second", [changed, twenty[5], twenty[6]], sample_records)
    tick = lightfoot.tick("inbox_sensor")
    (request,) = tick.run_requests
    assert request.partition_key != first_batch
    assert lightfoot.partitions() == [first_batch, request.partition_key]
    result = lightfoot.run(request)
    assert result.success
    (m,) = materializations(result)["passages"]
    assert m.partition == request.partition_key
    counts = {k: m.metadata[f"documents_{k}"].value for k in ("added", "replaced", "unchanged")}
    assert counts == {"added": 2, "replaced": 1, "unchanged": 0}
    assert m.metadata["documents"].value == 3

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
    tick = lightfoot.tick("inbox_sensor")
    assert tick.run_requests == [] and "rejected" in tick.skip_message
    assert lightfoot.partitions() == []
    reasons = {p.name: p.read_text() for p in (inbox / "rejected").glob("*.reason.txt")}
    assert len(reasons) == 2
    assert any("broken.jsonl:2: not valid JSON" in r for r in reasons.values())
    assert any("'...'" in r and "partition key" in r for r in reasons.values())
    assert Landing(lightfoot.store()).landed_ids() == []


def test_a_rejected_drop_is_logged_by_its_kind_and_digest_never_its_values(lightfoot, tmp_path):
    """The sensor's log lines stay under DAGSTER_HOME for good (issue 35): a rejected drop's bad
    values (a date, a doc id, a group) go to the rejected folder beside it, and the log says only
    the kind of reason and the drop's digest."""
    import logging

    from lightfoot_pipeline.ingest.inbox import Inbox, rejection_id, take_documents

    inbox = lightfoot.document_inbox
    inbox.mkdir(parents=True)
    row = {"doc_id": "patient-4711", "text": "x", "retention_until": "2031-02-30", "readers": ["ward-9-oncology"]}
    (inbox / "bad.jsonl").write_text(json.dumps(row) + "\n")
    box = Inbox(str(inbox))
    (item,) = box.items()
    lines: list[str] = []

    class Recorder(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    log = logging.getLogger(f"inbox-{tmp_path.name}")
    log.propagate = False
    log.addHandler(Recorder())
    try:
        intake = take_documents(box, Landing(lightfoot.store()), log)
    finally:
        log.handlers.clear()
    assert list(intake.rejected) == ["bad.jsonl"]
    assert lines == [f"rejected drop {rejection_id(item)} (not a readable dataset); it and its reason are in the "
                     "inbox's rejected/ folder"]
    (reason,) = (inbox / "rejected").glob("*.reason.txt")
    assert reason.read_text().startswith(f"drop {rejection_id(item)}: ") and "2031-02-30" in reason.read_text()


def per_batch_and_graph(lightfoot):
    from assets.defs.extraction import extraction_cache, extractions, forms
    from assets.defs.graph import reconcile_graph
    from assets.defs.ingestion import passages

    return [passages, extraction_cache, extractions, forms, reconcile_graph]


def test_materializing_one_partition_reports_rows_versions_fingerprint_and_cost(lightfoot, twenty, sample_records,
                                                                                  monkeypatch):
    monkeypatch.setenv("LIGHTFOOT_PAGE_URL", "http://127.0.0.1:8410")
    doc = twenty[0]
    store = lightfoot.store()
    Landing(store).put_documents([LandedDocument(doc, sample_records[doc.doc_id], utc_now(), "test")])
    receipt = Receipt.for_documents({"test": "one"}, [doc.doc_id], "test")
    Receipts(store).record(receipt)
    batch = f"drop-{receipt.receipt_id}"
    lightfoot.instance.add_dynamic_partitions("batches", [batch])
    result = dg.materialize(
        per_batch_and_graph(lightfoot), partition_key=batch, instance=lightfoot.instance,
        resources=lightfoot.resources,
    )
    assert result.success
    events = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()]
    by_asset = {m.asset_key.to_user_string(): m.metadata for m in events}
    digest = fingerprint(store).digest
    assert by_asset["passages"]["dagster/row_count"].value == 1
    assert by_asset["passages"]["batch"].value == batch and by_asset["passages"]["documents"].value == 1
    first_commit = json.loads(store.history().row(0, named=True)["versions"])
    assert by_asset["passages"]["table_versions"].value == {t: first_commit[t] for t in ("passages", "documents")}
    assert by_asset["passages"]["store_commit"].value == 1
    # Issue 35: the batch's link leads each per-batch materialization (it was the last of ~25 rows),
    # and says what the page's batch view needs (the operator), as the page's refusal does.
    from lightfoot_pipeline.service.explanations import OPERATOR_ONLY

    for name in PER_BATCH:
        assert list(by_asset[name])[:3] == ["batch", "batch_page", "read_with"], name
    assert by_asset["passages"]["batch_page"].value == f"http://127.0.0.1:8410/batch/{batch}"
    assert "lightfoot serve --as '*'" in by_asset["passages"]["read_with"].value
    assert "lightfoot serve --as '*'" in OPERATOR_ONLY and "lightfoot explain batch" in OPERATOR_ONLY
    assert by_asset["extractions"]["extracted"].value == 1 and by_asset["extractions"]["documents_extracted"].value == 1
    assert by_asset["extractions"]["replayed"].value == 1 and by_asset["extractions"]["failed"].value == 0
    # replayed: no call, in extraction_cache (the only step that asks the model)
    assert by_asset["extraction_cache"]["asked"].value == 0 and by_asset["extraction_cache"]["documents_asked"].value == 0
    assert by_asset["extraction_cache"]["model_calls"].value == 0 and by_asset["extraction_cache"]["cost_usd"].value == 0.0
    assert by_asset["forms"]["forms_derived"].value == by_asset["forms"]["dagster/row_count"].value \
        == store.read("forms").height > 0
    assert by_asset["facts"]["store_fingerprint"].value == digest
    assert by_asset["entities"]["rows"].value["entities"] == store.read("entities").height
    assert by_asset["name_vectors"]["embedder"].value == "hashing-3gram-32d"
    history = store.history()
    assert history.get_column("operation").to_list() == ["passages", "extractions", "forms", "graph"]

    # A re-run on unchanged input commits nothing and leaves the batch's counts as they were:
    # tests/lightfoot_pipeline/operations/test_batches.py::test_a_batch_in_stages_equals_one_ingest_and_a_rerun_commits_nothing


def test_a_batch_whose_document_has_no_landed_copy_fails_saying_so(lightfoot):
    receipt = Receipt.for_documents({"test": "ghost"}, ["ghost"], "test")  # its document was never landed
    Receipts(lightfoot.store()).record(receipt)
    batch = f"drop-{receipt.receipt_id}"
    lightfoot.instance.add_dynamic_partitions("batches", [batch])
    result = dg.materialize(
        per_batch_and_graph(lightfoot)[:1], partition_key=batch, instance=lightfoot.instance,
        resources=lightfoot.resources, raise_on_error=False,
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert f"1 documents of batch {batch} have no landed copy and are not stored (e.g. ghost)" \
        in failure.event_specific_data.error.message


def test_a_batch_whose_receipt_is_not_held_fails_saying_so(lightfoot):
    batch = "drop-0123456789abcdef"
    lightfoot.instance.add_dynamic_partitions("batches", [batch])
    result = dg.materialize(
        per_batch_and_graph(lightfoot)[:1], partition_key=batch, instance=lightfoot.instance,
        resources=lightfoot.resources, raise_on_error=False,
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert f"batch {batch} names receipt 0123456789abcdef, which the landing area does not hold" \
        in failure.event_specific_data.error.message


# A passage with no recording is stored as failed with its reason and still accounted for:
# tests/lightfoot_pipeline/operations/test_batches.py::test_a_passage_with_no_recording_is_stored_as_failed_and_still_accounted_for


def test_the_hourly_schedule_ingests_landed_documents_the_store_lacks(lightfoot, twenty, sample_records):
    lightfoot = lightfoot
    docs = twenty[:3]
    Landing(lightfoot.store()).put_documents(
        [LandedDocument(d, sample_records[d.doc_id], utc_now(), "test") for d in docs]
    )
    (request,) = lightfoot.schedule_tick("ingestion_schedule", dt.datetime(2026, 6, 15, 10, 15, tzinfo=dt.UTC))
    (receipt,) = Receipts(lightfoot.store()).pending("documents")  # the pick-up gets a receipt and a batch
    assert receipt.doc_ids == tuple(sorted(d.doc_id for d in docs)) and receipt.origin == "hourly schedule 20260615T1015"
    assert request.partition_key == f"drop-{receipt.receipt_id}" and RANGE_START not in request.tags
    assert request.run_key == f"inbox-{receipt.receipt_id}-0" and request.tags["lightfoot/trigger"] == "schedule"
    assert lightfoot.partitions() == [request.partition_key]
    assert lightfoot.run(request, "ingestion_job").success
    assert lightfoot.stored_ids() == sorted(d.doc_id for d in docs)
    assert lightfoot.schedule_tick("ingestion_schedule", dt.datetime(2026, 6, 15, 11, 15, tzinfo=dt.UTC)) == []


def test_a_reset_cursor_loses_no_drop(lightfoot, twenty, sample_records):
    lightfoot.drop_documents("first", twenty[:2], sample_records)
    assert all(r.success for r in lightfoot.launch(lightfoot.tick("inbox_sensor")))
    lightfoot.cursors["inbox_sensor"] = json.dumps({"batch": 0, "kept": {}})  # "Edit cursor", or one from before
    lightfoot.drop_documents("second", twenty[2:4], sample_records)
    assert all(r is not None and r.success for r in lightfoot.launch(lightfoot.tick("inbox_sensor")))
    lightfoot.cursors["inbox_sensor"] = None
    lightfoot.drop_documents("third", twenty[4:5], sample_records)
    lightfoot.tick("inbox_sensor")  # its run never comes to exist
    lightfoot.cursors["inbox_sensor"] = None
    assert all(r is not None and r.success for r in lightfoot.launch(lightfoot.tick("inbox_sensor")))
    assert lightfoot.stored_ids() == sorted(d.doc_id for d in twenty[:5])
    assert lightfoot.tick("inbox_sensor").run_requests == []
    assert Receipts(lightfoot.store()).pending("documents") == []


def test_a_failed_ingestion_run_is_asked_again_until_one_succeeds(lightfoot, twenty, sample_records, monkeypatch):
    import assets.defs.ingestion as ingestion

    docs = twenty[:3]
    lightfoot.drop_documents("drop", docs, sample_records)
    first = lightfoot.tick("inbox_sensor")
    (batch,) = lightfoot.partitions()

    def store_unavailable(*args, **kwargs):
        raise OSError("the store is unreachable")

    with monkeypatch.context() as patch:
        patch.setattr(ingestion, "store_batch_documents", store_unavailable)
        (failed,) = lightfoot.launch(first)
    assert not failed.success and lightfoot.stored_ids() == []

    retry = lightfoot.tick("inbox_sensor")
    (request,) = retry.run_requests
    (receipt,) = Receipts(lightfoot.store()).pending("documents")
    assert request.run_key == f"inbox-{receipt.receipt_id}-1" and request.tags["lightfoot/attempt"] == "1"
    assert request.partition_key == first.run_requests[0].partition_key == batch == f"drop-{receipt.receipt_id}"
    assert lightfoot.partitions() == [batch], "the retry is a run of the same batch"
    assert all(r.success for r in lightfoot.launch(retry))
    assert lightfoot.stored_ids() == sorted(d.doc_id for d in docs)
    assert lightfoot.tick("inbox_sensor").run_requests == []


def test_a_wiped_instance_gets_the_partitions_and_runs_of_pending_drops_back(lightfoot, twenty, sample_records, tmp_path):
    lightfoot.drop_documents("done", twenty[:2], sample_records)
    assert all(r.success for r in lightfoot.launch(lightfoot.tick("inbox_sensor")))
    lightfoot.tick("inbox_sensor")
    lightfoot.drop_documents("pending", twenty[2:4], sample_records)
    lightfoot.tick("inbox_sensor")
    (pending,) = Receipts(lightfoot.store()).pending("documents")

    wiped = tmp_path / "wiped_dagster_home"  # on disk: a sensor resolves its runs' partition through the ref
    wiped.mkdir()
    old, lightfoot.instance = lightfoot.instance, dg.DagsterInstance.from_config(str(wiped))
    try:
        tick = lightfoot.tick("inbox_sensor")
        (request,) = tick.run_requests
        assert request.partition_key == f"drop-{pending.receipt_id}"
        assert pending.doc_ids == tuple(sorted([twenty[2].doc_id, twenty[3].doc_id]))
        assert lightfoot.partitions() == [request.partition_key]
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
        assert all(r.success for r in lightfoot.launch(lightfoot.tick("inbox_sensor")))
        lightfoot.cursors["inbox_sensor"] = None
        again = lightfoot.tick("inbox_sensor")
    assert again.run_requests == [] and path.exists()
    assert "1 drops ingested" in again.skip_message
    lightfoot.tick("inbox_sensor")
    assert not path.exists()
    assert len(lightfoot.instance.get_run_records(dg.RunsFilter(job_name="ingestion_job"))) == 1


def test_the_same_file_dropped_again_with_new_content_is_a_new_drop(lightfoot, twenty, sample_records):
    lightfoot.document_inbox.mkdir(parents=True)
    path = lightfoot.document_inbox / "news.jsonl"
    original = twenty[0]
    path.write_text(json.dumps({"doc_id": original.doc_id, "title": original.title, "text": original.text}) + "\n")
    assert all(r.success for r in lightfoot.launch(lightfoot.tick("inbox_sensor")))
    lightfoot.tick("inbox_sensor")
    path.write_text(json.dumps({"doc_id": original.doc_id, "title": original.title,
                                "text": original.text + " It was renamed in 2001."}) + "\n")
    (request,) = lightfoot.tick("inbox_sensor").run_requests
    assert request.tags["lightfoot/attempt"] == "0"
    assert lightfoot.run(request).success
    text = lightfoot.store().read("passages").filter(pl.col("doc_id") == original.doc_id).get_column("text").to_list()
    assert text == [original.text + " It was renamed in 2001."]


def test_the_hourly_schedule_asks_for_the_runs_of_pending_drops(lightfoot, twenty, sample_records):
    lightfoot = lightfoot
    docs = twenty[:2]
    lightfoot.drop_documents("drop", docs, sample_records)
    at = lambda hour: lightfoot.schedule_tick(  # noqa: E731
        "ingestion_schedule", dt.datetime(2026, 6, 15, hour, 15, tzinfo=dt.UTC))
    (request,) = at(10)
    (receipt,) = Receipts(lightfoot.store()).pending("documents")
    assert request.tags["lightfoot/inbox-drop"] == receipt.receipt_id
    assert request.tags["lightfoot/trigger"] == "schedule"
    assert request.partition_key == f"drop-{receipt.receipt_id}"
    assert lightfoot.partitions() == [request.partition_key]
    assert lightfoot.run(request, "ingestion_job").success
    assert at(11) == []
    assert Receipts(lightfoot.store()).receipt("documents", receipt.receipt_id).is_done
    assert lightfoot.tick("inbox_sensor").run_requests == []


def test_a_drop_of_many_documents_writes_as_many_materializations_as_a_drop_of_one(lightfoot, twenty, sample_records):
    """A run's events follow the assets, not the documents: one materialization per asset per run."""

    def materialization_events(name: str, documents) -> dict[str, int]:
        lightfoot.drop_documents(name, documents, sample_records)
        (request,) = lightfoot.tick("inbox_sensor").run_requests
        result = lightfoot.run(request)
        assert result.success
        records = lightfoot.instance.get_records_for_run(
            result.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=100_000).records
        by_asset: dict[str, int] = {}
        for record in records:
            key = record.event_log_entry.dagster_event.asset_key.to_user_string()
            by_asset[key] = by_asset.get(key, 0) + 1
        return by_asset

    one = materialization_events("one", twenty[:1])
    many = materialization_events("many", twenty[1:11])
    assert sum(many.values()) == sum(one.values()) > 0
    assert many == one
    assert all(one[asset] == 1 for asset in PER_BATCH), one
