"""A sync finishes what earlier runs left: passages without an extraction are asked again, erasures
asked for are finished, two syncs at once ask each passage once, and a deleted file stays out."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import polars as pl
import pytest

from lightfoot_pipeline import cli, operations
from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.ingest.sources import SOURCE_FILES
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.operations.erase import pending_erasures
from lightfoot_pipeline.operations.sync import sync
from lightfoot_pipeline.settings import ChunkSettings, SettingsError
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import EXTRACTIONS

CHUNKING = ChunkSettings(tokens=60, overlap=12)
CANARY = b"Canarytext 5d2c"


def passage_text(request) -> str:
    inside = request.user_text.split("<passage>\n", 1)[1].rsplit("\n</passage>", 1)[0]
    return inside.partition("\n")[2]


def answer(server, request):
    names = sorted(set(re.findall(r"\b[A-Z][a-z]{3,}\b", passage_text(request))))[:6]
    facts = [[names[0], "appears with", names[1], ""]] if len(names) > 1 else []
    return server.Reply(content=server.minified(
        {"entities": [{"name": n, "type": "concept", "description": ""} for n in names], "facts": facts}))


def para(word: str, n: int = 4) -> str:
    return " ".join(f"{word} sentence {i} links Harbor with {word}." for i in range(n))


def build_folder(folder: Path, files) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.md").write_bytes(files.markdown("Notes", [
        ("First", [para("Meadow", 6), para("Canyon", 6)]), ("Second", [para("Glacier", 6)])]))
    (folder / "guide.md").write_bytes(files.markdown("Guide", [("Start", [para("Lantern"), para("Falcon")])]))
    (folder / "readme.txt").write_text(para("Pebble") + "\n\n" + para("Summit"))


def run_sync(store, folder, server, embedder, **kwargs):
    settings = LLMSettings(base_url=server.base_url, model="test-model", backoff_s=0.01, max_retries=0)
    return sync(store, str(folder), build_openai_extractor(store, llm_settings=settings), embedder,
                chunking=CHUNKING, **kwargs)


def fresh_fingerprint(tmp_path, folder, server, embedder) -> str:
    """The fingerprint of a sync of ``folder`` into a new store, the endpoint answering every call."""
    server.script(lambda request: answer(server, request))
    store = Store(str(tmp_path / "fresh"))
    report = run_sync(store, folder, server, embedder)
    assert report.unextracted == 0
    return fingerprint(store).digest


@pytest.mark.slow
def test_passages_the_endpoint_failed_are_asked_again_until_the_store_equals_a_fresh_sync(
        tmp_path, chat_server, hashing_embedder, document_files):
    folder = tmp_path / "docs"
    build_folder(folder, document_files)
    store = Store(str(tmp_path / "store"))
    # HTTP 500s (no retries): for the Glacier passages and the first Pebble one; the rest answered.
    refused: list[str] = []
    lock = threading.Lock()

    def flaky(request):
        text = passage_text(request)
        with lock:
            if "Glacier" in text or ("Pebble" in text and not any("Pebble" in t for t in refused)):
                refused.append(text)
                return chat_server.Reply(status=500)
        return answer(chat_server, request)

    chat_server.script(flaky)
    first = run_sync(store, folder, chat_server, hashing_embedder)
    failed = set(refused)
    assert first.extraction_failed == first.unextracted == len(failed) > 0
    stored = store.read(EXTRACTIONS.name)
    assert stored.filter(pl.col("status") != "ok").height == first.unextracted

    # The endpoint still fails the Glacier passage: the next sync asks only the missing passages,
    # and reports what is still missing.
    chat_server.reset()
    chat_server.script(lambda r: chat_server.Reply(status=500) if "Glacier" in passage_text(r) else answer(chat_server, r))
    second = run_sync(store, folder, chat_server, hashing_embedder)
    assert {passage_text(r) for r in chat_server.requests} == failed
    assert second.new == second.changed == [] and second.unchanged == 3
    assert second.unextracted == sum("Glacier" in t for t in failed) > 0
    assert len(second.asked_again) == 2

    # The endpoint is back: exactly the missing passages are asked, and the store is a fresh sync's.
    chat_server.reset()
    chat_server.script(lambda request: answer(chat_server, request))
    third = run_sync(store, folder, chat_server, hashing_embedder)
    assert chat_server.count == third.model_calls == second.unextracted
    assert all("Glacier" in passage_text(r) for r in chat_server.requests)
    assert third.unextracted == 0 and len(third.asked_again) == 1
    chat_server.reset()
    assert run_sync(store, folder, chat_server, hashing_embedder).model_calls == chat_server.count == 0
    digest = fingerprint(store).digest
    assert digest == fresh_fingerprint(tmp_path, folder, chat_server, hashing_embedder)


@pytest.mark.slow
def test_the_cli_exits_1_while_passages_are_unextracted_and_0_once_asked(tmp_path, chat_server, monkeypatch, capsys,
                                                                          document_files):
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    monkeypatch.setenv("LIGHTFOOT_LLM_BACKOFF_S", "0.01")
    monkeypatch.setenv("LIGHTFOOT_LLM_MAX_RETRIES", "0")
    folder = tmp_path / "docs"
    build_folder(folder, document_files)
    chat_server.script(lambda r: chat_server.Reply(status=500) if "Canyon" in passage_text(r) else answer(chat_server, r))
    argv = ["sync", "--store", str(tmp_path / "store"), "--source", str(folder), "--embedder", "hashing"]
    assert cli.main(argv) == 1
    out = capsys.readouterr().out
    missing = sum("Canyon" in passage_text(r) for r in chat_server.requests)
    assert f"{missing} passages are stored without extraction: the next sync asks for them" in out
    assert cli.main([*argv, "--json"]) == 1  # asked again, failed again
    assert json.loads(capsys.readouterr().out)["unextracted"] == missing
    chat_server.reset()
    chat_server.script(lambda request: answer(chat_server, request))
    assert cli.main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["unextracted"] == 0 and report["model_calls"] == chat_server.count == missing


@pytest.mark.slow
def test_two_syncs_at_once_ask_each_passage_once(tmp_path, chat_server, hashing_embedder, document_files):
    folder = tmp_path / "docs"
    build_folder(folder, document_files)
    store_uri = str(tmp_path / "store")

    def slow(request):
        reply = answer(chat_server, request)
        reply.delay = 0.05
        return reply

    chat_server.script(slow)
    reports, errors = [], []

    def one_sync():
        try:
            reports.append(run_sync(Store(store_uri), folder, chat_server, hashing_embedder))
        except Exception as err:  # reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=one_sync) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    texts = [passage_text(r) for r in chat_server.requests]
    assert len(texts) == len(set(texts)) == reports[0].passages
    assert sum(r.model_calls for r in reports) == len(texts)
    assert all(r.unextracted == 0 for r in reports)
    assert fingerprint(Store(store_uri)).digest == fresh_fingerprint(tmp_path, folder, chat_server, hashing_embedder)


def holding(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and CANARY in p.read_bytes()]


KILLED_SYNC = """
import os, sys
from lightfoot_pipeline import cli
from lightfoot_pipeline.operations import deletion

def killed(*args, **kwargs):
    os._exit(9)  # the process dies between the deletion's commit and its erasure

deletion.erase_history = killed
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_sync_killed_between_its_deletion_and_its_erasure_leaves_it_pending_and_the_next_run_erases(
        tmp_path, chat_server, hashing_embedder, document_files, capsys):
    from lightfoot_pipeline.snapshot.export import export_snapshot

    folder = tmp_path / "docs"
    build_folder(folder, document_files)
    (folder / "secret.docx").write_bytes(document_files.docx(
        [(1, "Secret", [CANARY.decode() + " lives with Harbor in this paragraph."])], title="Secret"))
    store = Store(str(tmp_path / "store"))
    chat_server.script(lambda request: answer(chat_server, request))
    first = run_sync(store, folder, chat_server, hashing_embedder)
    (secret,) = [d for d in first.new if d.endswith("secret.docx")]
    export_snapshot(store, hashing_embedder)
    assert holding(tmp_path / "store")

    (folder / "secret.docx").unlink()
    argv = ["sync", "--store", str(tmp_path / "store"), "--source", str(folder), "--embedder", "hashing",
            "--chunk-tokens", "60", "--chunk-overlap", "12", "--erase"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LIGHTFOOT_LLM_"))}
    killed = subprocess.run([sys.executable, "-c", KILLED_SYNC, *argv], env=env, capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == 9, killed.stderr
    assert secret not in live_doc_ids(Store(str(tmp_path / "store")))
    assert holding(tmp_path / "store")

    assert cli.main(["status", "--store", str(tmp_path / "store"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pending_erasures"] == [secret]
    assert cli.main(["status", "--store", str(tmp_path / "store")]) == 0
    assert f"erasures pending (the next sync, delete or vacuum finishes them): {secret}" in capsys.readouterr().out

    # The next sync, without --erase and with nothing changed at the source, finishes the erasure.
    assert cli.main([*argv[:-1], "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["removed"] == [] and report["erase"]["documents"] == [secret]
    assert holding(tmp_path / "store") == []
    assert pending_erasures(Store(str(tmp_path / "store"))) == []


@pytest.mark.slow
def test_a_deleted_file_stays_out_after_an_edit_until_it_is_readmitted(tmp_path, chat_server, hashing_embedder,
                                                                      document_files, capsys):
    folder = tmp_path / "docs"
    build_folder(folder, document_files)
    store = Store(str(tmp_path / "store"))
    chat_server.script(lambda request: answer(chat_server, request))
    first = run_sync(store, folder, chat_server, hashing_embedder)
    (guide,) = [d for d in first.new if d.endswith("guide.md")]

    operations.delete(store, [guide], erase=True, reason="asked by its author")
    record = store.read(SOURCE_FILES.name).filter(pl.col("doc_id") == guide).row(0, named=True)
    assert record["status"] == "excluded" and "asked by its author" in record["reason"]

    (folder / "guide.md").write_bytes(document_files.markdown("Guide", [("Start", [para("Lantern"), para("Osprey")])]))
    chat_server.reset()
    later = run_sync(store, folder, chat_server, hashing_embedder)
    assert guide not in live_doc_ids(store) and chat_server.count == 0
    assert [e["doc_id"] for e in later.excluded] == [guide] and later.new == later.changed == []
    assert cli.main(["status", "--store", str(tmp_path / "store"), "--json"]) == 0
    assert [f["doc_id"] for f in json.loads(capsys.readouterr().out)["excluded_files"]] == [guide]

    # A path that names no excluded file is refused in one line, before any call.
    with pytest.raises(SettingsError, match="names no excluded file"):
        run_sync(store, folder, chat_server, hashing_embedder, readmit=["notes.md"])
    argv = ["sync", "--store", str(tmp_path / "store"), "--source", str(folder), "--embedder", "hashing",
            "--chunk-tokens", "60", "--chunk-overlap", "12"]
    assert cli.main([*argv, "--readmit", "nowhere.md"]) == 2
    err = capsys.readouterr().err
    assert "names no excluded file" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert chat_server.count == 0

    back = run_sync(store, folder, chat_server, hashing_embedder, readmit=["guide.md"])
    assert back.readmitted == [guide] and back.new == [guide] and back.excluded == []
    assert guide in live_doc_ids(store) and chat_server.count > 0
    assert fingerprint(store).digest == fresh_fingerprint(tmp_path, folder, chat_server, hashing_embedder)
