"""Ingestion with the OpenAI extractor end to end: the pipeline, the command line, erasure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import polars as pl
import pytest
from deltalake import DeltaTable

from lightfoot_pipeline import cli, operations
from lightfoot_pipeline.ingest.extraction.cache import EXTRACTION_CACHE
from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import EXTRACTIONS

REPO = Path(operations.__file__).resolve().parents[2]


def passage_of(request) -> tuple[str, str]:
    inside = request.user_text.split("<passage>\n", 1)[1].rsplit("\n</passage>", 1)[0]
    title, _, text = inside.partition("\n")
    return title, text


def answer_for(request, server) -> str:
    title, text = passage_of(request)
    first = text.split(". ")[0].strip()
    words = first.split()
    return server.minified({
        "entities": [{"name": title, "type": "concept", "description": "the passage's topic"}],
        "facts": [[title, "is described by", " ".join(words[-3:]) or title, " ".join(words[:12])]],
    })


def is_malformed(request) -> bool:
    """Every twentieth passage, chosen by its title: 5% of a corpus, the same ones every run."""
    return zlib.crc32(passage_of(request)[0].encode()) % 20 == 0


def write_dataset(folder: Path, documents) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as handle:
        for d in documents:
            handle.write(json.dumps({"doc_id": d.doc_id, "title": d.title, "text": d.text}) + "\n")
    return folder


@pytest.mark.slow
def test_200_passages_with_5_percent_malformed_answers(store, chat_server, sample_documents, hashing_embedder):
    documents = sample_documents[:200]

    malformed = [
        lambda title: '{"entities":[{"name":"' + title + '","type":',  # cut before its first item
        lambda title: "{entities: [" + title + "], facts: none}",  # not JSON
        lambda title: "I'm sorry, I cannot extract anything from " + title + ".",  # no object at all
    ]

    def answer(request):
        if is_malformed(request):
            title = passage_of(request)[0]
            return chat_server.Reply(content=malformed[zlib.crc32(title.encode()) // 20 % 3](title))
        return chat_server.Reply(content=answer_for(request, chat_server), usage=(700, 90))

    chat_server.script(answer)
    settings = LLMSettings(base_url=chat_server.base_url, model="test-model", backoff_s=0.01, concurrency=8)
    extractor = build_openai_extractor(store, llm_settings=settings, run_id="run-200")
    report = operations.ingest(store, documents, extractor, hashing_embedder)

    expected_failed = sum(1 for d in documents if zlib.crc32(d.title.encode()) % 20 == 0)
    assert 3 <= expected_failed <= 20  # about 5% of 200
    assert chat_server.count == 200
    assert report.passages == 200
    assert (report.extracted, report.failed) == (200 - expected_failed, expected_failed)
    assert report.model_calls == 200
    rows = store.read(EXTRACTIONS.name)
    assert rows.height == 200  # every passage accounted for
    assert rows.group_by("status").len().sort("status").rows() == [("failed", expected_failed),
                                                                    ("ok", 200 - expected_failed)]
    failed = rows.filter(pl.col("status") == "failed")
    assert failed.get_column("reason").str.starts_with("unusable answer: ").all()
    assert failed.get_column("raw_output").str.len_chars().min() > 0
    assert set(failed.get_column("reason").to_list()) <= {
        "unusable answer: no JSON object in the answer",
        "unusable answer: truncated JSON closed before any complete entity or fact",
    }
    assert rows.filter(pl.col("status") == "ok").get_column("raw_output").is_null().all()
    totals = ledger.totals(store, "run-200")
    assert (totals["calls"], totals["failed_calls"], totals["documents"]) == (200, expected_failed, 200)
    ok_tokens = (200 - expected_failed) * 700
    assert totals["tokens_in"] >= ok_tokens
    assert report.cost_usd == totals["cost_usd"]

    # Ingesting again asks only for the failed passages; now the model answers them well.
    chat_server.reset()
    chat_server.script(lambda r: chat_server.Reply(content=answer_for(r, chat_server)))
    again = operations.ingest(store, documents,
                            build_openai_extractor(store, llm_settings=settings, run_id="run-retry"),
                            hashing_embedder)
    assert chat_server.count == expected_failed
    assert (again.already_extracted, again.extracted, again.failed) == (200 - expected_failed, expected_failed, 0)
    assert store.read(EXTRACTIONS.name).filter(pl.col("status") == "ok").height == 200


@pytest.mark.slow
def test_cli_ingest_twice_makes_no_request_the_second_time(tmp_path, monkeypatch, capsys, chat_server,
                                                           sample_documents):
    dataset = write_dataset(tmp_path / "dataset", sample_documents[:40])
    chat_server.script(lambda r: chat_server.Reply(content=answer_for(r, chat_server), usage=(650, 85)))
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-cli-test-key")
    monkeypatch.setenv("LIGHTFOOT_LLM_BACKOFF_S", "0.01")
    store_path = str(tmp_path / "store")
    argv = ["ingest", "--dataset", str(dataset), "--extractor", "openai", "--embedder", "hashing",
            "--store", store_path]

    assert cli.main(argv) == 0
    first = capsys.readouterr()
    assert chat_server.count == 40
    assert "extracted 40, already extracted 0, failed 0" in first.out
    assert "model calls 40" in first.out
    assert "extracting: 40/40" in first.err  # the progress line
    assert "sk-cli-test-key" not in first.out + first.err

    chat_server.reset()
    assert cli.main([*argv, "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert chat_server.count == 0
    assert (second["model_calls"], second["already_extracted"], second["extracted"]) == (0, 40, 0)

    assert cli.main(["cost", "--store", store_path, "--json", "--by-document"]) == 0
    cost = json.loads(capsys.readouterr().out)
    assert cost["totals"]["calls"] == 40
    assert cost["totals"]["tokens_in"] == 40 * 650 and cost["totals"]["tokens_out"] == 40 * 85
    # No model name configured: the paper's Llama 3.3 70B at its list price.
    assert cost["totals"]["models"] == ["meta-llama/Llama-3.3-70B-Instruct"]
    assert abs(cost["totals"]["cost_usd"] - ledger.cost_usd(40 * 650, 40 * 85, 0.10, 0.32)) < 1e-9
    assert len(cost["runs"]) == 1 and len(cost["documents"]) == 40
    assert cli.main(["cost", "--store", store_path]) == 0
    assert "40 calls (retries 0, requests 40, failed 0)" in capsys.readouterr().out


@pytest.mark.slow
def test_kill_9_mid_ingest_loses_no_answer_and_the_rerun_asks_only_for_the_rest(
    tmp_path, monkeypatch, capsys, chat_server, sample_documents,
):
    documents = sample_documents[:120]
    dataset = write_dataset(tmp_path / "dataset", documents)
    store_path = str(tmp_path / "store")
    concurrency, answered = 4, 50
    argv = ["ingest", "--dataset", str(dataset), "--extractor", "openai", "--embedder", "hashing",
            "--store", store_path]
    env = {**os.environ, "OPENAI_BASE_URL": chat_server.base_url, "OPENAI_API_KEY": "sk-kill-test",
           "LIGHTFOOT_LLM_CONCURRENCY": str(concurrency), "LIGHTFOOT_LLM_BACKOFF_S": "0.01",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    child: dict[str, int] = {}
    release = threading.Event()

    def answer(request):
        # The first `answered` requests get answers; the rest wait, unanswered. A slot sends its
        # next request only once the answers taken before it are written, so when request
        # answered + concurrency arrives every answer sent is in the cache: kill -9 the ingest then.
        if request.number <= answered:
            return chat_server.Reply(content=answer_for(request, chat_server), usage=(600, 80))
        if request.number == answered + concurrency:
            os.kill(child["pid"], signal.SIGKILL)
        release.wait(60)
        return chat_server.Reply(status=503)

    chat_server.script(answer)
    process = subprocess.Popen([sys.executable, "-m", "lightfoot_pipeline.cli", *argv], env=env, cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child["pid"] = process.pid
    try:
        _out, err = process.communicate(timeout=180)
    finally:
        release.set()
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL, err.decode()[-2000:]
    assert chat_server.count == answered + concurrency

    store = Store(store_path)
    assert store.manifest().seq == 0  # the ingest died before its commit
    assert store.read_journal(EXTRACTION_CACHE.name).height == answered  # every answer sent was kept
    paid = ledger.totals(store)
    assert (paid["calls"], paid["retries"], paid["tokens_in"]) == (answered, 0, answered * 600)

    # The rerun asks only for the passages that got no answer, and says what it found cached.
    chat_server.reset()
    chat_server.script(lambda r: chat_server.Reply(content=answer_for(r, chat_server), usage=(600, 80)))
    for name, value in env.items():
        if name.startswith(("OPENAI_", "LIGHTFOOT_LLM_")):
            monkeypatch.setenv(name, value)
    assert cli.main(argv) == 0
    rerun = capsys.readouterr().out
    assert chat_server.count == len(documents) - answered
    assert (f"extracted {len(documents) - answered}, already extracted {answered} "
            f"({answered} from the extraction cache), failed 0") in rerun
    assert f"model calls {len(documents) - answered} (retries 0)" in rerun
    assert store.read(EXTRACTIONS.name).filter(pl.col("status") == "ok").height == len(documents)
    paid = ledger.totals(store)
    assert (paid["calls"], paid["retries"], paid["runs"]) == (len(documents), 0, 2)
    assert paid["tokens_in"] == len(documents) * 600
    # The small files of those appends (one an answer or so) were compacted: one per bucket.
    for table in (EXTRACTION_CACHE.name, ledger.LLM_LEDGER.name):
        assert len(DeltaTable(store.journal_uri(table)).file_uris()) <= store.n_buckets
    assert store.read_journal(EXTRACTION_CACHE.name).height == len(documents)


def test_a_retried_http_error_is_a_retry_not_a_call(tmp_path, monkeypatch, capsys, chat_server, sample_documents):
    documents = sample_documents[:12]
    dataset = write_dataset(tmp_path / "dataset", documents)
    unlucky = documents[3].title
    failed_once: set[str] = set()
    lock = threading.Lock()

    def answer(request):
        title = passage_of(request)[0]
        with lock:
            first_time = title == unlucky and title not in failed_once
            failed_once.add(title)
        if first_time:
            return chat_server.Reply(status=500)
        return chat_server.Reply(content=answer_for(request, chat_server), usage=(600, 80))

    chat_server.script(answer)
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    monkeypatch.setenv("LIGHTFOOT_LLM_BACKOFF_S", "0.01")
    store_path = str(tmp_path / "store")
    argv = ["ingest", "--dataset", str(dataset), "--extractor", "openai", "--embedder", "hashing",
            "--store", store_path, "--json"]
    assert cli.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert chat_server.count == 13  # twelve calls, one of them sent twice
    assert (report["model_calls"], report["retries"], report["extracted"]) == (12, 1, 12)
    assert cli.main(["cost", "--store", store_path, "--json", "--by-document"]) == 0
    cost = json.loads(capsys.readouterr().out)
    assert (cost["totals"]["calls"], cost["totals"]["retries"], cost["totals"]["attempts"]) == (12, 1, 13)
    assert (cost["runs"][0]["calls"], cost["runs"][0]["retries"]) == (12, 1)
    retried = [d for d in cost["documents"] if d["retries"]]
    assert [d["doc_id"] for d in retried] == [documents[3].doc_id] and retried[0]["calls"] == 1
    assert cli.main(["cost", "--store", store_path]) == 0
    assert "12 calls (retries 1, requests 13, failed 0)" in capsys.readouterr().out


def test_cli_reports_a_missing_endpoint_clearly(tmp_path, monkeypatch, capsys, sample_documents):
    dataset = write_dataset(tmp_path / "dataset", sample_documents[:2])
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "LIGHTFOOT_LLM_BASE_URL", "LIGHTFOOT_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    code = cli.main(["ingest", "--dataset", str(dataset), "--extractor", "openai", "--embedder", "hashing",
                     "--store", str(tmp_path / "store")])
    assert code == 2
    assert "OPENAI_BASE_URL" in capsys.readouterr().err


@pytest.mark.slow
def test_erasing_a_document_purges_its_cached_answer_and_leaves_no_text(tmp_path, chat_server, hashing_embedder,
                                                                       sample_documents):
    from lightfoot_pipeline.store.store import Store

    store = Store(str(tmp_path / "store"))
    canary = "Zyxqvorthian"
    documents = list(sample_documents[:5])
    secret = type(documents[0])(doc_id="secret-doc", title=f"{canary} Institute",
                                text=f"The {canary} Institute was founded in 1901 by Ada Quill.")
    chat_server.script(lambda r: chat_server.Reply(content=answer_for(r, chat_server)))
    settings = LLMSettings(base_url=chat_server.base_url, model="test-model", backoff_s=0.01)
    operations.ingest(store, [*documents, secret], build_openai_extractor(store, llm_settings=settings),
                    hashing_embedder)
    cache = store.read_journal(EXTRACTION_CACHE.name)
    assert cache.height == 6 and cache.get_column("output").str.contains(canary).sum() == 1

    operations.delete(store, ["secret-doc"], erase=True)
    cache = store.read_journal(EXTRACTION_CACHE.name)
    assert cache.height == 5 and not cache.get_column("output").str.contains(canary).any()
    assert ledger.totals(store)["calls"] == 6  # the ledger keeps what was paid, as ids and numbers
    for path in Path(store.uri).rglob("*"):
        if path.is_file():
            assert canary.encode() not in path.read_bytes(), path
    # Re-adding the document asks the model again: its answer is gone.
    chat_server.reset()
    operations.ingest(store, [secret], build_openai_extractor(store, llm_settings=settings), hashing_embedder)
    assert chat_server.count == 1
