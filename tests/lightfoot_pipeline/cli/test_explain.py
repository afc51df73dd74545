"""lightfoot explain doc | entity | query on real stores, as text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightfoot_pipeline.cli import main

DATA = Path(__file__).parents[1] / "data" / "query-corpus"
QUESTION = "Who founded the company that makes the Zephyr phone?"


@pytest.fixture
def built(tmp_path, capsys, monkeypatch):
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "LIGHTFOOT_LLM_BASE_URL", "LIGHTFOOT_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LIGHTFOOT_RERANKER", "none")
    store = str(tmp_path / "store")
    assert main(["ingest", "--dataset", str(DATA), "--store", store, "--embedder", "hashing:32"]) == 0
    capsys.readouterr()
    return store


def _json(capsys, *args: str):
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_explain_doc_matches_what_delete_then_does(built, capsys):
    explained = _json(capsys, "explain", "doc", "q-orbital", "--store", built)
    status = _json(capsys, "status", "--store", built)
    preview = explained["deletion_preview"]
    assert explained["status"] == "live" and explained["facts"] and explained["names"]
    assert preview["counts"]["entities_removed"] + preview["counts"]["entities_changed"] > 0
    deleted = _json(capsys, "delete", "q-orbital", "--store", built)
    assert preview["graph"] == deleted["graph"]
    assert preview["passages_removed"] == deleted["passages_removed"]
    assert deleted["graph"]["entities_before"] - deleted["graph"]["entities_after"] == \
        preview["counts"]["entities_removed"] - preview["counts"]["entities_added"]
    assert deleted["graph"]["facts_before"] - deleted["graph"]["facts_after"] == preview["counts"]["facts_dropped"]
    assert deleted["graph"]["synonym_edges_before"] - deleted["graph"]["synonym_edges_after"] == \
        preview["counts"]["synonym_edges_removed"] - preview["counts"]["synonym_edges_added"]
    after = _json(capsys, "status", "--store", built)
    assert after["counts"]["entities"] == status["counts"]["entities"] - preview["counts"]["entities_removed"] \
        + preview["counts"]["entities_added"]
    gone = _json(capsys, "explain", "doc", "q-orbital", "--store", built)
    assert gone["status"] == "deleted" and gone["deletion_preview"] is None


def test_explain_doc_and_entity_as_text(built, capsys):
    assert main(["explain", "doc", "q-orbital", "--store", built]) == 0
    out = capsys.readouterr().out
    assert "q-orbital: 'Orbital Corp', 1 passages" in out and "deleting it would remove (dry run" in out
    assert main(["explain", "entity", "Orbital Corp", "--store", built]) == 0
    out = capsys.readouterr().out
    assert "alias 'Orbital Corp'" in out and "q-orbital" in out and "facts (" in out
    assert main(["explain", "entity", "nobody at all", "--store", built]) == 2
    assert "error: no entity" in capsys.readouterr().err
    assert main(["explain", "doc", "q-none", "--store", built]) == 2
    assert "error: document 'q-none' is not in the store" in capsys.readouterr().err


@pytest.mark.slow
def test_explain_query_says_why_each_passage_ranked(built, capsys):
    result = _json(capsys, "explain", "query", QUESTION, "--store", built, "--top-k", "3")
    assert [p["rank"] for p in result["passages"]] == [1, 2, 3]
    assert result["seed_facts"] and all(f["entities"] for f in result["seed_facts"])
    for p in result["passages"]:
        assert p["dense_rank"] >= 1 and p["entities"]
        shares = sum(e["share"] for e in p["entities"]) + p["restart_share"]
        assert 0 < shares <= 1.0 + 1e-3  # the listed entities and the restart, of the passage's score
    top = result["passages"][0]
    assert any(e["seed"] for e in top["entities"]), "the top passage's mass comes through a seed entity"
    query = _json(capsys, "query", QUESTION, "--store", built, "--top-k", "3", "--no-answer")
    assert [p["chunk_id"] for p in query["passages"]] == [p["chunk_id"] for p in result["passages"]]
    assert main(["explain", "query", QUESTION, "--store", built, "--top-k", "31"]) == 2
    assert "top_k must be from 1 to 30" in capsys.readouterr().err
