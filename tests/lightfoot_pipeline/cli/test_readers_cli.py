"""lightfoot readers: set who may read documents, print what changed, refuse what it cannot do."""

from __future__ import annotations

import json
import re

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.cli import main
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.provenance.documents import explain_document
from lightfoot_pipeline.store.store import Store


@pytest.fixture
def built(store, hashing_embedder):
    documents = [Document(f"doc-{i}", f"Title {i}", f"Harbor Bridge in passage {i}.") for i in range(3)]
    records = {d.doc_id: {"entities": [{"name": "Harbor Bridge", "type": "place", "description": None}],
                          "facts": []} for d in documents}
    operations.ingest(store, documents, ReplayExtractor(records), hashing_embedder)
    return store


def test_readers_sets_groups_and_prints_each_change(built, capsys):
    assert main(["readers", "doc-0", "doc-1", "--groups", "legal,HR", "--store", built.uri]) == 0
    out = capsys.readouterr().out
    assert "readers of 2 documents changed, 0 unchanged" in out
    assert "doc-0: public -> hr, legal" in out and "batch cli-readers-" in out
    assert "a running service stops serving it at its next poll of the store log" in out  # a narrowing
    assert "wider readers" not in out
    assert main(["readers", "doc-0", "doc-2", "--nobody", "--store", built.uri, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["changed"] == {"doc-0": {"before": ["hr", "legal"], "after": []},
                                 "doc-2": {"before": ["public"], "after": []}}
    assert report["model_calls"] == 0 and report["batch"]["batch_id"].startswith("cli-readers-")
    assert main(["readers", "doc-2", "--nobody", "--store", built.uri]) == 0
    assert "doc-2: nobody (the operator alone) already" in capsys.readouterr().out
    assert main(["readers", "doc-0", "--public", "--store", built.uri]) == 0
    out = capsys.readouterr().out
    assert "wider readers reach a running service with the next export" in out and "stops serving" not in out
    assert main(["status", "--store", built.uri]) == 0  # no snapshot was exported
    assert "no snapshot published (`lightfoot snapshot` exports one)" in capsys.readouterr().out
    assert explain_document(Store(built.uri), "doc-0", preview=False).document["readers"] == ["public"]
    assert main(["explain", "doc", "doc-2", "--no-preview", "--store", built.uri]) == 0
    assert "readers: nobody (the operator alone)" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["readers", "doc-0", "no-such-doc", "--groups", "legal"], "not live in .*'no-such-doc'"),
    (["readers", "doc-0", "--groups", "Legal Team"], "'Legal Team' is not a group name"),
])
def test_readers_refuses_unknown_documents_and_bad_groups_and_changes_nothing(built, capsys, argv, message):
    seq = built.manifest().seq
    assert main([*argv, "--store", built.uri]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert Store(built.uri).manifest().seq == seq


def test_readers_needs_exactly_one_of_groups_public_nobody(built, capsys):
    with pytest.raises(SystemExit):
        main(["readers", "doc-0", "--store", built.uri])
    with pytest.raises(SystemExit):
        main(["readers", "doc-0", "--public", "--nobody", "--store", built.uri])
