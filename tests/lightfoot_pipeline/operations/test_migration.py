"""A migration keeps what cannot be derived again: a synced store's file records (exclusions
included) and where each passage stands in its file."""

from __future__ import annotations

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.operations.sync import sync
from lightfoot_pipeline.settings import ChunkSettings
from lightfoot_pipeline.store.tables import DOCUMENTS, PASSAGE_SOURCES, SOURCE_FILES

FILES = {"kept.txt": "Harbor", "deleted.txt": "Quarry"}


@pytest.mark.slow
def test_a_migration_keeps_the_source_files_so_a_deleted_file_stays_out(store, tmp_path, hashing_embedder):
    folder = tmp_path / "src"
    folder.mkdir()
    for path, word in FILES.items():
        (folder / path).write_text(f"{word} is a place named in this short file about {word}.")
    extractor = ReplayExtractor({f"src:{p}": {"entities": [{"name": w, "type": "place", "description": None}],
                                              "facts": []} for p, w in FILES.items()})
    chunking = ChunkSettings(tokens=60, overlap=12)
    sync(store, str(folder), extractor, hashing_embedder, chunking=chunking)
    operations.delete(store, ["src:deleted.txt"], reason="asked")
    records = store.read(SOURCE_FILES.name).sort("doc_id")
    places = store.read(PASSAGE_SOURCES.name).sort("chunk_id")
    assert records.filter(records["doc_id"] == "src:deleted.txt").get_column("status").to_list() == ["excluded"]

    operations.migrate(store, hashing_embedder, n_buckets=4)
    assert store.read(SOURCE_FILES.name).sort("doc_id").drop("bucket").equals(records.drop("bucket"))
    assert store.read(PASSAGE_SOURCES.name).sort("chunk_id").drop("bucket").equals(places.drop("bucket"))
    again = sync(store, str(folder), extractor, hashing_embedder, chunking=chunking)
    assert [e["doc_id"] for e in again.excluded] == ["src:deleted.txt"] and again.new == [] and again.commits == []
    assert store.read(DOCUMENTS.name).get_column("doc_id").to_list() == ["src:kept.txt"]
