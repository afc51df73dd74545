"""A user's mistake, or a system out of reach, is one line on stderr and exit code 2; a bug keeps its traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lightfoot_pipeline.cli import main
from lightfoot_pipeline.cli import store as store_commands
from lightfoot_pipeline.ingest.dataset import DatasetError
from lightfoot_pipeline.models.llm import HINTS
from lightfoot_pipeline.store.log import StoreUnavailable

DATA = Path(__file__).parents[1] / "data" / "query-corpus"
ENDPOINT_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "LIGHTFOOT_LLM_BASE_URL", "LIGHTFOOT_LLM_API_KEY")


def the_error_line(stderr: str) -> str:
    """The one line a refused command prints: ``error: what failed, why; what to do``."""
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return the_error_line(captured.err)


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lightfoot_pipeline.cli", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def built(tmp_path, capsys) -> str:
    store = str(tmp_path / "store")
    assert main(["ingest", "--dataset", str(DATA), "--store", store, "--embedder", "hashing", "--json"]) == 0
    capsys.readouterr()
    return store


@pytest.mark.slow
def test_ingest_into_a_store_built_with_another_embedder(built):
    done = run_cli("ingest", "--dataset", str(DATA), "--store", built, "--embedder", "hashing:16", "--json")
    assert done.returncode == 2 and done.stdout == ""
    line = the_error_line(done.stderr)
    assert "name vectors come from 'hashing-3gram-64d', not 'hashing-3gram-16d'" in line
    assert line.endswith("use the same embedder (--embedder or LIGHTFOOT_EMBEDDER may name that id), or rebuild into a new store")


def test_a_store_path_that_is_a_file(tmp_path, capsys):
    (tmp_path / "file").write_text("not a store\n")
    for argv in (["status", "--store", str(tmp_path / "file")],
                 ["ingest", "--dataset", str(DATA), "--embedder", "hashing", "--store", str(tmp_path / "file" / "s")]):
        line = refused(capsys, argv)
        assert f"{tmp_path / 'file'} is a file, not a directory" in line
        assert line.endswith("give --store (or LIGHTFOOT_STORE) a directory, or a path that does not exist yet")
    assert (tmp_path / "file").read_text() == "not a store\n"


def test_a_store_uri_of_an_unknown_scheme(capsys, monkeypatch):
    monkeypatch.setenv("LIGHTFOOT_STORE", "nosuch://bucket/prefix")  # the environment's store, refused alike
    line = refused(capsys, ["status"])
    assert line.startswith("error: store nosuch://bucket/prefix: unknown scheme 'nosuch://'; give a local path")
    assert "s3://" in line


@pytest.mark.slow
def test_an_object_store_out_of_reach(capsys, monkeypatch):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    for name, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                        "AWS_ACCESS_KEY_ID": "lightfoot-test", "AWS_SECRET_ACCESS_KEY": "lightfoot-test"}.items():
        monkeypatch.setenv(name, value)
    line = refused(capsys, ["status", "--store", "s3://lightfoot-test/store"])
    assert line.startswith(f"error: store s3://lightfoot-test/store: cannot read s3://lightfoot-test/store/"
                           f"_lightfoot/store_log at {endpoint}: ")
    assert "Connection refused" in line and "\x1b" not in line
    assert line.endswith(StoreUnavailable.hint)


@pytest.mark.slow
def test_a_malformed_dataset(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "corpus.jsonl").write_text('{"doc_id": "a", "text": "ok"}\n{"doc_id": "b", "text": \n')
    done = run_cli("ingest", "--dataset", str(tmp_path / "bad"), "--store", str(tmp_path / "s"), "--embedder", "hashing")
    assert done.returncode == 2
    line = the_error_line(done.stderr)
    assert line.startswith(f"error: {tmp_path / 'bad' / 'corpus.jsonl'}:2: not valid JSON")
    assert line.endswith(DatasetError.hint)
    assert not (tmp_path / "s").exists()


def test_replaying_a_dataset_without_recorded_extractions(tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "corpus.jsonl").write_text('{"doc_id": "a", "text": "Riga is a city."}\n')
    line = refused(capsys, ["ingest", "--dataset", str(tmp_path / "plain"), "--extractor", "replay",
                            "--store", str(tmp_path / "s"), "--embedder", "hashing"])
    assert line == (f"error: {tmp_path / 'plain'}: no extractions.jsonl to replay; record the extractions there, "
                    "or extract with a model (--extractor openai)")


@pytest.mark.parametrize("documents", [12, 1], ids=["stops-sending", "never-answered"])
def test_an_unreachable_model_endpoint(tmp_path, capsys, monkeypatch, documents):
    """12 passages: the extractor stops sending after three unreachable calls; 1: its only call fails."""
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    rows = (DATA / "corpus.jsonl").read_text().splitlines()[:documents]
    (dataset / "corpus.jsonl").write_text("\n".join(rows) + "\n")
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    endpoint = f"http://127.0.0.1:{closed_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", endpoint)
    monkeypatch.setenv("LIGHTFOOT_LLM_MAX_RETRIES", "0")
    monkeypatch.setenv("LIGHTFOOT_LLM_CONCURRENCY", "1")
    store = str(tmp_path / "store")
    line = refused(capsys, ["ingest", "--dataset", str(dataset), "--extractor", "openai", "--embedder", "hashing",
                            "--store", store, "--json"])
    assert line.startswith(f"error: ingest into {store}: the model endpoint failed (unreachable: cannot reach {endpoint}")
    assert f"; {documents} of {documents} passages are stored without extraction, and the next ingest asks for them; " in line
    assert line.endswith(HINTS["unreachable"])
    # What the line says of the store holds: the documents are in, none of their passages extracted.
    assert main(["status", "--store", store, "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)["counts"]
    assert counts["documents"] == documents and counts["entities"] == 0


def test_a_model_endpoint_that_refuses_the_key(tmp_path, capsys, monkeypatch, chat_server):
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-refused-key")
    monkeypatch.setenv("LIGHTFOOT_LLM_CONCURRENCY", "1")
    chat_server.queue(then=chat_server.Reply(status=401))
    store = str(tmp_path / "store")
    line = refused(capsys, ["ingest", "--dataset", str(DATA), "--extractor", "openai", "--embedder", "hashing",
                            "--store", store, "--json"])
    assert chat_server.count == 1  # no passage is sent after the endpoint refused the key
    assert line.startswith(f"error: ingest into {store}: the model endpoint failed (auth: ")
    assert "; 12 of 12 passages are stored without extraction" in line and line.endswith(HINTS["auth"])
    assert "sk-refused-key" not in line


def test_mistakes_are_refused_before_any_paid_call(tmp_path, capsys, monkeypatch, chat_server):
    """A bad embedder, an unwritable store or a limit out of range: one line, and no model call made."""
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("Alice met Bob in Paris.\n")
    store = str(tmp_path / "store")
    ingest = ["ingest", "--dataset", str(DATA), "--extractor", "openai", "--store", store]
    sync = ["sync", "--source", str(tmp_path / "src"), "--store", store]
    for spec in ("hashing:0", "hashing:5000"):
        for argv in (ingest, sync):
            line = refused(capsys, [*argv, "--embedder", spec])
            assert line.startswith("error: the hashing embedder's dim must be a whole number from 1 to 4096, got ")
    for spec in ("hashing:abc", "hashing:-1", "hashing:1e3"):
        line = refused(capsys, [*ingest, "--embedder", spec])
        assert line == (f"error: embedder {spec!r}: the hashing embedder is hashing or hashing:DIM, DIM a whole "
                        "number from 1 to 4096")
    unwritable = tmp_path / "read-only"
    unwritable.mkdir()
    unwritable.chmod(0o500)
    roots = ["/proc/lightfoot"] + ([str(unwritable / "store")] if os.geteuid() != 0 else [])  # root writes anywhere
    try:
        for root in roots:
            for argv in (["ingest", "--dataset", str(DATA), "--extractor", "openai", "--embedder", "hashing"],
                         ["sync", "--source", str(tmp_path / "src"), "--embedder", "hashing"]):
                line = refused(capsys, [*argv, "--store", root])
                assert line.startswith(f"error: store {root}: cannot write there (")
                assert line.endswith("give --store (or LIGHTFOOT_STORE) a directory this user can write")
    finally:
        unwritable.chmod(0o700)
    for value in ("1e30", "inf", "nan", "0", "-1", "abc"):
        with pytest.raises(SystemExit) as exited:
            main([*sync, "--embedder", "hashing", "--max-file-mb", value])
        assert exited.value.code == 2
        assert "argument --max-file-mb: " in capsys.readouterr().err
    assert chat_server.count == 0
    assert not Path(store).exists()


def test_status_of_a_missing_store(tmp_path, capsys):
    missing = str(tmp_path / "none")
    for argv in (["status", "--store", missing], ["status", "--store", missing, "--json"]):
        assert refused(capsys, argv) == (f"error: no store at {missing}; name the store with --store (or "
                                         "LIGHTFOOT_STORE), or build one with `lightfoot ingest`")


def test_a_missing_index_or_snapshot(tmp_path, capsys):
    empty = str(tmp_path / "empty")
    for argv in (["query", "Who founded it?", "--store", empty],
                 ["snapshot", "--store", empty],
                 ["serve", "--store", empty, "--port", "0"]):
        assert refused(capsys, argv) == f"error: no index at {empty}: run `lightfoot ingest` first"
    for argv in (["delete", "doc-1", "--store", empty], ["vacuum", "--store", empty]):
        assert refused(capsys, argv) == (f"error: no store at {empty}; name the store with --store (or "
                                         "LIGHTFOOT_STORE), or build one with `lightfoot ingest`")
    assert not Path(empty).exists()


def test_a_snapshot_that_cannot_be_read(built, capsys, monkeypatch):
    monkeypatch.setenv("LIGHTFOOT_RERANKER", "none")
    assert main(["snapshot", "--store", built, "--json"]) == 0
    snapshot_id = json.loads(capsys.readouterr().out)["snapshot_id"]
    (Path(built) / "snapshots" / snapshot_id / "manifest.json").write_text("{not json")
    line = refused(capsys, ["query", "Who founded it?", "--store", built, "--no-answer"])
    assert line.startswith(f"error: snapshot {snapshot_id} has an unreadable manifest")


def test_option_values_the_service_refuses(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LIGHTFOOT_SERVE_ANSWER_BUDGET_USD", "lots")
    line = refused(capsys, ["serve", "--store", str(tmp_path / "s")])
    assert line == ("error: LIGHTFOOT_SERVE_ANSWER_BUDGET_USD='lots' is not a number; set "
                    "LIGHTFOOT_SERVE_ANSWER_BUDGET_USD to a number, or unset it for the default")
    monkeypatch.delenv("LIGHTFOOT_SERVE_ANSWER_BUDGET_USD")
    line = refused(capsys, ["serve", "--store", str(tmp_path / "s"), "--header-timeout", "0"])
    assert line == ("error: serve: header_timeout_s must be positive, got 0.0; see `lightfoot serve --help`")


def test_doc_ids_no_document_can_have(tmp_path, capsys):
    line = refused(capsys, ["delete", " padded", "also\tbad", "--store", str(tmp_path / "s")])
    assert line.startswith("error: delete: doc_id ") and line.count("doc_id ") == 2
    assert line.endswith("; no document can have such an id")


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch):
    def broken(args):
        raise KeyError("a bug, not a user's mistake")

    monkeypatch.setattr(store_commands, "cmd_status", broken)
    with pytest.raises(KeyError, match="a bug"):
        main(["status", "--store", str(tmp_path / "s")])
