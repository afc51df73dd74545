"""What a transaction pays to open the store's tables: recovery opens none that stand at their
logged version, and a commit that writes many buckets of a table leaves its Delta log
checkpointed, so that the next opening reads one Parquet file instead of the commit's JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.store import transaction as transaction_module
from lightfoot_pipeline.store.recovery import recover
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import PASSAGES


def checkpoints(store: Store, table: str) -> list[str]:
    log = Path(store.table_uri(table)) / "_delta_log"
    return sorted(p.name for p in log.glob("*.checkpoint.parquet"))


def test_recovery_opens_no_table_at_its_logged_version_and_still_undoes_one_ahead(
    tmp_path, sample_documents, sample_records, hashing_embedder, monkeypatch
):
    store = Store(str(tmp_path / "store"), n_buckets=4)
    operations.ingest(store, sample_documents[:6], ReplayExtractor(sample_records), hashing_embedder)
    manifest = store.manifest()

    opened: list[str] = []
    real_open = Store.open_table
    monkeypatch.setattr(Store, "open_table", lambda self, uri, version=None: opened.append(uri) or
                        real_open(self, uri, version))
    fresh = Store(store.uri)
    _, heads = recover(fresh)
    assert heads == manifest.versions
    assert [uri for uri in opened if "/tables/" in uri] == [], "every table stands at its logged version"

    # A table ahead of the log (a commit that died before its log row) is opened and restored.
    table = real_open(store, store.table_uri(PASSAGES.name))
    table.delete()
    assert table.version() == manifest.versions[PASSAGES.name] + 1
    opened.clear()
    _, heads = recover(Store(store.uri))
    assert [uri.rsplit("/", 1)[-1] for uri in opened if "/tables/" in uri] == [PASSAGES.name]
    assert heads[PASSAGES.name] == manifest.versions[PASSAGES.name] + 2, "restored by a commit of its own"
    assert real_open(store, store.table_uri(PASSAGES.name)).to_pyarrow_dataset().count_rows() == 6


@pytest.mark.slow
def test_a_commit_writing_many_buckets_checkpoints_the_tables_it_wrote(
    tmp_path, sample_documents, sample_records, hashing_embedder, monkeypatch
):
    documents = sample_documents[:12]
    few = Store(str(tmp_path / "few"), n_buckets=8)
    operations.ingest(few, documents, ReplayExtractor(sample_records), hashing_embedder)
    assert checkpoints(few, PASSAGES.name) == [], "eight buckets: below the bound, the interval alone applies"

    monkeypatch.setattr(transaction_module, "CHECKPOINT_AFTER_BUCKETS", 4)
    many = Store(str(tmp_path / "many"), n_buckets=8)
    operations.ingest(many, documents, ReplayExtractor(sample_records), hashing_embedder)
    version = many.manifest().versions[PASSAGES.name]
    assert checkpoints(many, PASSAGES.name) == [f"{version:020d}.checkpoint.parquet"]
    assert many.read(PASSAGES.name).height == few.read(PASSAGES.name).height == len(documents)

    # A one-document deletion touches one bucket of passages: no checkpoint of its own.
    operations.delete(many, [documents[0].doc_id])
    assert checkpoints(many, PASSAGES.name) == [f"{version:020d}.checkpoint.parquet"]
    assert Store(many.uri).read(PASSAGES.name).height == len(documents) - 1


@pytest.mark.slow
def test_files_per_bucket_counts_the_files_the_log_lists_for_each_bucket(
    tmp_path, sample_documents, sample_records, hashing_embedder
):
    store = Store(str(tmp_path / "store"), n_buckets=4)
    for start in (0, 4, 8):  # each batch appends a file to the buckets its documents land in
        operations.ingest(store, sample_documents[start:start + 4], ReplayExtractor(sample_records), hashing_embedder)
    manifest = store.manifest()
    counted = store.files_per_bucket(PASSAGES.name, manifest)
    assert counted == {bucket: len(files) for bucket, files in store.bucket_files(PASSAGES.name, manifest).items()}
    assert sum(counted.values()) > len(counted), "some bucket holds more than one file"
    assert store.files_per_bucket("passage_sources", manifest) == {}, "a table never written has no files"


def test_a_table_created_with_earlier_properties_adopts_this_versions_on_its_next_write(
    tmp_path, sample_documents, sample_records, hashing_embedder, monkeypatch
):
    from deltalake import DeltaTable

    from lightfoot_pipeline.store import log

    store = Store(str(tmp_path / "store"), n_buckets=4)
    monkeypatch.delitem(log.TABLE_CONFIGURATION, "delta.deletedFileRetentionDuration")  # as an earlier version made them
    operations.ingest(store, sample_documents[:6], ReplayExtractor(sample_records), hashing_embedder)
    monkeypatch.undo()

    def retention(table: str) -> str | None:
        return DeltaTable(store.table_uri(table)).metadata().configuration.get("delta.deletedFileRetentionDuration")

    assert retention(PASSAGES.name) is None
    operations.delete(store, [sample_documents[0].doc_id])  # writes passages, among others
    assert retention(PASSAGES.name) == log.TABLE_CONFIGURATION["delta.deletedFileRetentionDuration"]
    manifest = store.manifest()
    assert manifest.versions[PASSAGES.name] == DeltaTable(store.table_uri(PASSAGES.name)).version()
    assert Store(store.uri).read(PASSAGES.name).height == 5
