"""The stages of a batch, one commit each (operations/batches.py, graph.py, deletion_requests.py,
checks.py): what each does to the store, tested once here, with no orchestrator. The Dagster
assets that call them are tested for their wiring, events and metadata (tests/assets/)."""

from __future__ import annotations

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.ingest.landing import DeletionRequest, LandedDocument, Landing, utc_now
from lightfoot_pipeline.ingest.receipts import Receipt, Receipts
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.operations.batches import (
    BatchError,
    batch_counts,
    batch_deletions,
    batch_doc_ids,
    batch_passages,
    derive_batch_forms,
    record_batch_extractions,
    store_batch_documents,
)
from lightfoot_pipeline.operations.checks import account_for_passages, compare_with_rebuild
from lightfoot_pipeline.operations.deletion_requests import already_honoured, apply_deletion_requests
from lightfoot_pipeline.operations.graph import update_graph
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.batches import CLI, DAGSTER, Batch, new_batch_id, writing_batch
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store


def land(store: Store, documents, records, name: str = "drop") -> tuple[str, Receipt]:
    """Documents landed with a receipt, as the inbox lands a drop; the drop's batch id and receipt."""
    Landing(store).put_documents([LandedDocument(d, records.get(d.doc_id), utc_now(), "test") for d in documents])
    receipt = Receipt.for_documents({"test": name}, [d.doc_id for d in documents], "test")
    Receipts(store).record(receipt)
    return f"drop-{receipt.receipt_id}", receipt


def run_batch(store: Store, batch: str, receipt: Receipt | None, embedder=None):
    """Every stage of a batch, each its own commit, inside the batch."""
    with writing_batch(Batch(batch, "run-1", DAGSTER)):
        stored = store_batch_documents(store, batch, receipt, IndexSettings())
        extracted = record_batch_extractions(store, batch, lambda recorded: ReplayExtractor(recorded))
        formed = derive_batch_forms(store, batch)
        graph = update_graph(store, IndexSettings(), lambda: embedder or HashingEmbedder(dim=32), fingerprint=True)
    return stored, extracted, formed, graph


@pytest.mark.slow
def test_a_batch_in_stages_equals_one_ingest_and_a_rerun_commits_nothing(tmp_path, sample_documents, sample_records):
    store = Store(str(tmp_path / "staged"))
    documents = sample_documents[:5]
    batch, receipt = land(store, documents, sample_records)
    stored, extracted, formed, graph = run_batch(store, batch, receipt)
    assert stored.staged == 5 and stored.counts["documents"] == stored.counts["added"] == 5
    assert stored.passages == store.read("passages").height > 0
    assert stored.state is not None and stored.state.changed and stored.state.tables == ("passages", "documents")
    assert extracted.documents["extracted"] == 5 and extracted.replayed == len(extracted.outcomes) == stored.passages
    assert formed.forms == store.read("forms").height > 0 and formed.names > 0
    assert store.history().get_column("operation").to_list() == ["passages", "extractions", "forms", "graph"]
    assert graph.fingerprint == fingerprint(store).digest and graph.documents_added == 5

    fresh = Store(str(tmp_path / "fresh"))
    operations.ingest(fresh, documents, ReplayExtractor(sample_records), HashingEmbedder(dim=32))
    assert fingerprint(store).digest == fingerprint(fresh).digest, "the stages are the command line's ingest"

    again = run_batch(store, batch, receipt)
    assert store.history().height == 4, "a re-run on unchanged input commits nothing"
    assert again[0].counts == stored.counts, "a re-run leaves the batch's counts as they were"
    assert not any(report.state.changed for report in again[:3])


def test_a_document_with_neither_a_landed_copy_nor_a_stored_one_fails_the_batch(store):
    receipt = Receipt.for_documents({"test": "ghost"}, ["ghost"], "test")
    with pytest.raises(BatchError, match=r"1 documents of batch drop-x have no landed copy and are not stored \(e.g. ghost\)"):
        store_batch_documents(store, "drop-x", receipt, IndexSettings())


def test_a_passage_with_no_recording_is_stored_as_failed_and_still_accounted_for(store, sample_documents,
                                                                                sample_records):
    documents = sample_documents[:2]
    batch, receipt = land(store, documents, {documents[0].doc_id: sample_records[documents[0].doc_id]})
    with writing_batch(Batch(batch, "run-1", DAGSTER)):
        store_batch_documents(store, batch, receipt, IndexSettings())
        assert {p.doc_id for p in batch_passages(store, batch).unextracted} == {d.doc_id for d in documents}
        report = record_batch_extractions(store, batch, lambda recorded: ReplayExtractor(recorded))
    assert {o.doc_id for o in report.failures} == {documents[1].doc_id}
    assert report.documents == {"extracted": 1, "partly_failed": 0, "failed": 1, "without_passages": 0}
    account = account_for_passages(store, batch_doc_ids(store, batch))
    assert account.passed and account.failed == len(report.failures) and account.missing == 0
    assert {p.doc_id for p in batch_passages(store, batch).unextracted} == {documents[1].doc_id}, \
        "a failed passage is asked again by the next attempt"


@pytest.mark.slow
def test_deletion_requests_tombstone_their_documents_and_count_them_in_their_batches(
        tmp_path, sample_documents, sample_records):
    store = Store(str(tmp_path / "store"))
    documents = sample_documents[:4]
    batch, receipt = land(store, documents, sample_records)
    run_batch(store, batch, receipt)
    doomed = documents[0].doc_id
    Landing(store).request_deletions([DeletionRequest(doomed, "a test", True, utc_now(), "test")])
    done = apply_deletion_requests(store)
    assert list(done.applied.deleted) == [doomed] and done.requests == 1 and done.state.changed
    assert Landing(store).deletion_requests() == [] and doomed not in Landing(store).landed_ids()
    (held,) = batch_deletions(store, [doomed])
    assert (held.batch_id, held.held, held.live, held.deleted, held.deleted_now) == (batch, 4, 3, 1, 1)
    assert batch_counts(store, batch)["documents"] == 4, "the batch's own counts are of what it did"
    update_graph(store, IndexSettings(), lambda: HashingEmbedder(dim=32))
    assert already_honoured(store, [doomed], []) and not already_honoured(store, [doomed], [doomed])
    summary = operations.erase_history(store, [doomed]).summary()
    assert summary["erased_count"] == 1 and doomed not in str(summary)
    assert already_honoured(store, [doomed], [doomed])
    assert compare_with_rebuild(store, HashingEmbedder(dim=32), IndexSettings()).differing == []
    assert store.read("documents").filter(pl.col("doc_id") == doomed).height == 0


def test_answering_a_batch_asks_only_what_the_model_is_sent_and_says_why_a_model_is_unusable(
        tmp_path, sample_documents, sample_records):
    from lightfoot_pipeline.ingest.extraction.claims import ExtractionClaims
    from lightfoot_pipeline.operations.batches import answer_batch_passages

    store = Store(str(tmp_path / "answers"))
    batch, receipt = land(store, sample_documents[:2], {})  # no recording: every passage is for the model
    with writing_batch(Batch(batch, "run-1", DAGSTER)):
        stored = store_batch_documents(store, batch, receipt, IndexSettings())
    claims = ExtractionClaims(store, "run-1")

    def broken():
        raise RuntimeError("no endpoint")

    lines: list[str] = []
    unusable = answer_batch_passages(store, batch, broken, lambda doc_id, recorded: True, claims, echo=lines.append)
    assert unusable.documents == 2 and unusable.passages == stored.passages > 0
    assert unusable.unusable == lines[0] == "the language model is not usable: no endpoint"
    assert unusable.answers.outcomes == [] and unusable.documents_asked == 0 and unusable.cost()["model_calls"] == 0
    left = answer_batch_passages(store, batch, broken, lambda doc_id, recorded: False, claims)
    assert left.unusable is None and left.answers.asked == 0, "passages left to replay are not asked"


def test_erasure_requests_are_settled_waited_for_or_given_a_run_by_what_their_runs_say(
        tmp_path, sample_documents, sample_records):
    from lightfoot_pipeline.ingest.receipts import ReceiptRuns
    from lightfoot_pipeline.operations.deletion_requests import triage_erasure_requests

    store = Store(str(tmp_path / "triage"))
    operations.ingest(store, sample_documents[:4], ReplayExtractor(sample_records), None, link=False)
    receipts = []
    for k in range(4):
        doc_id = sample_documents[k].doc_id
        request = DeletionRequest(doc_id, "a test", False, utc_now(), "test")
        Landing(store).request_deletions([request])
        receipt = Receipt.for_deletions({"test": k}, [request], f"request {k}")
        Receipts(store).record(receipt)
        receipts.append(receipt)
    runs = {receipts[0].receipt_id: ReceiptRuns(succeeded="run-a", started=True),
            receipts[1].receipt_id: ReceiptRuns(in_flight=["run-b"], started=True),
            receipts[2].receipt_id: ReceiptRuns(failed=["run-c", "run-d"], attempt=2, retry_at=1e12, started=True)}
    triage = triage_erasure_requests(store, lambda receipt: runs.get(receipt.receipt_id, ReceiptRuns()))
    assert [r.receipt_id for r in triage.settled] == [receipts[0].receipt_id]
    assert [r.receipt_id for r in triage.waiting] == [receipts[1].receipt_id]
    assert [r.receipt_id for r in triage.backing_off] == [receipts[2].receipt_id]
    ((needed, needed_runs, outstanding),) = triage.needed
    assert needed.receipt_id == receipts[3].receipt_id and needed_runs == ReceiptRuns()
    assert list(outstanding) == [sample_documents[3].doc_id]
    assert {r.receipt_id for r in Receipts(store).pending("erasure")} == {r.receipt_id for r in receipts[1:]}
    assert triage.news() == ["1 requests done", "1 requests whose runs failed repeatedly wait before their next "
                             "attempt"], "the waiting are named only when none needs a run"
    triage.needed.clear()
    assert triage.news()[-1] == "1 requests waiting for their runs"


def test_drops_are_settled_waited_for_or_given_a_run_and_landed_strays_get_a_receipt(
        tmp_path, sample_documents, sample_records):
    from lightfoot_pipeline.ingest.receipts import ReceiptRuns
    from lightfoot_pipeline.operations.batches import receipt_for_landed, triage_drops

    store = Store(str(tmp_path / "drops"))
    drops = [land(store, [d], sample_records, name=f"drop-{k}")[1] for k, d in enumerate(sample_documents[:4])]
    Landing(store).forget([sample_documents[3].doc_id])  # deleted since it was dropped
    runs = {drops[0].receipt_id: ReceiptRuns(succeeded="run-a", started=True),
            drops[1].receipt_id: ReceiptRuns(in_flight=["run-b"], started=True)}
    triage = triage_drops(store, lambda receipt: runs.get(receipt.receipt_id, ReceiptRuns()))
    assert {r.receipt_id for r in triage.settled} == {drops[0].receipt_id, drops[3].receipt_id}
    assert [r.receipt_id for r in triage.waiting] == [drops[1].receipt_id]
    assert [(r.receipt_id, attempt.attempt) for r, attempt in triage.needed] == [(drops[2].receipt_id, 0)]
    assert triage.pending_ids == {d.doc_id for d in sample_documents[1:4]}
    assert triage.news() == ["2 drops ingested", "1 drops waiting for their runs or, after repeated failures, for "
                             "their next attempt"]

    # The settled drop's document was never stored (no run here stored it): landed, and no drop holds it now.
    first = receipt_for_landed(store, "20260101T0000")
    assert first is not None and list(first.doc_ids) == [sample_documents[0].doc_id]
    Landing(store).put_documents([LandedDocument(sample_documents[5], None, utc_now(), "test")])
    stray = receipt_for_landed(store, "20260101T0030")
    assert stray is not None and list(stray.doc_ids) == [sample_documents[5].doc_id]
    assert receipt_for_landed(store, "20260101T0100") is None, "now held by a pending drop"


def test_a_retention_day_becomes_requests_under_one_receipt_and_outside_deletions_are_found(
        tmp_path, sample_documents, sample_records):
    import datetime as dt
    from dataclasses import replace

    from lightfoot_pipeline.ingest.retention import RetentionPolicy
    from lightfoot_pipeline.operations.deletion_requests import deletions_outside, request_retention_deletions

    today = dt.date(2026, 12, 6)
    store = Store(str(tmp_path / "retention"))
    due = sample_documents[0].doc_id
    documents = [replace(sample_documents[0], retention_until=today - dt.timedelta(days=1)), *sample_documents[1:3]]
    operations.ingest(store, documents, ReplayExtractor(sample_records), None, link=False)
    assert request_retention_deletions(store, RetentionPolicy(), today - dt.timedelta(days=5)) is None, "not due yet"
    receipt = request_retention_deletions(store, RetentionPolicy(), today)
    assert receipt is not None and list(receipt.doc_ids) == [due] and list(receipt.erase_ids) == [due]
    assert Receipts(store).pending("erasure") == [receipt]
    assert [(r.doc_id, r.erase, r.origin) for r in Landing(store).deletion_requests()] == [
        (due, True, "retention schedule")]

    seq = store.manifest().seq
    with writing_batch(Batch(new_batch_id("delete"), "run-of-the-command-line", CLI)):
        operations.delete(store, [sample_documents[1].doc_id], link=False)
    assert deletions_outside(store, seq, lambda run_id: False) == [sample_documents[1].doc_id]
    assert deletions_outside(store, seq, lambda run_id: run_id == "run-of-the-command-line") == [], \
        "a deletion by a run the orchestrator knows is that run's to record"
    assert deletions_outside(store, store.manifest().seq, lambda run_id: False) == []
