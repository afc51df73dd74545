"""Vacuum beside writers: deleted rows' files go at once; a file no version references yet (an
upload whose commit is still in flight) survives until it is older than the grace."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import PASSAGES


def data_files(store: Store, table: str) -> set[Path]:
    return {Path(uri.removeprefix("file://")) for uri in DeltaTable(store.table_uri(table)).file_uris()}


def test_vacuum_removes_deleted_rows_at_once_and_unreferenced_files_after_the_grace(
    store, sample_documents, sample_records, hashing_embedder
):
    documents = sample_documents[:12]
    operations.ingest(store, documents, ReplayExtractor(sample_records), hashing_embedder)
    before = data_files(store, PASSAGES.name)
    # An upload whose commit has not happened yet: a data file no version references.
    in_flight = next(iter(before)).with_name("part-00000-in-flight-c000.snappy.parquet")
    shutil.copyfile(next(iter(before)), in_flight)

    operations.delete(store, [documents[0].doc_id])
    after = data_files(store, PASSAGES.name)
    removed = before - after
    assert removed, "the deletion rewrote the passages of the deleted document's bucket"
    assert all(path.exists() for path in removed), "until vacuum, history keeps the old files"

    store.vacuum()
    assert not any(path.exists() for path in removed), "files holding deleted rows go at once"
    assert in_flight.exists(), "a fresh unreferenced file may be a commit in flight: it stays"
    assert set(store.read(PASSAGES.name).get_column("doc_id")) == {d.doc_id for d in documents[1:]}

    store.vacuum(orphan_grace_hours=0)
    assert not in_flight.exists()
    assert all(path.exists() for path in data_files(store, PASSAGES.name))


@pytest.mark.slow
def test_a_removed_file_that_checkpoints_no_longer_list_goes_once_older_than_the_grace(
    store, sample_documents, sample_records, hashing_embedder, monkeypatch
):
    """Checkpoints list removed files for log.REMOVED_FILES_LISTED_HOURS only; past that, vacuum's
    pass over unreferenced files takes them, because a removed file is as old as the window."""
    from lightfoot_pipeline.store import log

    documents = sample_documents[:12]
    operations.ingest(store, documents, ReplayExtractor(sample_records), hashing_embedder)
    listed = DeltaTable(store.table_uri(PASSAGES.name)).metadata().configuration["delta.deletedFileRetentionDuration"]
    assert listed == f"interval {log.REMOVED_FILES_LISTED_HOURS} hours"
    with pytest.raises(ValueError, match="removed files"):
        store.vacuum(orphan_grace_hours=log.REMOVED_FILES_LISTED_HOURS + 1)

    # A table whose checkpoints list no removed file at all, checkpointed after a deletion.
    scratch = Store(str(Path(store.uri).with_name("unlisted")))
    monkeypatch.setitem(log.TABLE_CONFIGURATION, "delta.deletedFileRetentionDuration", "interval 0 seconds")
    operations.ingest(scratch, documents, ReplayExtractor(sample_records), hashing_embedder)
    before = data_files(scratch, PASSAGES.name)
    operations.delete(scratch, [documents[0].doc_id])
    removed = before - data_files(scratch, PASSAGES.name)
    assert removed
    DeltaTable(scratch.table_uri(PASSAGES.name)).create_checkpoint()
    monkeypatch.undo()

    scratch.vacuum()
    assert all(path.exists() for path in removed), "unlisted and younger than the grace: left, as a window of 0 would"
    aged = time.time() - (log.ORPHAN_GRACE_HOURS + 1) * 3600  # what any file removed before the window is
    for path in removed:
        os.utime(path, (aged, aged))
    scratch.vacuum()
    assert not any(path.exists() for path in removed)
    assert set(scratch.read(PASSAGES.name).get_column("doc_id")) == {d.doc_id for d in documents[1:]}
