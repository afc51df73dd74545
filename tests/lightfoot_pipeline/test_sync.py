"""lightfoot sync: a folder of real files mirrored into the store, kept in sync, exactly."""

from __future__ import annotations

import os
import re

import polars as pl
import pytest

from lightfoot_pipeline import pipeline
from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.ingest.sources import SOURCE_FILES
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.settings import ChunkSettings
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    ALIASES, DOCUMENTS, FACT_SOURCES, FACTS, FORMS, MENTIONS, PASSAGE_SOURCES, PASSAGES,
)
from lightfoot_pipeline.sync import sync

CHUNKING = ChunkSettings(tokens=60, overlap=12)


def passage_text(request) -> str:
    inside = request.user_text.split("<passage>\n", 1)[1].rsplit("\n</passage>", 1)[0]
    return inside.partition("\n")[2]


def extraction_of(request, server) -> str:
    """Entities: the capitalised words of the passage; a fact between the first two."""
    names = sorted(set(re.findall(r"\b[A-Z][a-z]{3,}\b", passage_text(request))))[:6]
    facts = [[names[0], "appears with", names[1], ""]] if len(names) > 1 else []
    return server.minified({"entities": [{"name": n, "type": "concept", "description": ""} for n in names],
                            "facts": facts})


@pytest.fixture
def model(chat_server):
    chat_server.script(lambda request: chat_server.Reply(content=extraction_of(request, chat_server)))
    return chat_server


def run_sync(store, folder, model, hashing_embedder, **kwargs):
    settings = LLMSettings(base_url=model.base_url, model="test-model", backoff_s=0.01)
    extractor = build_openai_extractor(store, llm_settings=settings)
    return sync(store, str(folder), extractor, hashing_embedder, chunking=CHUNKING, **kwargs)


def para(word: str, n: int = 4) -> str:
    return " ".join(f"{word} sentence {i} links Harbor with {word}." for i in range(n))


def build_folder(folder, files) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "reports").mkdir(exist_ok=True)
    (folder / "reports" / "annual.pdf").write_bytes(files.pdf([para("Orchard"), para("Quarry")], title="Annual"))
    (folder / "manual.docx").write_bytes(files.docx(
        [(1, "Install", [para("Zorblax")]), (2, "Linux", [para("Penguin")]), (1, "Usage", [para("Widget")])],
        title="Manual"))
    (folder / "site.html").write_bytes(files.html("Site", [("About", [para("Lantern")]), ("Team", [para("Falcon")])]))
    (folder / "notes.md").write_bytes(files.markdown("Notes", [
        ("First", [para("Meadow", 6), para("Canyon", 6)]), ("Second", [para("Glacier", 6)]),
        ("Third", [para("Tundra", 6)])]))
    (folder / "readme.txt").write_text(para("Pebble") + "\n\n" + para("Summit"))


def rows_of(store, spec, doc_id):
    return store.read(spec.name).filter(pl.col("doc_id") == doc_id)


def test_sync_edit_remove_add_corrupt_then_resync_equals_a_fresh_sync(tmp_path, model, hashing_embedder, document_files):
    folder = tmp_path / "docs"
    build_folder(folder, document_files)
    store = Store(str(tmp_path / "store"))

    first = run_sync(store, folder, model, hashing_embedder)
    assert sorted(first.new) == ["manual.docx", "notes.md", "readme.txt", "reports/annual.pdf", "site.html"]
    assert first.failed == [] and first.model_calls == first.passages == model.count
    passages = store.read(PASSAGES.name)
    assert passages.height == first.passages
    assert not passages.filter(pl.col("text").str.contains("SITE-CHROME")).height
    sources = store.read(PASSAGE_SOURCES.name)
    assert set(rows_of(store, PASSAGE_SOURCES, "reports/annual.pdf").get_column("page").to_list()) == {1, 2}
    assert "Install › Linux" in rows_of(store, PASSAGE_SOURCES, "manual.docx").get_column("section").to_list()
    assert sources.height == passages.height
    assert store.read(DOCUMENTS.name).filter(pl.col("doc_id") == "manual.docx").get_column("title").item() == "Manual"
    assert "Zorblax" in store.read(ALIASES.name).get_column("surface").to_list()
    notes_before = set(rows_of(store, PASSAGES, "notes.md").get_column("chunk_id").to_list())

    # Edit one section of one file, remove another, add a corrupt one, touch one without a change.
    notes = folder / "notes.md"
    notes.write_bytes(notes.read_bytes().replace(b"Glacier sentence 3 links", b"Glacier sentence 3 now joins"))
    (folder / "manual.docx").unlink()
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >>\nendobj\ntrailer")
    annual = folder / "reports" / "annual.pdf"
    os.utime(annual, ns=(annual.stat().st_atime_ns, annual.stat().st_mtime_ns + 5_000_000_000))
    model.reset()

    second = run_sync(store, folder, model, hashing_embedder, erase=True)
    notes_after = rows_of(store, PASSAGES, "notes.md")
    new_chunks = set(notes_after.get_column("chunk_id").to_list()) - notes_before
    assert new_chunks, "the edit changed the section's passages"
    sections = rows_of(store, PASSAGE_SOURCES, "notes.md").filter(pl.col("chunk_id").is_in(list(new_chunks)))
    assert set(sections.get_column("section").to_list()) == {"Notes › Second"}
    assert second.model_calls == model.count == len(new_chunks)
    assert all("Glacier" in passage_text(r) for r in model.requests)
    assert second.changed == ["notes.md"] and second.removed == ["manual.docx"] and second.new == ["broken.pdf"]
    assert second.unchanged == 3  # the touched PDF among them
    assert [f["doc_id"] for f in second.failed] == ["broken.pdf"] and "corrupt PDF" in second.failed[0]["reason"]
    recorded = store.read(SOURCE_FILES.name).filter(pl.col("doc_id") == "broken.pdf").row(0, named=True)
    assert recorded["status"] == "failed" and recorded["reason"].startswith("corrupt PDF")
    for spec in (DOCUMENTS, PASSAGES, PASSAGE_SOURCES, FORMS, FACT_SOURCES):
        assert rows_of(store, spec, "manual.docx").height == 0, spec.name
    assert store.read(MENTIONS.name).filter(pl.col("doc_id") == "manual.docx").height == 0
    assert not {"zorblax", "penguin", "widget"} & set(store.read(ALIASES.name).get_column("name").to_list())
    assert not store.read(FACTS.name).filter(pl.col("subject").is_in(["zorblax", "penguin", "widget"])).height
    assert second.erase is not None and second.erase["documents"] == ["manual.docx"]

    fresh = Store(str(tmp_path / "fresh"))
    again = run_sync(fresh, folder, model, hashing_embedder)
    assert [f["doc_id"] for f in again.failed] == ["broken.pdf"]
    assert pipeline.fingerprint(fresh).digest == pipeline.fingerprint(store).digest

    model.reset()
    third = run_sync(store, folder, model, hashing_embedder)
    assert (third.new, third.changed, third.removed, third.unchanged, model.count) == ([], [], [], 5, 0)
    assert third.commits == [] and [f["doc_id"] for f in third.failed] == ["broken.pdf"]
