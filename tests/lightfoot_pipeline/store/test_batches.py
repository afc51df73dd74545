"""Ingestion batches: what each store commit records of its batch, and the batch log of documents."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.store.batches import (
    BATCH_ID,
    DAGSTER,
    Batch,
    batch_log,
    batches_of_documents,
    check_batch_id,
    current_batch,
    documents_of_batch,
    holding_batches,
    new_batch_id,
    writing_batch,
)
from lightfoot_pipeline.store.store import Store

DOCUMENTS = [Document(doc_id=f"d{i}", title=f"T{i}", text=f"Alpha {i} met Beta {i}.") for i in range(3)]
RECORDS = {d.doc_id: {"doc_id": d.doc_id, "entities": [], "facts": []} for d in DOCUMENTS}


def ingest(store: Store, documents, embedder) -> None:
    operations.ingest(store, documents, ReplayExtractor(RECORDS), embedder)


def details(store: Store) -> list[dict]:
    return [json.loads(d) for d in store.history().get_column("details").to_list()]


def test_a_commit_records_its_batch_inside_writing_batch_and_nothing_outside(tmp_path, hashing_embedder):
    store = Store(str(tmp_path / "store"))
    ingest(store, DOCUMENTS[:1], hashing_embedder)  # outside any batch
    batch = Batch("drop-3f1c0a", "run-7", DAGSTER)
    with writing_batch(batch) as inside:
        assert inside is batch and current_batch() is batch
        ingest(store, DOCUMENTS[1:2], hashing_embedder)
        operations.delete(store, ["d0"])
    assert current_batch() is None
    ingest(store, DOCUMENTS[2:], hashing_embedder)  # outside again
    first, second, third, fourth = details(store)
    assert "batch" not in first and "run_id" not in first and "batch" not in fourth
    for row in (second, third):
        assert (row["batch"], row["run_id"], row["by"]) == ("drop-3f1c0a", "run-7", "dagster")
    assert batch.commits == [2, 3], "the commits made in the batch, counted as they land"
    # Only the batch's own document changes are logged: nothing of the two ingests outside it.
    log = batch_log(store)
    assert sorted(zip(log.get_column("doc_id"), log.get_column("action"), log.get_column("seq"), strict=True)) == \
        [("d0", "deleted", 3), ("d1", "added", 2)]
    assert set(log.get_column("batch")) == {"drop-3f1c0a"} and set(log.get_column("run_id")) == {"run-7"}


def test_the_batch_log_says_added_replaced_unchanged_and_deleted(tmp_path, hashing_embedder):
    store = Store(str(tmp_path / "store"))
    first, second, third = (Batch(f"drop-{n}{n}{n}", f"run-{n}", DAGSTER) for n in (1, 2, 3))
    with writing_batch(first):
        ingest(store, DOCUMENTS, hashing_embedder)
    revised = dataclasses.replace(DOCUMENTS[0], text=DOCUMENTS[0].text + " Revised.")
    with writing_batch(second):
        ingest(store, [revised, DOCUMENTS[1]], hashing_embedder)
    with writing_batch(third):
        operations.delete(store, ["d2", "d9"])  # d9 was never stored: nothing to log
    assert documents_of_batch(store, "drop-111").get_column("action").to_list() == ["added"] * 3
    assert dict(documents_of_batch(store, "drop-222").select("doc_id", "action").iter_rows()) == \
        {"d0": "replaced", "d1": "unchanged"}
    assert documents_of_batch(store, "drop-333").select("doc_id", "action").rows() == [("d2", "deleted")]
    rows = batches_of_documents(store, ["d0"])
    assert rows.select("batch", "action", "seq").rows() == [("drop-111", "added", 1), ("drop-222", "replaced", 2)]
    assert rows.get_column("at").dtype.time_zone == "UTC"
    # The batch holding a document is the last that added or replaced it; an unchanged drop keeps it.
    assert holding_batches(store, ["d0", "d1", "d2", "d9"]) == {"d0": "drop-222", "d1": "drop-111",
                                                                 "d2": "drop-111"}
    assert batches_of_documents(store, []).height == 0


def test_batch_ids_say_their_kind_and_time_and_nothing_else():
    batch_id = new_batch_id("cli-ingest", now=dt.datetime(2026, 12, 1, 17, 5, 1, tzinfo=dt.UTC))
    assert batch_id.startswith("cli-ingest-20261201t170501-") and BATCH_ID.match(batch_id)
    assert new_batch_id("cli-ingest") != new_batch_id("cli-ingest")
    assert check_batch_id("sync-0a1b") == "sync-0a1b"
    for wrong in ("", "Drop-1", "drop 1", "d", "x" * 65, "drop/1"):
        with pytest.raises(ValueError, match="not a batch id"):
            check_batch_id(wrong)
    with pytest.raises(ValueError), writing_batch(Batch("NOT OK", "run")):
        pass
