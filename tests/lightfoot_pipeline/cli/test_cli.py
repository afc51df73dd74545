"""The command line on real stores: ingest, status, delete, demo, audit-deletion."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lightfoot_pipeline.cli import main
from lightfoot_pipeline.evaluation.deletion_trial import write_subset


@pytest.fixture
def small_dataset(tmp_path, sample_documents, sample_dir):
    keep = {d.doc_id for d in sample_documents[:40]}
    target = tmp_path / "dataset"
    write_subset(sample_dir, keep, target)
    return target


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lightfoot_pipeline.cli", *args], capture_output=True, text=True,
                          env=env)


@pytest.mark.slow
def test_ingest_status_delete(tmp_path, small_dataset, capsys):
    store = str(tmp_path / "store")
    assert main(["ingest", "--dataset", str(small_dataset), "--store", store, "--embedder", "hashing", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["documents"] == 40 and report["extracted"] == 40 and report["model_calls"] == 0
    # A second ingest of the same dataset finds everything extracted and commits no change.
    assert main(["ingest", "--dataset", str(small_dataset), "--store", store, "--embedder", "hashing", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["already_extracted"] == 40 and again["extracted"] == 0

    assert main(["status", "--store", store, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["counts"]["documents"] == 40 and status["config"]["embedder"] == "hashing-3gram-64d"

    assert main(["delete", "musique-0001", "musique-0002", "no-such-doc", "--store", store, "--json"]) == 0
    deleted = json.loads(capsys.readouterr().out)
    assert deleted["deleted"] == ["musique-0001", "musique-0002"] and deleted["not_found"] == ["no-such-doc"]
    assert deleted["model_calls"] == 0


@pytest.mark.slow
def test_ingest_reports_replaced_documents_and_ignored_records(tmp_path, small_dataset, capsys):
    store = str(tmp_path / "store")
    ingest = ["ingest", "--dataset", str(small_dataset), "--store", store, "--embedder", "hashing"]
    assert main(ingest) == 0
    assert capsys.readouterr().out.startswith("ingested 40 new documents, replaced 0, 0 unchanged (40 passages)")
    corpus = small_dataset / "corpus.jsonl"
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    rows[1]["text"] += " It was revised later."
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with (small_dataset / "extractions.jsonl").open("a") as records:
        records.write(json.dumps({"doc_id": "ghost-1", "entities": [], "facts": []}) + "\n")
        records.write(json.dumps({"doc_id": "ghost-2", "entities": [], "facts": []}) + "\n")

    assert main(ingest) == 0
    out = capsys.readouterr().out
    assert out.startswith("ingested 0 new documents, replaced 1, 39 unchanged (40 passages)")
    assert f"  replaced (a new version of a stored document): {rows[1]['doc_id']}; their earlier text" in out
    assert "  ignored 2 recorded extractions: unknown document\n" in out

    assert main([*ingest, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["ingested"], report["replaced"], report["unchanged"]) == (0, 0, 40)
    assert report["ignored_records"] == {"unknown document": 2}


@pytest.mark.slow
def test_delete_of_unknown_ids_exits_0_and_says_so(tmp_path, small_dataset, capsys):
    store = str(tmp_path / "store")
    assert main(["ingest", "--dataset", str(small_dataset), "--store", store, "--embedder", "hashing"]) == 0
    capsys.readouterr()
    assert main(["delete", "no-such-doc", "--store", store]) == 0
    assert "  not in the store, nothing to delete: no-such-doc\n" in capsys.readouterr().out
    assert main(["delete", "musique-0001", "--store", store]) == 0
    assert capsys.readouterr().out.startswith("deleted 1 documents (1 passages)")

    # In a process of its own, to see the console as a user does: nothing on stderr, no warning.
    done = run_cli("delete", "no-such-doc", "musique-0001", "--erase", "--store", store)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("deleted 0 documents")
    assert "  deleted before: musique-0001; their history is erased now\n" in done.stdout
    assert "  not in the store, nothing to delete: no-such-doc\n" in done.stdout
    assert "  erased: " in done.stdout

    assert main(["delete", "no-such-doc", "--erase", "--store", store, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["not_found"] == ["no-such-doc"] and report["already_deleted"] == [] and report["erase"]


@pytest.mark.slow
def test_vacuum(tmp_path, small_dataset, capsys):
    store = str(tmp_path / "store")
    assert main(["vacuum", "--store", store]) == 2
    assert "no store at" in capsys.readouterr().err
    assert main(["ingest", "--dataset", str(small_dataset), "--store", store, "--embedder", "hashing"]) == 0
    capsys.readouterr()
    assert main(["vacuum", "--store", store]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"vacuumed {tmp_path / 'store'}") and "  erased: 0 cache entries, 0 vectors, 0 snapshots" in out


def test_store_from_the_environment(tmp_path, small_dataset, monkeypatch, capsys):
    monkeypatch.setenv("LIGHTFOOT_STORE", str(tmp_path / "env-store"))
    assert main(["ingest", "--dataset", str(small_dataset), "--embedder", "hashing"]) == 0
    assert (tmp_path / "env-store" / "tables" / "documents").is_dir()


def test_malformed_corpus_is_refused_before_anything_is_written(tmp_path, capsys):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "corpus.jsonl").write_text('{"doc_id": "a", "text": "ok"}\n{"doc_id": ""}\n')
    code = main(["ingest", "--dataset", str(tmp_path / "bad"), "--store", str(tmp_path / "s"), "--embedder", "hashing"])
    assert code == 2 and "corpus.jsonl:2" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_a_store_keeps_its_embedder(tmp_path, small_dataset, capsys):
    store = str(tmp_path / "store")
    assert main(["ingest", "--dataset", str(small_dataset), "--store", store, "--embedder", "hashing"]) == 0
    result = run_cli("ingest", "--dataset", str(small_dataset), "--store", store, "--embedder", "hashing:16")
    assert result.returncode != 0 and "name vectors come from" in result.stderr


@pytest.mark.slow
def test_audit_deletion_on_a_slice(tmp_path, small_dataset):
    out, scratch = tmp_path / "audit.json", tmp_path / "tmp"
    scratch.mkdir()
    result = run_cli("audit-deletion", "--dataset", str(small_dataset), "--fraction", "0.1", "--seed", "0",
                     "--out", str(out), "--embedder", "hashing", "--store", str(tmp_path / "audit-store"),
                     env={**os.environ, "TMPDIR": str(scratch)})
    assert result.returncode == 0, result.stderr
    assert list(scratch.iterdir()) == [], "the survivors' copy of the documents is not left in a temporary folder"
    audit = json.loads(out.read_text())
    assert audit["work_dir"] is None and audit["fresh_store"] is None
    assert audit["fingerprint_equal"] is True and audit["tables_differing"] == []
    assert audit["deleted_docs"] == 4 and audit["surviving_docs"] == 36 and audit["model_calls"] == 0
    assert audit["counts_after_delete"] == audit["counts_fresh_store"]
    assert audit["delete_seconds"] > 0 and audit["rebuild_seconds"] > 0


@pytest.mark.slow
def test_demo_with_the_hashing_embedder(tmp_path):
    result = run_cli("demo", "--store", str(tmp_path / "demo"), "--embedder", "hashing")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "identical: yes" in result.stdout and "0 model calls" in result.stdout
    assert "== 5. serve" in result.stdout and "no model call" in result.stdout.split("== 5. serve")[1]


def test_status_lists_the_passages_stored_without_extraction(tmp_path, capsys, hashing_embedder):
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.ingest.dataset import Document
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor
    from lightfoot_pipeline.store.store import Store

    store = str(tmp_path / "store")
    documents = [Document("answered", "A", "Harbor stands by the sea."), Document("unanswered", "U", "Quarry is old.")]
    records = {"answered": {"entities": [{"name": "Harbor", "type": "place", "description": None}], "facts": []}}
    operations.ingest(Store(store), documents, ReplayExtractor(records), hashing_embedder)  # none for 'unanswered'
    assert main(["status", "--store", store, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["unextracted_passages"] == 1
    assert status["unextracted_documents"] == [{"doc_id": "unanswered", "passages": 1}]
    assert main(["status", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "1 passages of 1 documents are stored without extraction" in out and "unanswered: 1 passages" in out
