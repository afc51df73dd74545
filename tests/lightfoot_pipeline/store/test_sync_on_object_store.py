"""lightfoot sync from an object-store prefix into a store on the same object store."""

from __future__ import annotations

import polars as pl

from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.ingest.sources import SOURCE_FILES
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.operations.sync import sync
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENTS, PASSAGE_SOURCES


def test_a_prefix_is_synced_like_a_folder(object_store, chat_server, hashing_embedder, document_files):
    client, bucket = object_store.client, object_store.bucket
    client.put_object(Bucket=bucket, Key="drive/guides/start.md",
                      Body=document_files.markdown("Start", [("Setup", ["Plug it in Oslo."])]))
    client.put_object(Bucket=bucket, Key="drive/scan.pdf", Body=document_files.pdf(["One.", "Two in Bergen."]))
    client.put_object(Bucket=bucket, Key="drive/.draft.md", Body=b"# not yet")
    store = Store(object_store.uri("lightfoot"))
    settings = LLMSettings(base_url=chat_server.base_url, model="test-model", backoff_s=0.01)

    def run():
        return sync(store, object_store.uri("drive/"), build_openai_extractor(store, llm_settings=settings),
                    hashing_embedder)

    report = run()
    assert report.source == object_store.uri("drive")
    assert report.new == ["drive:guides/start.md", "drive:scan.pdf"] and report.failed == []
    pages = store.read(PASSAGE_SOURCES.name).filter(pl.col("doc_id") == "drive:scan.pdf").get_column("page").to_list()
    assert sorted(pages) == [1, 2]
    documents = store.read(DOCUMENTS.name).sort("doc_id")
    assert documents.get_column("source").to_list() == [object_store.uri("drive/guides/start.md"),
                                                        object_store.uri("drive/scan.pdf")]

    client.delete_object(Bucket=bucket, Key="drive/scan.pdf")
    chat_server.reset()
    report = run()
    assert (report.removed, report.unchanged, chat_server.count) == (["drive:scan.pdf"], 1, 0)
    assert store.read(DOCUMENTS.name).get_column("doc_id").to_list() == ["drive:guides/start.md"]
    assert store.read(SOURCE_FILES.name).get_column("doc_id").to_list() == ["drive:guides/start.md"]
