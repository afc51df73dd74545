"""Batch provenance: what a batch did to each document and where each stands after later batches,
deletions and an erasure; which batches and runs produced a document, an entity's and a fact's
sources; and the links to the page and to Dagster runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import Document, load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.provenance import (
    ExplainError,
    batch_link,
    document_link,
    explain_batch,
    explain_document,
    explain_entity,
    explain_fact,
)
from lightfoot_pipeline.settings import SettingsError
from lightfoot_pipeline.store.batches import CLI, DAGSTER, Batch, writing_batch
from lightfoot_pipeline.store.store import Store

DATA = Path(__file__).parents[1] / "data" / "query-corpus"
CANARY = Document(doc_id="q-canary", title="Vellamo Quarry", text="Vellamo Quarry was opened by Ansel Drift.")
CANARY_RECORD = {"doc_id": "q-canary", "entities": [{"name": "Vellamo Quarry"}, {"name": "Ansel Drift"}],
                 "facts": [["Vellamo Quarry", "opened by", "Ansel Drift"]]}
DROP, REVISE, ERASE, TAKE, BACK = "drop-aaa111", "cli-ingest-20261201t170501-0b0b0b0b", "erase-ccc333", \
    "drop-ddd444", "drop-eee555"


@pytest.fixture(autouse=True)
def no_links(monkeypatch):
    for name in ("LIGHTFOOT_PAGE_URL", "LIGHTFOOT_DAGSTER_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The query corpus and a canary dropped in one batch; then a revised q-zephyr (and q-riga as it
    was) from the command line, the canary erased, q-tallinn deleted and dropped again, and
    q-baltic deleted outside any batch."""
    store = Store(str(tmp_path_factory.mktemp("batches") / "store"))
    embedder = HashingEmbedder(dim=32)
    documents = {d.doc_id: d for d in load_corpus(DATA)}
    records = {**load_recorded_extractions(DATA), CANARY.doc_id: CANARY_RECORD}
    replay = ReplayExtractor(records)
    with writing_batch(Batch(DROP, "run-a-0f0f", DAGSTER)):
        operations.ingest(store, [*documents.values(), CANARY], replay, embedder)
    revised = dataclasses.replace(documents["q-zephyr"], text=documents["q-zephyr"].text + " It was revised.")
    with writing_batch(Batch(REVISE, "cli-ingest-20261201T170501Z-0b0b0b0b", CLI)):
        operations.ingest(store, [revised, documents["q-riga"]], replay, embedder)
    with writing_batch(Batch(ERASE, "run-c-0f0f", DAGSTER)):
        operations.delete(store, [CANARY.doc_id], erase=True)
    with writing_batch(Batch(TAKE, "run-d-0f0f", DAGSTER)):
        operations.delete(store, ["q-tallinn"])
    with writing_batch(Batch(BACK, "run-e-0f0f", DAGSTER)):
        operations.ingest(store, [documents["q-tallinn"]], replay, embedder)
    operations.delete(store, ["q-baltic"])  # outside any batch
    return store


def statuses(explanation) -> dict[str, tuple[str, str | None]]:
    return {d["doc_id"]: (d["status"], d["status_batch"]) for d in explanation.documents}


def test_a_batch_says_where_each_of_its_documents_stands_now(built):
    dropped = explain_batch(built, DROP)
    now = statuses(dropped)
    assert now["q-zephyr"] == ("replaced", REVISE)
    assert now["q-riga"] == ("live", None), "a later batch that found it unchanged leaves it with this one"
    assert now["q-canary"] == ("erased", ERASE)
    assert now["q-tallinn"] == ("replaced", BACK), "deleted, then stored again by a later batch"
    assert now["q-baltic"] == ("deleted", None), "deleted outside any batch"
    assert now["q-orbital"] == ("live", None)
    assert {d["action"] for d in dropped.documents} == {"added"} and len(dropped.documents) == 13
    c = dropped.counts
    assert (c["added"], c["replaced"], c["unchanged"], c["deleted"], c["live"]) == (13, 0, 0, 0, 9)
    assert c["passages"] == 9 and c["names"] > 0 and c["entities"] > 0 and c["facts"] > 0
    assert [(m["seq"], m["operation"], m["by"], m["run_id"]) for m in dropped.commits] == \
        [(1, "ingest", "dagster", "run-a-0f0f")]
    assert dropped.runs == [{"run_id": "run-a-0f0f", "by": "dagster", "run_url": None}]

    revised = explain_batch(built, REVISE)
    assert statuses(revised) == {"q-zephyr": ("live", None), "q-riga": ("unchanged", DROP)}
    assert (revised.counts["replaced"], revised.counts["unchanged"], revised.counts["live"]) == (1, 1, 1)
    assert revised.commits[0]["by"] == "cli" and revised.commits[0]["run_url"] is None

    assert statuses(explain_batch(built, TAKE)) == {"q-tallinn": ("readded", BACK)}
    assert statuses(explain_batch(built, BACK)) == {"q-tallinn": ("live", None)}


def test_an_erased_document_is_an_id_in_its_batches_and_nothing_more(built):
    erased = explain_batch(built, ERASE)
    assert statuses(erased) == {"q-canary": ("erased", ERASE)}
    assert [m["operation"] for m in erased.commits] == ["delete", "erase"]
    assert erased.counts["deleted"] == 1 and erased.counts["live"] == 0
    for explanation in (erased, explain_batch(built, DROP)):
        [canary] = [d for d in explanation.documents if d["doc_id"] == "q-canary"]
        assert "title" not in canary
        text = json.dumps(explanation.as_dict(), default=str)
        for word in ("Vellamo", "Quarry", "Ansel", "Drift", "opened"):
            assert word not in text, word
    history = explain_document(built, "q-canary")
    assert history.status == "deleted"
    assert [(b["batch"], b["action"]) for b in history.batches] == [(DROP, "added"), (ERASE, "deleted")]


def test_a_batch_lists_the_entities_its_live_documents_mention_most_first(built, monkeypatch):
    dropped = explain_batch(built, DROP)
    live = [d["doc_id"] for d in dropped.documents if d["status"] == "live"]
    mentions = built.read("mentions").filter(pl.col("doc_id").is_in(live))
    expected = dict(mentions.group_by("entity_id").agg(pl.col("chunk_id").n_unique()).iter_rows())
    assert {e["entity_id"]: e["n_passages"] for e in dropped.entities} == expected, "the live documents' passages"
    assert len(dropped.entities) == dropped.counts["entities"] and dropped.more_entities == 0
    assert [e["n_passages"] for e in dropped.entities] == sorted(expected.values(), reverse=True)
    text = json.dumps(dropped.entities)
    for word in ("Vellamo", "Ansel"):  # the erased canary's, and q-zephyr's are the later batch's
        assert word not in text, word
    [orbital] = explain_entity(built, "Orbital Corp")
    assert orbital.entity_id in {e["entity_id"] for e in dropped.entities}
    assert explain_batch(built, ERASE).entities == []
    monkeypatch.setattr("lightfoot_pipeline.provenance.batches.MAX_ENTITIES", 3)
    capped = explain_batch(built, DROP)
    assert capped.entities == dropped.entities[:3] and capped.more_entities == len(dropped.entities) - 3


def test_a_document_names_every_batch_that_touched_it(built):
    explanation = explain_document(built, "q-zephyr", preview=False)
    assert [(b["batch"], b["action"], b["by"]) for b in explanation.batches] == \
        [(DROP, "added", "dagster"), (REVISE, "replaced", "cli")]
    assert explanation.as_dict()["batches"] == explanation.batches


def test_an_entity_and_a_fact_name_their_sources_and_the_batches_that_produced_them(built):
    [orbital] = explain_entity(built, "Orbital Corp")
    produced = {s["doc_id"]: (s["produced_by"] or {}).get("batch") for s in orbital.sources}
    assert produced == {"q-orbital": DROP, "q-zephyr": REVISE}
    [zephyr_source] = [s for s in orbital.sources if s["doc_id"] == "q-zephyr"]
    assert [b["action"] for b in zephyr_source["batches"]] == ["added", "replaced"]
    assert zephyr_source["produced_by"]["run_id"] == "cli-ingest-20261201T170501Z-0b0b0b0b"
    [founded] = [f for f in orbital.facts if f["predicate"] == "founded by"]
    fact = explain_fact(built, founded["fact_id"])
    assert (fact.subject, fact.predicate, fact.n_sources) == (founded["subject"], "founded by", 1)
    assert [e["doc_id"] for e in fact.evidence] == ["q-orbital"]
    assert [(s["doc_id"], s["produced_by"]["batch"], s["produced_by"]["run_id"]) for s in fact.sources] == \
        [("q-orbital", DROP, "run-a-0f0f")]
    with pytest.raises(ExplainError, match="no fact 'f-none'"):
        explain_fact(built, "f-none")


def test_an_unknown_batch_is_a_one_line_error(built):
    with pytest.raises(ExplainError) as err:
        explain_batch(built, "drop-nothing")
    assert "no batch 'drop-nothing' in the store" in err.value.line() and "\n" not in err.value.line()
    with pytest.raises(ExplainError, match="is not a batch id"):
        explain_batch(built, "Drop Nothing")


def test_run_links_only_for_dagster_runs_and_only_with_its_url(built, monkeypatch):
    monkeypatch.setenv("LIGHTFOOT_DAGSTER_URL", "https://dagster.example:3000/")
    dropped = explain_batch(built, DROP)
    assert dropped.commits[0]["run_url"] == "https://dagster.example:3000/runs/run-a-0f0f"
    assert dropped.runs[0]["run_url"] == "https://dagster.example:3000/runs/run-a-0f0f"
    rows = explain_document(built, "q-zephyr", preview=False).batches
    assert [b["run_url"] for b in rows] == ["https://dagster.example:3000/runs/run-a-0f0f", None]  # a CLI run: none
    monkeypatch.setenv("LIGHTFOOT_DAGSTER_URL", "dagster.example")
    with pytest.raises(SettingsError, match="LIGHTFOOT_DAGSTER_URL"):
        explain_batch(built, DROP)


def test_links_to_the_page(monkeypatch):
    assert batch_link(DROP) is None and document_link("q-zephyr") is None
    monkeypatch.setenv("LIGHTFOOT_PAGE_URL", "https://lightfoot.example/")
    assert batch_link(DROP) == "https://lightfoot.example/batch/drop-aaa111"
    assert document_link("drive:a b/c.pdf") == "https://lightfoot.example/#doc=drive%3Aa%20b%2Fc.pdf"
    monkeypatch.setenv("LIGHTFOOT_PAGE_URL", "https://lightfoot.example/?x=1")
    with pytest.raises(SettingsError, match="LIGHTFOOT_PAGE_URL"):
        batch_link(DROP)
