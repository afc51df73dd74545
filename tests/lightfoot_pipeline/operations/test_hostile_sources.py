"""Sync against hostile sources: links out and in loops, the store inside its source, names no doc id
could hold, files built to take minutes or gigabytes, and two sources in one store."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import time
import zipfile

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lightfoot_pipeline import cli, operations
from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.ingest import sources
from lightfoot_pipeline.ingest.doc_ids import doc_id_problem, file_doc_id, file_path_of
from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.ingest.sources import SOURCE_FILES, list_source, read_source_file, records_frame
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.operations.sync import look_at_source, sync
from lightfoot_pipeline.settings import ChunkSettings
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENTS, PASSAGES, with_buckets

CHUNKING = ChunkSettings(tokens=60, overlap=12)


@pytest.fixture
def model(chat_server):
    chat_server.script(lambda request: chat_server.Reply(content=chat_server.minified(
        {"entities": [{"name": "Harbor", "type": "concept", "description": ""}], "facts": []})))
    return chat_server


def run_sync(store, folder, model, hashing_embedder, **kwargs):
    settings = LLMSettings(base_url=model.base_url, model="test-model", backoff_s=0.01)
    extractor = build_openai_extractor(store, llm_settings=settings)
    return sync(store, str(folder), extractor, hashing_embedder, chunking=kwargs.pop("chunking", CHUNKING), **kwargs)


def live_ids(store) -> list[str]:
    return sorted(store.read(DOCUMENTS.name).get_column("doc_id").to_list())


def sent(model) -> str:
    return "\n".join(r.user_text for r in model.requests)


def test_links_out_of_the_source_are_not_followed(tmp_path, model, hashing_embedder):
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "passwd").write_text("root:x:0:0:Secretroot Harbor:/root:/bin/bash\n")
    (outside / "folder" / "private.txt").write_text("Privatenote about Harbor.")
    src = tmp_path / "src"
    src.mkdir()
    (src / "kept.txt").write_text("Keptnote about Harbor.")
    os.symlink(outside / "passwd", src / "x.txt")
    os.symlink(outside / "folder", src / "ext")
    os.symlink(tmp_path / "nowhere", src / "dangling.txt")

    report = run_sync(Store(str(tmp_path / "store")), src, model, hashing_embedder)
    assert report.new == ["src:dangling.txt", "src:ext", "src:kept.txt", "src:x.txt"]
    reasons = {f["doc_id"]: f["reason"] for f in report.failed}
    assert reasons == {"src:x.txt": "a symbolic link out of the source, not followed",
                       "src:ext": "a symbolic link out of the source, not followed",
                       "src:dangling.txt": "a symbolic link to nothing (its target is gone)"}
    assert "Secretroot" not in sent(model) and "Privatenote" not in sent(model)
    assert model.count == 1 and "Keptnote" in sent(model)


def test_links_inside_are_followed_once_and_loops_end(tmp_path, model, hashing_embedder):
    src = tmp_path / "src"
    (src / "l").mkdir(parents=True)
    (src / "m").mkdir()
    (src / "top.txt").write_text("Topnote about Harbor.")
    (src / "l" / "inner.txt").write_text("Innernote about Harbor.")
    os.symlink("..", src / "l" / "a")  # the source itself, from inside it
    os.symlink("../..", src / "m" / "b")  # above the source: out
    os.symlink("../l", src / "m" / "c")  # a folder inside, reached twice
    os.symlink("../top.txt", src / "m" / "top-link.txt")  # a file reached twice
    (src / "hidden-target").mkdir()
    (src / ".versions").mkdir()
    (src / ".versions" / "v3.txt").write_text("Versionnote about Harbor.")
    os.symlink(".versions", src / "current")  # a link into a hidden folder names its files

    started = time.perf_counter()
    listed = list_source(*_local(src), "src")
    assert time.perf_counter() - started < 5
    assert [f.doc_id for f in listed] == ["src:current/v3.txt", "src:l/inner.txt", "src:m/b", "src:top.txt"]
    assert [f.doc_id for f in listed if f.problem] == ["src:m/b"]
    assert len({f.path for f in listed if not f.problem}) == 3  # each real file once

    report = run_sync(Store(str(tmp_path / "store")), src, model, hashing_embedder)
    assert live_ids(Store(str(tmp_path / "store"))) == ["src:current/v3.txt", "src:l/inner.txt", "src:top.txt"]
    assert report.model_calls == 3 and [f["doc_id"] for f in report.failed] == ["src:m/b"]


def _local(src):
    import pyarrow.fs as pafs

    return pafs.LocalFileSystem(), os.path.realpath(src)


def test_a_store_or_its_folders_inside_the_source_are_refused(tmp_path, model, hashing_embedder):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("Anote about Harbor.")
    with pytest.raises(LightfootError, match=r"store .* is inside the source .*: a sync would index the store itself"):
        run_sync(Store(str(src / "store")), src, model, hashing_embedder)
    with pytest.raises(LightfootError, match="is inside the source"):  # under a hidden name too
        run_sync(Store(str(src / ".lightfoot")), src, model, hashing_embedder)
    outside = tmp_path / "link-to-inside"
    os.symlink(src / "deep", outside)
    with pytest.raises(LightfootError, match="is inside the source"):  # reached through a link
        run_sync(Store(str(outside)), src, model, hashing_embedder)

    # The store outside, its landing area or staging linked into the source.
    for staging in (("landing",), ("_lightfoot", "relink")):
        store_root = tmp_path / f"store-{len(staging)}"
        store_root.joinpath(*staging[:-1]).mkdir(parents=True, exist_ok=True)
        (src / f"staged-{len(staging)}").mkdir()
        os.symlink(src / f"staged-{len(staging)}", store_root.joinpath(*staging))
        with pytest.raises(LightfootError, match=r"\(its (landing area|staging|folder \w+), .*\) is inside the source"):
            run_sync(Store(str(store_root)), src, model, hashing_embedder)
    with pytest.raises(LightfootError, match="is inside the store"):
        (tmp_path / "outer" / "docs").mkdir(parents=True)
        run_sync(Store(str(tmp_path / "outer")), tmp_path / "outer" / "docs", model, hashing_embedder)
    assert model.count == 0


def test_an_empty_or_missing_source_is_an_error(tmp_path, model, hashing_embedder, monkeypatch, capsys):
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "a.txt").write_text("Working directory note.")
    monkeypatch.chdir(tmp_path / "cwd")
    store = Store(str(tmp_path / "store"))
    for source in ("", "  ", "file://"):
        with pytest.raises(LightfootError, match="no source to sync"):
            run_sync(store, source, model, hashing_embedder)
    with pytest.raises(LightfootError, match="not a folder or prefix that exists"):
        run_sync(store, tmp_path / "missing", model, hashing_embedder)
    assert cli.main(["sync", "--store", str(tmp_path / "store"), "--source", "", "--embedder", "hashing"]) == 2
    assert "no source to sync" in capsys.readouterr().err
    assert model.count == 0 and not store.read(SOURCE_FILES.name).height


def test_names_that_are_not_utf8_or_hold_quotes_and_dots_are_indexed(tmp_path, model, hashing_embedder, capsys,
                                                                      monkeypatch):
    src = tmp_path / "share"
    src.mkdir()
    odd = {b"caf\xe9 menu.txt": "Cafenote", b"it's.txt": "Quotenote", b'say "hi".md': "Saynote",
           b"wait....txt": "Waitnote", b"back\\slash.txt": "Backnote", b"100%.txt": "Percentnote",
           b"tab\there.txt": "Tabnote", b"trailing .txt ": "Trailnote"}
    for name, word in odd.items():
        with open(os.path.join(os.fsencode(src), name), "wb") as handle:
            handle.write(f"{word} about Harbor.".encode())
    (src / "plain.txt").write_text("Plainnote about Harbor.")

    report = run_sync(Store(str(tmp_path / "store")), src, model, hashing_embedder)
    assert report.failed == [] and len(report.new) == len(odd) + 1
    ids = live_ids(Store(str(tmp_path / "store")))
    assert "share:caf%E9 menu.txt" in ids and "share:it%27s.txt" in ids and "share:wait..%2E.txt" in ids
    assert "share:100%25.txt" in ids and "share:tab%09here.txt" in ids and "share:trailing .txt%20" in ids
    assert all(doc_id_problem(d) is None for d in ids)
    assert sorted(os.fsencode(file_path_of(d)[1]) for d in ids) == sorted([*odd, b"plain.txt"])
    # A title is the name as the file system gives it, a byte that is not UTF-8 shown as U+FFFD.
    titles = dict(Store(str(tmp_path / "store")).read("documents").select("doc_id", "title").iter_rows())
    assert titles["share:it%27s.txt"] == "it's.txt" and titles["share:wait..%2E.txt"] == "wait....txt"
    assert titles["share:caf%E9 menu.txt"] == "caf\ufffd menu.txt" and titles["share:100%25.txt"] == "100%.txt"
    assert model.count == len(odd) + 1
    monkeypatch.setenv("OPENAI_BASE_URL", model.base_url)
    argv = ["sync", "--store", str(tmp_path / "store"), "--source", str(src), "--embedder", "hashing:32", "--json",
            "--chunk-tokens", "60", "--chunk-overlap", "12"]
    assert cli.main(argv) == 0, capsys.readouterr().err  # nothing failed: exit 0
    again = json.loads(capsys.readouterr().out)
    assert again["unchanged"] == len(odd) + 1 and model.count == len(odd) + 1, again


@pytest.mark.slow
def test_a_paragraph_bomb_docx_is_refused_quickly(tmp_path, document_files):
    base = document_files.docx([(1, "Start", ["One paragraph."])])
    paragraph = b"<w:p><w:r><w:t>x</w:t></w:r></w:p>"

    def bomb(paragraphs: int) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(base)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                data = source.read(info)
                if info.filename == "word/document.xml":
                    head = data.partition(b"<w:body>")[0]
                    data = head + b"<w:body>" + paragraph * paragraphs + b"<w:sectPr/></w:body></w:document>"
                target.writestr(info.filename, data)
        return out.getvalue()

    src = tmp_path / "src"
    src.mkdir()
    cases = {"wide.docx": bomb(1_500_000), "long.docx": bomb(120_000)}  # 50 MB of XML; 4 MB
    for name, data in cases.items():
        (src / name).write_bytes(data)
    assert len(cases["wide.docx"]) < 300_000
    fs, root = _local(src)
    listed = {f.relative: f for f in list_source(fs, root, "src")}

    started = time.perf_counter()
    wide = read_source_file(fs, root, listed["wide.docx"], ChunkSettings(), (None, None))
    assert wide.failed and time.perf_counter() - started < 20
    assert wide.record["reason"] == "1,500,001 paragraphs and tables: more than 2,000 passages, over the limit per document"

    tight = ChunkSettings(max_file_bytes=8 * 1024 * 1024)  # the 50 MB of XML refused by the zip directory alone
    started = time.perf_counter()
    inflated = read_source_file(fs, root, listed["wide.docx"], tight, (None, None))
    assert inflated.record["reason"].startswith("its XML inflates to ") and time.perf_counter() - started < 2

    started = time.perf_counter()  # within every size limit: the read deadline stops it
    slow = read_source_file(fs, root, listed["long.docx"], ChunkSettings(), (None, None), seconds=0.5)
    assert slow.record["reason"] == "still being read after 0.5 seconds, the limit per file"
    assert time.perf_counter() - started < 10
    few = read_source_file(fs, root, listed["long.docx"], ChunkSettings(max_passages=10, tokens=50, overlap=5),
                           (None, None))
    assert few.record["reason"] == "120,001 paragraphs and tables: more than 10 passages, over the limit per document"


def test_a_large_text_file_is_refused_without_being_read_whole(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "big.txt", "wb") as handle:
        handle.write(b"Harbor words go on. " * 3_000_000)  # 60 MB of text
    (src / "small.txt").write_text("Harbor words go on.")
    read: list[int] = []
    opened = sources.open_source_file

    def counting(fs, listed):
        stream = opened(fs, listed)
        original = stream.read

        def read_counted(n=-1):
            data = original(n)
            read.append(len(data))
            return data

        stream.read = read_counted
        return stream

    monkeypatch.setattr(sources, "open_source_file", counting)
    fs, root = _local(src)
    listed = {f.relative: f for f in list_source(fs, root, "src")}
    started = time.perf_counter()
    big = read_source_file(fs, root, listed["big.txt"], ChunkSettings(), (None, None))
    assert big.record["reason"] == ("60,000,000 bytes of text: more than 2,000 passages of 200 tokens can hold (the "
                                    "limit is 6,400,000 bytes), so it is not read")
    assert sum(read) <= 64 * 1024 and time.perf_counter() - started < 2
    assert not read_source_file(fs, root, listed["small.txt"], ChunkSettings(), (None, None)).failed


@pytest.mark.slow
def test_two_sources_in_one_store_never_share_a_doc_id(tmp_path, model, hashing_embedder, capsys, monkeypatch):
    store = Store(str(tmp_path / "store"))
    for team in ("x", "y"):
        (tmp_path / team / "docs").mkdir(parents=True)
        (tmp_path / team / "docs" / "readme.md").write_text(f"# Readme\n\nTeam{team} readme about Harbor.")
    (tmp_path / "handbook").mkdir()
    (tmp_path / "handbook" / "readme.md").write_text("# Readme\n\nHandbook readme about Harbor.")

    run_sync(store, tmp_path / "x" / "docs", model, hashing_embedder)
    run_sync(store, tmp_path / "handbook", model, hashing_embedder)
    with pytest.raises(LightfootError, match=r"the source name 'docs' is taken .* by the source .*x/docs") as refused:
        run_sync(store, tmp_path / "y" / "docs", model, hashing_embedder)
    assert "--name" in refused.value.hint
    argv = ["sync", "--store", store.uri, "--source", str(tmp_path / "y" / "docs"), "--embedder", "hashing:32"]
    assert cli.main(argv) == 2 and "--name" in capsys.readouterr().err
    monkeypatch.setenv("OPENAI_BASE_URL", model.base_url)
    assert cli.main([*argv, "--name", "team-y", "--chunk-tokens", "60",
                     "--chunk-overlap", "12"]) == 0, capsys.readouterr().err
    assert live_ids(store) == ["docs:readme.md", "handbook:readme.md", "team-y:readme.md"]
    assert set(store.read(SOURCE_FILES.name).get_column("source").to_list()) == {
        os.path.realpath(tmp_path / p) for p in ("x/docs", "handbook", "y/docs")}
    texts = store.read(PASSAGES.name).get_column("text").to_list()
    assert {"Teamx", "Teamy", "Handbook"} <= {w for t in texts for w in t.split()}
    again = run_sync(store, tmp_path / "x" / "docs", model, hashing_embedder)  # the others left alone
    assert (again.removed, again.unchanged) == ([], 1) and len(live_ids(store)) == 3
    with pytest.raises(LightfootError, match="cannot be named 'a:b'"):
        look_at_source(store, str(tmp_path / "handbook"), name="a:b")


@pytest.mark.parametrize("erase", [False, True])
@pytest.mark.slow
def test_a_store_with_doc_ids_of_before_names_syncs_from_the_extraction_cache(tmp_path, model, hashing_embedder,
                                                                              erase):
    """Files recorded under bare paths (``guide.md``) come back as ``NAME:PATH`` with no model call,
    and with ``erase`` the old ids' erasure keeps the answers the new passages use."""
    src = tmp_path / "docs"
    src.mkdir()
    for name in ("guide.md", "notes.txt"):
        (src / name).write_text(f"# {name}\n\nThe {name} says Harbor links Quarry. " * 3)
    store = Store(str(tmp_path / "store"))
    fs, root = _local(src)
    old = [sources.SourceFile(f.relative, f.path, f.size, f.mtime_ns, relative=f.relative)
           for f in list_source(fs, root, "docs")]
    outcomes = [read_source_file(fs, root, f, CHUNKING, (None, None)) for f in old]
    # As sync wrote them then: a file without a title of its own was titled by its doc id's last part.
    old_docs = [dataclasses.replace(o.document, title=o.document.title or f.relative) for o, f in zip(outcomes, old,
                                                                                                    strict=True)]

    def records(tx) -> None:
        frame = records_frame([o.record for o in outcomes])
        tx.update(SOURCE_FILES.name, add=with_buckets(frame, SOURCE_FILES, tx.n_buckets))

    settings = LLMSettings(base_url=model.base_url, model="test-model", backoff_s=0.01)
    operations.ingest(store, old_docs, build_openai_extractor(store, llm_settings=settings), hashing_embedder,
                      stage=records)
    assert live_ids(store) == ["guide.md", "notes.txt"] and model.count > 0
    model.reset()

    report = run_sync(store, src, model, hashing_embedder, erase=erase)
    assert sorted(report.removed) == ["guide.md", "notes.txt"] and sorted(report.new) == ["docs:guide.md",
                                                                                            "docs:notes.txt"]
    assert model.count == 0, [r.user_text for r in model.requests]
    assert report.model_calls == 0 and report.from_cache == report.passages > 0
    assert live_ids(store) == ["docs:guide.md", "docs:notes.txt"]
    recorded = store.read(SOURCE_FILES.name)
    assert sorted(recorded.get_column("doc_id").to_list()) == ["docs:guide.md", "docs:notes.txt"]
    assert recorded.filter(pl.col("status") != "indexed").height == 0
    if erase:  # the old ids' tombstones: deleted, not erased, as their text is live under the new ids
        assert report.erase is None or not set(report.erase["documents"]) & {"guide.md", "notes.txt"}

    renamed = run_sync(store, src, model, hashing_embedder, erase=erase, name="handbook")  # a source renamed
    assert sorted(renamed.new) == ["handbook:guide.md", "handbook:notes.txt"] and model.count == 0
    assert live_ids(store) == ["handbook:guide.md", "handbook:notes.txt"]


@given(st.lists(st.text(min_size=1, max_size=12).filter(lambda t: "/" not in t and "\x00" not in t), min_size=1,
                max_size=3))
def test_any_file_name_gets_a_valid_doc_id_that_gives_the_name_back(parts):
    path = "/".join(parts)
    doc_id = file_doc_id("src", path)
    assert doc_id_problem(doc_id) is None
    assert file_path_of(doc_id) == ("src", path)
    assert file_doc_id("src", path + "x") != doc_id
