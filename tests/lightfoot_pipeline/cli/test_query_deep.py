"""``lightfoot query --mode deep`` and ``"mode": "deep"`` in the query service, on a small store,
through a scripted chat-completions server on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from lightfoot_pipeline.cli import main
from lightfoot_pipeline.retrieval.deep.prompts import ANSWER_SYSTEM, MEMORY_SYSTEM
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.store import Store

DATA = Path(__file__).parents[1] / "data" / "query-corpus"
QUESTION = "Who founded the company that makes the Zephyr phone?"
ENDPOINT_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "LIGHTFOOT_LLM_BASE_URL", "LIGHTFOOT_LLM_API_KEY")


@pytest.fixture
def built(tmp_path, capsys, monkeypatch):
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LIGHTFOOT_RERANKER", "none")
    store = str(tmp_path / "store")
    assert main(["ingest", "--dataset", str(DATA), "--store", store, "--embedder", "hashing:32", "--json"]) == 0
    capsys.readouterr()
    return store


def scripted(chat_server) -> None:
    """Step 1 inserts M1; the check asks a local and a global subquery; step 2 updates M1; then
    the memory suffices and the answer names M1."""
    checks = iter([
        {"sufficient": False, "reason": "who founded it?",
         "subqueries": [{"kind": "local", "point": "M1", "query": "Orbital Corp founder"},
                        {"kind": "global", "point": "", "query": "founded by"}]},
        {"sufficient": True, "reason": "the founder is known", "subqueries": []},
    ])
    memories = iter([
        [{"op": "insert", "point": "", "points": [], "description": "The Zephyr phone is made by Orbital Corp.",
          "entities": ["E1"], "facts": [], "passages": ["P1"]}],
        [{"op": "update", "point": "M1", "points": [], "passages": ["P1"], "entities": [], "facts": [],
          "description": "The Zephyr phone is made by Orbital Corp, founded by Mira Kalden."}],
    ])

    def reply(request):
        system = request.messages[0]["content"]
        if system == MEMORY_SYSTEM:
            payload = {"operations": next(memories)}
        elif system == ANSWER_SYSTEM:
            payload = {"answer": "Mira Kalden", "points": ["M1"]}
        else:
            payload = next(checks)
        return chat_server.Reply(content=json.dumps(payload))

    chat_server.script(reply)


def test_query_deep_prints_the_answer_its_points_and_the_steps(built, capsys, chat_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    scripted(chat_server)
    assert main(["query", QUESTION, "--store", built, "--mode", "deep", "--trace"]) == 0
    out = capsys.readouterr().out
    assert "answer: Mira Kalden   [5 calls" in out
    assert "memory points used:\n  M1: The Zephyr phone is made by Orbital Corp, founded by Mira Kalden." in out
    assert "    passage [q-" in out
    assert "steps:\n  step 1:\n    global \"Who founded" in out
    assert "\n    local on M1 \"Orbital Corp founder\"" in out and "\n    update M1 (" in out
    assert "check: insufficient, 2 subqueries: who founded it?" in out and "check: sufficient" in out
    rows = ledger.read(Store(built))
    assert sorted(rows.get_column("purpose").to_list()) == sorted(
        ["deep-memory", "deep-check", "deep-memory", "deep-check", "deep-answer"])
    assert set(rows.get_column("run_id").to_list()) == {rows.get_column("run_id")[0]}


def test_explain_query_in_the_deep_mode_shows_the_steps(built, capsys, chat_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    scripted(chat_server)
    assert main(["explain", "query", QUESTION, "--store", built, "--mode", "deep"]) == 0
    out = capsys.readouterr().out
    assert "steps:\n  step 1:\n    global \"Who founded" in out
    assert "\n    local on M1 \"Orbital Corp founder\"" in out and "\n    update M1 (" in out
    assert main(["explain", "query", QUESTION, "--store", built, "--max-steps", "2"]) == 2
    assert "options of the deep mode" in capsys.readouterr().err


def test_query_deep_as_json_holds_the_steps(built, capsys, chat_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    scripted(chat_server)
    assert main(["query", QUESTION, "--store", built, "--mode", "deep", "--json", "--max-steps", "2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mode"] == "deep" and result["answer"] == "Mira Kalden" and result["answer_status"] == "answered"
    steps = result["deep"]["steps"]
    assert [[q["kind"] for q in s["subqueries"]] for s in steps] == [["global"], ["local", "global"]]
    assert result["deep"]["points"][0]["chunks"][0]["doc_id"].startswith("q-")


def test_query_deep_needs_an_endpoint_and_fails_at_once_when_it_is_unreachable(built, capsys, monkeypatch):
    assert main(["query", QUESTION, "--store", built, "--mode", "deep"]) == 2
    assert "query --mode deep: answers need a language-model endpoint" in capsys.readouterr().err
    assert main(["query", QUESTION, "--store", built, "--trace"]) == 2
    assert "options of the deep mode" in capsys.readouterr().err
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("LIGHTFOOT_LLM_MAX_RETRIES", "0")
    assert main(["query", QUESTION, "--store", built, "--mode", "deep"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: deep query: the model endpoint cannot serve") and f"127.0.0.1:{port}" in err
    (row,) = ledger.read(Store(built)).to_dicts()  # the failed call is in the ledger
    assert row["purpose"] == "deep-memory" and row["status"] == "error" and row["error_kind"] == "unreachable"
    monkeypatch.setenv("LIGHTFOOT_DEEP_MAX_STEPS", "0")
    assert main(["query", QUESTION, "--store", built, "--mode", "deep"]) == 2
    assert "LIGHTFOOT_DEEP_MAX_STEPS" in capsys.readouterr().err


@pytest.mark.slow
def test_the_service_answers_deep_queries(built, chat_server):
    token = "deep-test-token-" + "z" * 24
    env = {**os.environ, "LIGHTFOOT_SERVE_TOKEN": token, "OPENAI_BASE_URL": chat_server.base_url}
    process = subprocess.Popen(
        [sys.executable, "-m", "lightfoot_pipeline.cli", "serve", "--store", built, "--port", "0", "--answers"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    scripted(chat_server)
    try:
        line = process.stdout.readline()
        assert line.startswith("serving snapshot"), line + process.stderr.read()
        base = line.split(" on ")[1].split()[0]

        def post(body: dict) -> tuple[int, dict]:
            request = urllib.request.Request(base + "/query", data=json.dumps(body).encode(), method="POST",
                                             headers={"authorization": f"Bearer {token}",
                                                      "content-type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as err:
                return err.code, json.loads(err.read())

        status, result = post({"question": QUESTION, "mode": "deep"})
        assert status == 200 and result["answer"] == "Mira Kalden" and result["deep"]["used_points"] == ["M1"]
        assert chat_server.count == 5
        status, result = post({"question": QUESTION, "mode": "deep", "answer": False})
        assert status == 400 and "mode deep" in result["error"]
        status, result = post({"question": QUESTION, "mode": "deeper"})
        assert status == 400 and "mode must be one of lightfoot, deep" in result["error"]
    finally:
        process.terminate()
        process.wait(timeout=30)



@pytest.mark.slow
def test_query_deep_as_a_principal_runs_the_loop_on_its_view(built, capsys, chat_server, monkeypatch):
    """Nothing of a document the principal cannot read reaches a prompt of the deep loop."""
    from tests.lightfoot_pipeline.permissions.conftest import write_readers

    write_readers(Store(built), dict.fromkeys(("q-orbital", "q-kalden"), ("legal",)))
    hidden = ("Orbital Corp was founded by Mira Kalden", "studied physics")
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    scripted(chat_server)
    assert main(["query", QUESTION, "--store", built, "--mode", "deep", "--json", "--as", "staff"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["principal"] == {"principal": "staff", "groups": ["staff"], "documents": 10}
    prompts = [m["content"] for r in chat_server.requests for m in r.messages]
    assert prompts and not [p for p in prompts if any(text in p for text in hidden)]
    chat_server.requests.clear()
    scripted(chat_server)
    assert main(["query", QUESTION, "--store", built, "--mode", "deep", "--json"]) == 0
    capsys.readouterr()
    prompts = [m["content"] for r in chat_server.requests for m in r.messages]
    assert any(hidden[0] in p for p in prompts), "the operator reads them"
