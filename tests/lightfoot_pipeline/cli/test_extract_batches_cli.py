"""``lightfoot ingest --extractor openai-batch`` and ``lightfoot extract-batches``: a provider's
batches (tests/batch_server.py on loopback) and offline ones with a stand-in runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightfoot_pipeline import cli, operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.store import Store
from tests.lightfoot_pipeline.ingest.extraction.test_ingest_openai import write_dataset

MODEL = "gpt-4o-mini"


def answer(messages: list[dict]) -> str:
    user = "\n".join(m["content"] for m in messages if m["role"] == "user")
    title = user.split("<passage>\n", 1)[1].split("\n", 1)[0]
    return json.dumps({"entities": [{"name": title, "type": "concept", "description": "the topic"}], "facts": []})


def run_json(capsys, *argv) -> dict:
    assert cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow  # an ingest and three collections through the command line
def test_ingest_through_the_batch_api_then_collect_from_the_command_line(tmp_path, monkeypatch, capsys,
                                                                         batch_server, sample_documents):
    batch_server.answer = lambda line: answer(line["body"]["messages"])
    monkeypatch.setenv("OPENAI_BASE_URL", batch_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-cli-batch-key")
    monkeypatch.setenv("LIGHTFOOT_LLM_MODEL", MODEL)
    monkeypatch.setenv("LIGHTFOOT_LLM_BATCH_DISCOUNT", "0.4")
    dataset = write_dataset(tmp_path / "dataset", sample_documents[:4])
    store = ["--store", str(tmp_path / "store")]

    ingested = run_json(capsys, "ingest", "--dataset", str(dataset), "--extractor", "openai-batch", "--embedder",
                        "hashing", *store)
    assert ingested["failed"] == ingested["passages"] and ingested["model_calls"] == 0
    status = run_json(capsys, "status", *store)
    batches = status["extraction_batches"]
    assert len(batches["open"]) == 1 and batches["awaiting_passages"] == status["counts"]["passages"]
    assert batches["provider_files"][0]["batch"] == batches["open"][0]
    ingest_batch = ingested["batch"]["batch_id"]
    explained = run_json(capsys, "explain", "batch", ingest_batch, *store)
    assert explained["awaiting_extraction"] == [{"batch": batches["open"][0], "state": "validating",
                                                 "passages": batches["awaiting_passages"]}]

    for argv in (["status"], ["extract-batches", "status"], ["explain", "batch", ingest_batch]):
        assert cli.main([*argv, *store]) == 0
        out = capsys.readouterr().out
        assert batches["open"][0] in out and "sk-cli-batch-key" not in out, argv
    assert cli.main(["extract-batches", "collect", "--embedder", "hashing", *store]) == 0
    assert "1 still running (in_progress)" in capsys.readouterr().out
    for _ in range(1):
        assert run_json(capsys, "extract-batches", "collect", "--embedder", "hashing", *store)["collected"] == []
    done = run_json(capsys, "extract-batches", "collect", "--embedder", "hashing", *store)
    assert done["collected"] == batches["open"] and done["without_answer"] == 0 and done["files_deleted"] == 2

    listed = run_json(capsys, "extract-batches", "status", *store)
    assert listed["open"] == [] and listed["provider_files"] == []
    assert listed["batches"][0]["events"] == ["planned", "submitted", "state", "state", "collected", "files_deleted"]
    status = run_json(capsys, "status", *store)
    assert status["unextracted_passages"] == 0 and status["extraction_batches"]["provider_files"] == []
    cost = run_json(capsys, "cost", *store)
    assert cost["totals"]["calls"] == status["counts"]["passages"]
    assert cost["totals"]["cost_usd"] == (700 * 0.15 + 90 * 0.60) * 0.4 / 1e6 * status["counts"]["passages"]
    assert batch_server.files == {}


def stand_in_runner(requests: Path, output: Path, *, extra: list[bytes] = ()) -> None:
    """A batch runner of the operator's own: answers every request line of the file (vLLM's run-batch format)."""
    with requests.open("rb") as source, output.open("wb") as sink:
        for raw in source:
            line = json.loads(raw)
            body = {"choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": answer(line["body"]["messages"])}}],
                    "usage": {"prompt_tokens": 500, "completion_tokens": 50}}
            sink.write(json.dumps({"id": "vllm-1", "custom_id": line["custom_id"], "error": None,
                                   "response": {"status_code": 200, "request_id": "r", "body": body}}).encode() + b"\n")
        for line in extra:
            sink.write(line)


@pytest.mark.slow
def test_export_then_import_an_offline_runners_output(tmp_path, capsys, sample_documents, hashing_embedder):
    store_path = tmp_path / "store"
    store = Store(str(store_path))
    report = operations.ingest(store, sample_documents[:5], ReplayExtractor({}), hashing_embedder)
    assert report.failed == report.passages  # stored without extraction
    args = ["--store", str(store_path)]

    exported = run_json(capsys, "extract-batches", "export", str(tmp_path / "requests"), "--max-requests", "3", *args)
    assert exported["sent"] == report.passages and len(exported["files"]) == -(-report.passages // 3)
    assert run_json(capsys, "extract-batches", "export", str(tmp_path / "again"), *args)["sent"] == 0  # asked once

    for n, name in enumerate(exported["files"]):
        output = tmp_path / f"output-{n}.jsonl"
        extra = [b"not json\n", b'{"custom_id": "x-unknown", "response": null, "error": null}\n'] if n == 0 else []
        stand_in_runner(Path(name), output, extra=extra)
        imported = run_json(capsys, "extract-batches", "import", str(output), "--embedder", "hashing:32", *args)
        assert imported["without_answer"] == 0
        assert imported["n_problems"] == (2 if n == 0 else 0)
    status = run_json(capsys, "status", *args)
    assert status["unextracted_passages"] == 0
    rows = ledger.read(store)
    assert rows.height == report.passages and set(rows.get_column("price_source").to_list()) == {"offline"}
    assert rows.get_column("cost_usd").sum() == 0
    assert cli.main(["extract-batches", "import", str(tmp_path / "output-0.jsonl"), "--embedder", "hashing:32",
                     *args]) == 2  # collected already


@pytest.mark.slow  # two syncs and three collections through the command line
def test_a_sync_submits_to_the_batch_api_and_asks_nothing_twice(tmp_path, monkeypatch, capsys, batch_server,
                                                                 document_files):
    batch_server.answer = lambda line: answer(line["body"]["messages"])
    monkeypatch.setenv("OPENAI_BASE_URL", batch_server.base_url)
    monkeypatch.setenv("LIGHTFOOT_LLM_MODEL", MODEL)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_bytes(document_files.markdown("Guide", [("Start", ["Open the lid."])]))
    (folder / "notes.md").write_bytes(document_files.markdown("Notes", [("Use", ["Close the lid."])]))
    argv = ["sync", "--store", str(tmp_path / "store"), "--source", str(folder), "--embedder", "hashing",
            "--extractor", "openai-batch"]
    assert cli.main(argv) == 0
    assert "await a provider batch" in capsys.readouterr().out
    assert cli.main(argv) == 0  # read again for its passages without extraction: nothing submitted twice
    capsys.readouterr()
    assert len(batch_server.batches) == 1
    store = ["--store", str(tmp_path / "store")]
    for _ in range(3):
        run_json(capsys, "extract-batches", "collect", "--embedder", "hashing", *store)
    assert run_json(capsys, "status", *store)["unextracted_passages"] == 0
    assert batch_server.files == {}


@pytest.mark.slow  # an ingest, a cancellation and a second batch
def test_cancel_deletes_the_files_and_the_next_collect_asks_again(tmp_path, monkeypatch, capsys, batch_server,
                                                                  sample_documents):
    batch_server.answer = lambda line: answer(line["body"]["messages"])
    monkeypatch.setenv("OPENAI_BASE_URL", batch_server.base_url)
    monkeypatch.setenv("LIGHTFOOT_LLM_MODEL", MODEL)
    dataset = write_dataset(tmp_path / "dataset", sample_documents[:2])
    store = ["--store", str(tmp_path / "store")]
    run_json(capsys, "ingest", "--dataset", str(dataset), "--extractor", "openai-batch", "--embedder", "hashing",
             *store)
    (first,) = run_json(capsys, "extract-batches", "status", *store)["open"]
    assert run_json(capsys, "extract-batches", "cancel", *store)["cancelled"] == [first]
    assert batch_server.files == {} and [b["status"] for b in batch_server.batches.values()] == ["cancelled"]
    status = run_json(capsys, "extract-batches", "status", *store)
    assert status["open"] == [] and status["provider_files"] == []
    again = run_json(capsys, "extract-batches", "collect", "--embedder", "hashing", *store)
    assert again["asked_again"]["sent"] == status["batches"][0]["requests"] and len(batch_server.batches) == 2


@pytest.mark.slow  # the whole bundled sample, exported and imported (about 5 s)
def test_the_bundled_sample_through_export_and_a_stand_in_runner(tmp_path, capsys, sample_documents,
                                                                  hashing_embedder):
    store_path = tmp_path / "store"
    store = Store(str(store_path))
    report = operations.ingest(store, sample_documents, ReplayExtractor({}), hashing_embedder)
    args = ["--store", str(store_path)]
    exported = run_json(capsys, "extract-batches", "export", str(tmp_path / "requests"), *args)
    assert exported["sent"] == report.passages and len(exported["files"]) == 1  # one file holds them all
    stand_in_runner(Path(exported["files"][0]), tmp_path / "output.jsonl")
    imported = run_json(capsys, "extract-batches", "import", str(tmp_path / "output.jsonl"), "--embedder",
                        "hashing:32", *args)
    assert (imported["answered"], imported["without_answer"], imported["documents"]) == (
        report.passages, 0, len(sample_documents))
    status = run_json(capsys, "status", *args)
    assert status["unextracted_passages"] == 0 and status["counts"]["entities"] > 0
    assert status["extraction_batches"]["open"] == [] and status["extraction_batches"]["provider_files"] == []
