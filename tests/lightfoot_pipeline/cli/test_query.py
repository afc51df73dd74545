"""The query-time commands on real stores: snapshot, query, serve, eval."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lightfoot_pipeline.cli import main

DATA = Path(__file__).parents[1] / "data" / "query-corpus"
QUESTION = "Who founded the company that makes the Zephyr phone?"
ENDPOINT_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "LIGHTFOOT_LLM_BASE_URL", "LIGHTFOOT_LLM_API_KEY")


@pytest.fixture
def no_endpoint(monkeypatch):
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LIGHTFOOT_RERANKER", "none")


@pytest.fixture
def built(tmp_path, capsys):
    store = str(tmp_path / "store")
    assert main(["ingest", "--dataset", str(DATA), "--store", store, "--embedder", "hashing:32", "--json"]) == 0
    capsys.readouterr()
    return store


@pytest.mark.slow
def test_query_exports_a_snapshot_and_reports_it_with_a_latency_breakdown(built, capsys, no_endpoint):
    assert main(["query", QUESTION, "--store", built, "--json", "--top-k", "4", "--no-answer"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result["passages"]) == 4 and {"q-zephyr", "q-orbital"} <= {p["doc_id"] for p in result["passages"]}
    assert result["snapshot"]["snapshot_id"] and result["snapshot"]["stale"] is False
    assert result["answer"] is None and result["answer_status"] == "not requested"
    assert result["reranker"]["state"] == "disabled" and result["order"] == "pagerank"
    assert {"embed", "seed", "pagerank", "rerank", "retrieval", "total"} <= set(result["latency_ms"])

    assert main(["snapshot", "--store", built, "--json"]) == 0  # nothing changed: the same snapshot
    assert json.loads(capsys.readouterr().out)["snapshot_id"] == result["snapshot"]["snapshot_id"]

    # Without an endpoint the answer line says what is missing, and retrieval still works.
    assert main(["query", QUESTION, "--store", built, "--top-k", "2"]) == 0
    text = capsys.readouterr().out
    assert f"snapshot {result['snapshot']['snapshot_id']}" in text
    assert "answers need a language-model endpoint" in text and "OPENAI_BASE_URL" in text
    assert "   1. [q-" in text and "   3. [" not in text and "latency ms: embed" in text


def test_query_answers_through_the_configured_endpoint(built, capsys, chat_server, monkeypatch, no_endpoint):
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    monkeypatch.setenv("LIGHTFOOT_LLM_MODEL", "answer-model")
    for name in ("LIGHTFOOT_LLM_PRICE_IN", "LIGHTFOOT_LLM_PRICE_OUT", "LIGHTFOOT_LLM_ALLOW_UNPRICED"):
        monkeypatch.delenv(name, raising=False)
    chat_server.queue(chat_server.Reply(content='{"answer": "Mira Kalden"}'))
    # a model without a known price is refused in one line, before any call
    assert main(["query", QUESTION, "--store", built]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: query: answers refused: the model 'answer-model' has no known price")
    assert "--allow-unpriced" in err and "\n" not in err and chat_server.count == 0
    assert main(["query", QUESTION, "--store", built, "--allow-unpriced"]) == 0
    assert "answer: Mira Kalden   [answer-model" in capsys.readouterr().out
    monkeypatch.setenv("LIGHTFOOT_LLM_PRICE_IN", "1")
    monkeypatch.setenv("LIGHTFOOT_LLM_PRICE_OUT", "2")
    assert main(["query", QUESTION, "--store", built]) == 0
    assert "answer: Mira Kalden   [answer-model" in capsys.readouterr().out
    assert chat_server.count == 2
    from lightfoot_pipeline.store import ledger
    from lightfoot_pipeline.store.store import Store

    rows = ledger.read(Store(built)).sort("created_at").to_dicts()  # each answer call is recorded
    assert [r["price_source"] for r in rows] == ["unpriced", "configured"]
    assert all(r["purpose"] == "answer" and r["run_id"].startswith("query-") and r["model"] == "answer-model"
               for r in rows)


def test_a_new_commit_marks_the_served_snapshot_stale(built, capsys, no_endpoint):
    assert main(["snapshot", "--store", built]) == 0
    assert "published snapshot" in capsys.readouterr().out
    assert main(["delete", "q-riga", "--store", built]) == 0
    capsys.readouterr()
    assert main(["query", QUESTION, "--store", built, "--no-answer"]) == 0
    assert "run `lightfoot snapshot` to serve them" in capsys.readouterr().out


def test_query_without_an_index_is_a_clear_error(tmp_path, capsys, no_endpoint):
    assert main(["query", QUESTION, "--store", str(tmp_path / "empty")]) == 2
    assert "no index at" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_builds_the_store_once_and_writes_the_documented_shape(tmp_path, capsys, no_endpoint):
    store, out = str(tmp_path / "eval-store"), tmp_path / "eval.json"
    args = ["eval", "--dataset", str(DATA), "--questions", str(DATA / "questions.jsonl"), "--out", str(out),
            "--store", store, "--embedder", "hashing:32"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "built 12 documents" in captured.err and "with 0 model calls" in captured.err
    result = json.loads(out.read_text())
    assert {"n_questions", "modes", "per_question"} <= set(result)
    assert result["n_questions"] == 3 and set(result["modes"]) == {"dense", "lightfoot", "hipporag2"}
    assert result["modes"]["lightfoot"]["recall@5"] == 1.0
    assert len(result["per_question"]) == 3 and result["per_question"][0]["modes"]["lightfoot"]["ranked"]
    assert "lightfoot+rerank not run" in captured.out
    assert main(args) == 0
    assert "built" not in capsys.readouterr().err
    assert json.loads(out.read_text())["run"]["build"] == {"built": False, "documents": 0, "model_calls": 0}


@pytest.mark.slow
def test_serve_answers_over_http_with_a_token_and_no_answers_unless_enabled(built, chat_server, no_endpoint):
    token = "cli-test-token-" + "z" * 24
    env = {**os.environ, "LIGHTFOOT_SERVE_TOKEN": token, "OPENAI_BASE_URL": chat_server.base_url}
    process = subprocess.Popen(
        [sys.executable, "-m", "lightfoot_pipeline.cli", "serve", "--store", built, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline()
        assert line.startswith("serving snapshot"), line + process.stderr.read()
        said = "".join(process.stdout.readline() for _ in range(3))  # authentication, descriptors, answers
        assert "bearer token required" in said and "answers are off on this service" in said
        assert "descriptors: limit " in said
        base = line.split(" on ")[1].split()[0]
        with urllib.request.urlopen(base + "/health", timeout=30) as response:
            assert json.loads(response.read()) == {"status": "ok"}
        body = json.dumps({"question": QUESTION}).encode()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(base + "/query", data=body, method="POST",
                                                          headers={"content-type": "application/json"}), timeout=30)
        assert refused.value.code == 401
        request = urllib.request.Request(base + "/query", data=body, method="POST",
                                         headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            result = json.loads(response.read())
        assert result["passages"][0]["doc_id"].startswith("q-") and result["latency_ms"]["total"] > 0
        assert result["answer"] is None and "answers are off" in result["answer_status"]
        assert chat_server.count == 0
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_serve_refuses_to_listen_beyond_loopback_without_a_token(tmp_path, capsys, no_endpoint, monkeypatch):
    monkeypatch.delenv("LIGHTFOOT_SERVE_TOKEN", raising=False)
    monkeypatch.delenv("LIGHTFOOT_SERVE_TOKENS_FILE", raising=False)
    assert main(["serve", "--store", str(tmp_path / "none"), "--host", "0.0.0.0"]) == 2
    assert "refusing to serve on 0.0.0.0 without authentication" in capsys.readouterr().err
    monkeypatch.setenv("LIGHTFOOT_SERVE_ANSWERS", "maybe")
    assert main(["serve", "--store", str(tmp_path / "none")]) == 2
    assert "LIGHTFOOT_SERVE_ANSWERS='maybe'" in capsys.readouterr().err


def test_serve_token_makes_a_token_and_hashes_one(capsys, monkeypatch, tmp_path):
    assert main(["serve-token"]) == 0
    captured = capsys.readouterr()
    token = captured.out.strip()
    digest = captured.err.strip().splitlines()[-1]
    assert len(token) >= 40 and digest == hashlib.sha256(token.encode()).hexdigest()
    monkeypatch.setattr(sys, "stdin", io.StringIO(token + "\n"))
    assert main(["serve-token", "--hash"]) == 0
    assert capsys.readouterr().out.strip() == digest
    (tmp_path / "tokens").write_text(digest + "\n")
    from lightfoot_pipeline.service.auth import Tokens

    assert Tokens(tokens_file=tmp_path / "tokens").check(token)
    monkeypatch.setattr(sys, "stdin", io.StringIO("short\n"))
    assert main(["serve-token", "--hash"]) == 2


@pytest.mark.slow
@pytest.mark.minilm
def test_eval_on_the_bundled_sample_reaches_the_papers_recall(tmp_path, sample_dir, minilm_sample_store, capsys,
                                                              no_endpoint):
    """The issue's acceptance run: dev questions, recorded extractions, packaged MiniLM, on the
    session's MiniLM store of the sample (``eval`` finds every document held and builds nothing)."""
    store = tmp_path / "s"
    shutil.copytree(minilm_sample_store, store)
    out = tmp_path / "eval.json"
    assert main(["eval", "--dataset", str(sample_dir), "--questions", str(sample_dir / "questions-dev.jsonl"),
                 "--out", str(out), "--store", str(store)]) == 0
    capsys.readouterr()
    report = json.loads(out.read_text())
    assert report["n_questions"] == 50 and report["run"]["embedder"].startswith("all-MiniLM-L6-v2@")
    lightfoot, dense = report["modes"]["lightfoot"], report["modes"]["dense"]
    assert lightfoot["recall@5"] >= 0.75 and lightfoot["recall@10"] >= 0.79
    assert dense["recall@5"] == pytest.approx(0.62, abs=0.03) and dense["recall@10"] == pytest.approx(0.69, abs=0.03)
    assert lightfoot["recall@5"] > dense["recall@5"] and lightfoot["recall@10"] > dense["recall@10"]
    assert report["run"]["build"]["model_calls"] == 0


# Readers of the query corpus for the --as tests: the Zephyr's maker and founder are legal's only.
LEGAL_ONLY = ("q-orbital", "q-kalden")


@pytest.fixture
def restricted(built):
    from lightfoot_pipeline.store.store import Store
    from tests.lightfoot_pipeline.permissions.conftest import write_readers

    write_readers(Store(built), {**dict.fromkeys(LEGAL_ONLY, ("legal",)), "q-riga": ()})
    return built


@pytest.mark.slow
def test_query_as_a_principal_reads_its_view_and_says_whom_it_answered_as(restricted, capsys, no_endpoint):
    question = ["query", QUESTION, "--store", restricted, "--no-answer", "--top-k", "10"]
    assert main([*question, "--json"]) == 0
    everything = json.loads(capsys.readouterr().out)
    assert everything["principal"] == {"principal": "operator", "groups": ["*"], "documents": 12}
    assert set(LEGAL_ONLY) <= {p["doc_id"] for p in everything["passages"]}

    assert main([*question, "--json", "--as", "staff"]) == 0
    staff = json.loads(capsys.readouterr().out)
    assert staff["principal"] == {"principal": "staff", "groups": ["staff"], "documents": 9}
    assert not {p["doc_id"] for p in staff["passages"]} & {*LEGAL_ONLY, "q-riga"}
    assert not {e["doc_id"] for f in staff["seed_facts"] for e in f["evidence"]} & {*LEGAL_ONLY, "q-riga"}
    # the same export, under the view's own id: its time, and a digest of the view's content alone
    mine, whole = staff["snapshot"]["snapshot_id"], everything["snapshot"]["snapshot_id"]
    assert mine.split("-")[0] == whole.split("-")[0] and mine != whole

    assert main([*question, "--as", "legal,staff"]) == 0
    text = capsys.readouterr().out
    assert "answered as legal,staff (groups legal, staff; 11 documents)" in text
    assert main([*question, "--as", ""]) == 0
    assert "answered as public (groups none: public documents only; 9 documents)" in capsys.readouterr().out
    assert main([*question, "--as", "Not A Group"]) == 2
    assert "is not a group name" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_as_a_principal_runs_every_mode_on_its_view_and_records_it(restricted, tmp_path, capsys, no_endpoint):
    out = tmp_path / "eval.json"
    assert main(["eval", "--dataset", str(DATA), "--questions", str(DATA / "questions.jsonl"), "--out", str(out),
                 "--store", restricted, "--reranker", "none", "--as", "staff"]) == 0
    assert "read as staff (groups staff; 9 documents)" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["run"]["principal"] == {"principal": "staff", "groups": ["staff"], "documents": 9}
    for entry in result["per_question"]:
        assert entry["gold_missing"] == sorted(set(entry["gold_doc_ids"]) & {*LEGAL_ONLY, "q-riga"})
        for mode in entry["modes"].values():
            assert mode["ranked"] and not {r["doc_id"] for r in mode["ranked"]} & {*LEGAL_ONLY, "q-riga"}
    assert main(["eval", "--dataset", str(DATA), "--questions", str(DATA / "questions.jsonl"), "--out", str(out),
                 "--store", restricted, "--reranker", "none"]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text())["run"]["principal"]["principal"] == "operator"


@pytest.mark.slow
def test_snapshot_checks_the_newest_runs_changes_or_the_whole_store_as_asked(built, capsys, no_endpoint):
    def rebuild_check(*options: str) -> dict:
        assert main(["snapshot", "--store", built, "--json", "--no-permission-check", *options]) == 0
        result = json.loads(capsys.readouterr().out)
        (check,) = [c for c in result["checks"] if c["name"] == "matches_fresh_rebuild"]
        assert result["published"] and check["passed"], check
        return check["metadata"]

    assert main(["delete", "q-riga", "--store", built]) == 0
    capsys.readouterr()
    changed = rebuild_check("--check-rebuild", "changed")
    assert changed["mode"] == "changed" and changed["run_documents"] == 1 and changed["changed_components"] > 0
    assert changed["compared_changed_components"] == changed["changed_components"]
    assert main(["delete", "q-orbital", "--store", built]) == 0
    capsys.readouterr()
    whole = rebuild_check("--check-rebuild")  # the whole store, as before
    assert whole["mode"] == "full" and whole["store_fingerprint"] == whole["rebuild_fingerprint"]
