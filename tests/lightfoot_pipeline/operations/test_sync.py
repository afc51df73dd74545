"""lightfoot sync: a folder of real files mirrored into the store, kept in sync, exactly."""

from __future__ import annotations

import os
import re

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.ingest.sources import SOURCE_FILES
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.operations.sync import sync
from lightfoot_pipeline.settings import ChunkSettings
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    ALIASES,
    DOCUMENTS,
    FACT_SOURCES,
    FACTS,
    FORMS,
    MENTIONS,
    PASSAGE_SOURCES,
    PASSAGES,
)

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


@pytest.mark.slow
def test_sync_edit_remove_add_corrupt_then_resync_equals_a_fresh_sync(tmp_path, model, hashing_embedder, document_files):
    folder = tmp_path / "docs"
    build_folder(folder, document_files)
    store = Store(str(tmp_path / "store"))

    first = run_sync(store, folder, model, hashing_embedder)
    assert sorted(first.new) == ["docs:manual.docx", "docs:notes.md", "docs:readme.txt", "docs:reports/annual.pdf", "docs:site.html"]
    assert first.failed == [] and first.model_calls == first.passages == model.count
    passages = store.read(PASSAGES.name)
    assert passages.height == first.passages
    assert not passages.filter(pl.col("text").str.contains("SITE-CHROME")).height
    sources = store.read(PASSAGE_SOURCES.name)
    assert set(rows_of(store, PASSAGE_SOURCES, "docs:reports/annual.pdf").get_column("page").to_list()) == {1, 2}
    assert "Install › Linux" in rows_of(store, PASSAGE_SOURCES, "docs:manual.docx").get_column("section").to_list()
    assert sources.height == passages.height
    assert store.read(DOCUMENTS.name).filter(pl.col("doc_id") == "docs:manual.docx").get_column("title").item() == "Manual"
    assert "Zorblax" in store.read(ALIASES.name).get_column("surface").to_list()
    notes_before = set(rows_of(store, PASSAGES, "docs:notes.md").get_column("chunk_id").to_list())

    # Edit one section of one file, remove another, add a corrupt one, touch one without a change.
    notes = folder / "notes.md"
    notes.write_bytes(notes.read_bytes().replace(b"Glacier sentence 3 links", b"Glacier sentence 3 now joins"))
    (folder / "manual.docx").unlink()
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >>\nendobj\ntrailer")
    annual = folder / "reports" / "annual.pdf"
    os.utime(annual, ns=(annual.stat().st_atime_ns, annual.stat().st_mtime_ns + 5_000_000_000))
    model.reset()

    second = run_sync(store, folder, model, hashing_embedder, erase=True)
    notes_after = rows_of(store, PASSAGES, "docs:notes.md")
    new_chunks = set(notes_after.get_column("chunk_id").to_list()) - notes_before
    assert new_chunks, "the edit changed the section's passages"
    sections = rows_of(store, PASSAGE_SOURCES, "docs:notes.md").filter(pl.col("chunk_id").is_in(list(new_chunks)))
    assert set(sections.get_column("section").to_list()) == {"Notes › Second"}
    assert second.model_calls == model.count == len(new_chunks)
    assert all("Glacier" in passage_text(r) for r in model.requests)
    assert second.changed == ["docs:notes.md"] and second.removed == ["docs:manual.docx"] and second.new == ["docs:broken.pdf"]
    assert second.unchanged == 3  # the touched PDF among them
    assert [f["doc_id"] for f in second.failed] == ["docs:broken.pdf"] and "corrupt PDF" in second.failed[0]["reason"]
    recorded = store.read(SOURCE_FILES.name).filter(pl.col("doc_id") == "docs:broken.pdf").row(0, named=True)
    assert recorded["status"] == "failed" and recorded["reason"].startswith("corrupt PDF")
    for spec in (DOCUMENTS, PASSAGES, PASSAGE_SOURCES, FORMS, FACT_SOURCES):
        assert rows_of(store, spec, "docs:manual.docx").height == 0, spec.name
    assert store.read(MENTIONS.name).filter(pl.col("doc_id") == "docs:manual.docx").height == 0
    assert not {"zorblax", "penguin", "widget"} & set(store.read(ALIASES.name).get_column("name").to_list())
    assert not store.read(FACTS.name).filter(pl.col("subject").is_in(["zorblax", "penguin", "widget"])).height
    assert second.erase is not None and second.erase["documents"] == ["docs:manual.docx"]

    fresh = Store(str(tmp_path / "fresh"))
    again = run_sync(fresh, folder, model, hashing_embedder)
    assert [f["doc_id"] for f in again.failed] == ["docs:broken.pdf"]
    assert fingerprint(fresh).digest == fingerprint(store).digest
    rebuilt = Store(str(tmp_path / "rebuilt"))  # what Dagster's matches_fresh_rebuild check compares with
    operations.rebuild(store, rebuilt, hashing_embedder)
    assert fingerprint(rebuilt).digest == fingerprint(store).digest

    model.reset()
    third = run_sync(store, folder, model, hashing_embedder)
    assert (third.new, third.changed, third.removed, third.unchanged, model.count) == ([], [], [], 5, 0)
    assert third.commits == [] and [f["doc_id"] for f in third.failed] == ["docs:broken.pdf"]


@pytest.mark.slow
def test_bad_files_are_recorded_with_their_reasons_and_affect_nothing_else(tmp_path, model, hashing_embedder,
                                                                           document_files):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_bytes(document_files.markdown("Good", [("Part", [para("Meadow")])]))
    (folder / "empty.txt").write_bytes(b"")
    (folder / "junk.txt").write_bytes(os.urandom(4096))
    (folder / "locked.pdf").write_bytes(document_files.pdf(["Secret plans."], password="pw"))
    (folder / "cut.docx").write_bytes(document_files.docx([(1, "H", [para("Zorblax", 40)])])[:3000])
    with open(folder / "huge.txt", "wb") as handle:  # 200 MB on paper, sparse on disk
        handle.truncate(200 * 1024 * 1024)
    (folder / "long.md").write_bytes(document_files.markdown("Long", [(f"S{i}", [para("Canyon")]) for i in range(30)]))
    (folder / "dated.txt").write_text(para("Pebble"))
    (folder / "dated.txt.lightfoot.json").write_text('{"retention_until": "2030-01-31", "title": "Dated"}')
    (folder / "badside.txt").write_text(para("Summit"))
    (folder / "badside.txt.lightfoot.json").write_text('{"retention_until": "soon"}')
    (folder / 'quo"te.txt').write_text(para("Quarry"))
    (folder / ".hidden.txt").write_text("not a document")
    store = Store(str(tmp_path / "store"))
    settings = LLMSettings(base_url=model.base_url, model="test-model", backoff_s=0.01)
    report = sync(store, str(folder), build_openai_extractor(store, llm_settings=settings), hashing_embedder,
                  chunking=ChunkSettings(tokens=60, overlap=12, max_passages=20))

    reasons = {f["doc_id"]: f["reason"] for f in report.failed}
    assert sorted(reasons) == ["docs:badside.txt", "docs:cut.docx", "docs:empty.txt", "docs:huge.txt",
                               "docs:junk.txt", "docs:locked.pdf", "docs:long.md"]
    assert reasons["docs:empty.txt"] == "empty file"
    assert reasons["docs:junk.txt"].startswith("binary content")
    assert reasons["docs:locked.pdf"].startswith("encrypted PDF")
    assert reasons["docs:cut.docx"].startswith("truncated or corrupt Word document")
    assert reasons["docs:huge.txt"] == "209,715,200 bytes, over the limit of 67,108,864 per file"
    assert reasons["docs:long.md"] == "more than 20 passages, over the limit per document"
    assert "retention_until" in reasons["docs:badside.txt"]
    assert report.files == 10 and report.read_failed == 7
    live = store.read(DOCUMENTS.name)
    assert sorted(live.get_column("doc_id").to_list()) == ["docs:dated.txt", "docs:good.md", "docs:quo%22te.txt"]
    dated = live.filter(pl.col("doc_id") == "docs:dated.txt").row(0, named=True)
    assert (dated["title"], str(dated["retention_until"])) == ("Dated", "2030-01-31")
    assert report.model_calls == store.read(PASSAGES.name).height
    stored = store.read(SOURCE_FILES.name)
    assert dict(stored.filter(pl.col("status") == "failed").select("doc_id", "reason").iter_rows()) == reasons

    # A file that turns corrupt loses its old version; one that is fixed is indexed.
    (folder / "good.md").write_bytes(b"\x00\x01\x02 binary now")
    (folder / "empty.txt").write_text(para("Lantern"))
    model.reset()
    report = sync(store, str(folder), build_openai_extractor(store, llm_settings=settings), hashing_embedder,
                  chunking=ChunkSettings(tokens=60, overlap=12, max_passages=20))
    assert sorted(report.changed) == ["docs:empty.txt", "docs:good.md"]
    assert sorted(store.read(DOCUMENTS.name).get_column("doc_id").to_list()) == ["docs:dated.txt", "docs:empty.txt",
                                                                                  "docs:quo%22te.txt"]
    assert rows_of(store, PASSAGES, "docs:good.md").height == 0
    assert model.count == rows_of(store, PASSAGES, "docs:empty.txt").height


def test_other_chunking_reads_every_file_again_and_reuses_cached_answers(tmp_path, model, hashing_embedder,
                                                                        document_files):
    folder = tmp_path / "docs"
    build_folder(folder, document_files)
    store = Store(str(tmp_path / "store"))
    run_sync(store, folder, model, hashing_embedder)
    model.reset()
    settings = LLMSettings(base_url=model.base_url, model="test-model", backoff_s=0.01)
    report = sync(store, str(folder), build_openai_extractor(store, llm_settings=settings), hashing_embedder,
                  chunking=ChunkSettings(tokens=60, overlap=12, max_passages=500))
    assert sorted(report.changed) == ["docs:manual.docx", "docs:notes.md", "docs:readme.txt", "docs:reports/annual.pdf", "docs:site.html"]
    assert report.model_calls == 0 and report.already_extracted == report.passages


def test_a_source_that_is_not_there_is_refused(tmp_path, model, hashing_embedder):
    from lightfoot_pipeline.errors import LightfootError

    with pytest.raises(LightfootError, match="not a folder or prefix that exists"):
        run_sync(Store(str(tmp_path / "store")), tmp_path / "missing", model, hashing_embedder)


@pytest.mark.slow
def test_retrieval_and_answers_cite_the_file_and_its_page_or_section(tmp_path, model, hashing_embedder,
                                                                    document_files, capsys):
    from lightfoot_pipeline import cli
    from lightfoot_pipeline.retrieval.answer import render_prompt
    from lightfoot_pipeline.retrieval.retrieve import Retriever
    from lightfoot_pipeline.snapshot.export import export_snapshot
    from lightfoot_pipeline.snapshot.format import load_snapshot

    folder = tmp_path / "docs"
    build_folder(folder, document_files)
    store = Store(str(tmp_path / "store"))
    run_sync(store, folder, model, hashing_embedder)
    export_snapshot(store, hashing_embedder)
    snapshot = load_snapshot(store)
    locations = set(snapshot.passages.get_column("location").to_list())
    assert {"docs:reports/annual.pdf, page 1", "docs:reports/annual.pdf, page 2", "docs:manual.docx, Install › Linux",
            "docs:site.html, Site › Team", "docs:readme.txt"} <= locations

    hits = Retriever(snapshot, hashing_embedder).retrieve("Where do Quarry sentences link Harbor?", rerank=False).passages
    by_chunk = dict(snapshot.passages.select("chunk_id", "location").iter_rows())
    assert hits and all(h.location == by_chunk[h.chunk_id] for h in hits)
    prompt = render_prompt("Where?", [], hits[:3])
    assert all(f"(source: {h.location})" in prompt for h in hits[:3])

    argv = ["query", "Quarry Harbor", "--store", store.uri, "--no-answer", "--no-rerank", "--embedder", "hashing"]
    assert cli.main(argv) == 0
    shown = [line for line in capsys.readouterr().out.splitlines() if line.strip()[:3].strip(". ").isdigit()]
    assert shown and all(line.split("[", 1)[1].split("]", 1)[0] in locations for line in shown)

    from lightfoot_pipeline.provenance.documents import explain_document
    from lightfoot_pipeline.retrieval.explain import explain_query

    explained = explain_document(store, "docs:reports/annual.pdf", preview=False).passages
    assert {p["location"] for p in explained} == {"docs:reports/annual.pdf, page 1", "docs:reports/annual.pdf, page 2"}
    why = explain_query(Retriever(snapshot, hashing_embedder), "Quarry Harbor", rerank=False)["passages"]
    assert why and all(p["location"] == by_chunk[p["chunk_id"]] for p in why)


@pytest.mark.slow
def test_a_removed_file_synced_with_erase_leaves_no_copy_of_its_text(tmp_path, model, hashing_embedder,
                                                                     document_files):
    from lightfoot_pipeline.snapshot.export import export_snapshot

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "keep.md").write_bytes(document_files.markdown("Keep", [("Part", [para("Meadow")])]))
    (folder / "secret.docx").write_bytes(document_files.docx(
        # The marker has letters no hex digest holds: the fingerprint cache's digests and file names are hex.
        [(1, "Canaryheading 7q3z", ["Canarytext 7q3z lives with Harbor in this paragraph."])], title="Secret"))
    store = Store(str(tmp_path / "store"))

    def holding() -> list[str]:
        return [str(p) for p in (tmp_path / "store").rglob("*") if p.is_file()
                and any(needle in p.read_bytes() for needle in (b"7q3z", b"Canarytext", b"canarytext"))]

    run_sync(store, folder, model, hashing_embedder)
    export_snapshot(store, hashing_embedder)
    assert any("snapshots" in p for p in holding())  # the search finds the text where it is
    (folder / "secret.docx").unlink()
    report = run_sync(store, folder, model, hashing_embedder, erase=True)
    assert report.removed == ["docs:secret.docx"] and report.erase["documents"] == ["docs:secret.docx"]
    assert holding() == []


def apply_graph(store, embedder) -> int:
    """The graph stage as Dagster's graph asset runs it: what the queue holds, in one commit."""
    from lightfoot_pipeline.index.reconcile import reconcile_graph
    from lightfoot_pipeline.settings import IndexSettings
    from lightfoot_pipeline.store.vectors import name_vector_cache

    settings = IndexSettings()
    with store.transaction() as tx:
        operations.check_config(tx, settings, embedder)
        reconcile_graph(tx, settings, name_vector_cache(store, embedder))
        return tx.commit("graph", {}).seq


@pytest.mark.slow
def test_a_sync_that_leaves_the_graph_to_the_graph_stage_ends_where_a_linking_sync_does(tmp_path, model,
                                                                                        hashing_embedder):
    from lightfoot_pipeline.operations.erase import pending_erasures
    from lightfoot_pipeline.store.tables import GRAPH_QUEUE, TOMBSTONES

    folder = tmp_path / "docs"
    folder.mkdir()
    for word in ("Orchard", "Quarry", "Lantern", "Falcon"):
        (folder / f"{word.lower()}.txt").write_text(para(word) + "\n\n" + para("Meadow", 2))
    linked, deferred = Store(str(tmp_path / "linked")), Store(str(tmp_path / "deferred"))

    run_sync(linked, folder, model, hashing_embedder, batch_files=2)
    first = run_sync(deferred, folder, model, None, batch_files=2, link=False)  # no embedder needed
    assert first.new and len(first.commits) == 2
    assert deferred.read(ALIASES.name).height == 0 and deferred.read(GRAPH_QUEUE.name).height > 0
    apply_graph(deferred, hashing_embedder)
    assert deferred.read(GRAPH_QUEUE.name).height == 0
    assert fingerprint(deferred).digest == fingerprint(linked).digest

    # A changed file, a removed one (with an erasure) and a new one: the deletion's graph change waits too.
    (folder / "orchard.txt").write_text(para("Orchard") + "\n\n" + para("Summit", 2))
    (folder / "quarry.txt").unlink()
    (folder / "pebble.txt").write_text(para("Pebble"))
    run_sync(linked, folder, model, hashing_embedder, erase=True)
    second = run_sync(deferred, folder, model, None, erase=True, link=False)
    assert second.removed == ["docs:quarry.txt"] and second.erase is None
    assert "quarry" in deferred.read(ALIASES.name).get_column("name").to_list()  # until the graph stage runs
    assert pending_erasures(deferred) == ["docs:quarry.txt"]  # an erasure waits for the graph stage
    apply_graph(deferred, hashing_embedder)
    assert "quarry" not in deferred.read(ALIASES.name).get_column("name").to_list()
    assert fingerprint(deferred).digest == fingerprint(linked).digest
    operations.erase_history(deferred, [])
    assert pending_erasures(deferred) == [] and deferred.read(TOMBSTONES.name).get_column("erased_at").is_not_null().all()


def test_a_sync_report_counts_files_by_kind_and_failures_by_kind_of_reason():
    from lightfoot_pipeline.ingest.extraction.outcome import reason_kind
    from lightfoot_pipeline.operations.sync import SyncReport

    reason = "unreadable PDF: 'Quarterly secrets' at page 3"
    report = SyncReport(files=5, new=["a"], changed=["b"], unchanged=1, removed=["c"],
                        failed=[{"file": "d", "reason": reason}], passages=7, unextracted=2)
    counts = report.file_counts()
    assert counts == {"files": 5, "files_new": 1, "files_changed": 1, "files_removed": 1, "files_unchanged": 1,
                      "files_failed": 1, "files_excluded": 0, "failure_kinds": {reason_kind(reason): 1},
                      "passages_read": 7, "passages_to_extract": 2}
