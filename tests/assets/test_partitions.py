"""The partitions: batch keys are opaque and content-free, and name the receipt they come from."""

from __future__ import annotations

import pytest

from assets.partitions import receipt_batch, receipt_of, sync_batch
from lightfoot_pipeline.ingest.landing import DeletionRequest, utc_now
from lightfoot_pipeline.ingest.receipts import ERASURE, INGESTION, Receipt
from lightfoot_pipeline.store.batches import check_batch_id, new_batch_id


def test_a_drop_and_an_erasure_request_name_their_receipt_and_nothing_of_their_content():
    drop = Receipt.for_documents({"name": "Grellstone memo.jsonl"}, ["memo-canary", "doc-2"], "inbox")
    batch = receipt_batch(drop)
    assert batch == f"drop-{drop.receipt_id}" and receipt_of(batch) == (INGESTION, drop.receipt_id)
    assert "memo" not in batch and "canary" not in batch.lower()
    request = Receipt.for_deletions({"name": "erase.jsonl"}, [DeletionRequest("memo-canary", "asked", True, utc_now(),
                                                                               "inbox")], "inbox")
    erase = receipt_batch(request)
    assert erase.startswith("erase-") and receipt_of(erase) == (ERASURE, request.receipt_id)
    assert receipt_batch(request, "retention").startswith("retention-")


def test_a_sync_batch_is_one_per_set_of_changes_and_hour_and_names_no_receipt():
    first = sync_batch("3 new, 1 removed: 9f0c", "20261206T07")
    assert first == sync_batch("3 new, 1 removed: 9f0c", "20261206T07") and first.startswith("sync-")
    assert first != sync_batch("3 new, 1 removed: 9f0c", "20261206T08") != sync_batch("other", "20261206T07")
    assert receipt_of(first) is None and check_batch_id(first) == first


@pytest.mark.parametrize("bad", ["", "Drop-1", "drop 1", "x" * 65, "doc:memo.txt", "-drop"])
def test_batch_ids_are_lower_case_words_digits_and_dashes(bad):
    with pytest.raises(ValueError):
        check_batch_id(bad)
    assert check_batch_id(new_batch_id("cli-ingest")).startswith("cli-ingest-")
