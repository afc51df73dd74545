"""Vacuum beside writers: deleted rows' files go at once; a file no version references yet (an
upload whose commit is still in flight) survives until it is older than the grace."""

from __future__ import annotations

import shutil
from pathlib import Path

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
