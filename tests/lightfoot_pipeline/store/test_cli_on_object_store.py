"""The command line on an S3-compatible store: audit, ingest, snapshot, query and erase on ``s3://``.

Each command runs in its own process, configured only by the standard AWS environment
variables, as it would be in a deployment.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import polars as pl
import pytest

from lightfoot_pipeline.index.references import dangling_references
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import PASSAGES

CANARY = f"zyxcanary{uuid.uuid4().hex[:10]}"
CANARY_DOC = {
    "doc_id": "canary-doc",
    "title": "Lake Quillinder",
    "text": f"Lake Quillinder is a reservoir whose keeper's password is {CANARY}. "
            "It was filled in 1931 and feeds the town of Marrowby.",
}
CANARY_RECORD = {
    "doc_id": "canary-doc",
    "entities": [{"name": "Lake Quillinder", "type": None, "description": None},
                 {"name": f"Keeper {CANARY}", "type": None, "description": None},
                 {"name": "Marrowby", "type": None, "description": None}],
    "facts": [["Lake Quillinder", "feeds", "Marrowby"], [f"Keeper {CANARY}", "keeps", "Lake Quillinder"]],
}


def lightfoot(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lightfoot_pipeline.cli", *args], env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_audit_ingest_snapshot_and_erase_on_the_object_store(object_store, make_dataset, tmp_path):
    dataset = make_dataset("slice", 50)
    documents = [json.loads(line) for line in (dataset / "corpus.jsonl").read_text().splitlines()]
    uri, out = object_store.uri("index"), tmp_path / "audit.json"

    # Build the slice on the object store, delete a tenth, compare with a fresh build of the rest.
    audited = lightfoot(object_store.env, "audit-deletion", "--store", uri, "--dataset", str(dataset),
                        "--fraction", "0.1", "--seed", "0", "--embedder", "hashing", "--out", str(out))
    assert audited.returncode == 0, audited.stderr + audited.stdout
    result = json.loads(out.read_text())
    assert result["fingerprint_equal"] is True, result["tables_differing"]
    assert result["deleted_docs"] == 5 and result["model_calls"] == 0
    assert object_store.keys("index/_lightfoot/store_log/"), "the audited store lives on the object store"
    survivor = next(d for d in documents if d["doc_id"] not in result["deleted_doc_ids"])

    # Ingest one more document through the command line, then publish a serving snapshot; a
    # query process finds it through the snapshot pointer on the object store.
    ingested = lightfoot(object_store.env, "ingest", "--dataset", str(make_dataset("canary", 0, extra=(
        (CANARY_DOC, CANARY_RECORD),))), "--store", uri, "--embedder", "hashing", "--json")
    assert ingested.returncode == 0, ingested.stderr
    assert json.loads(ingested.stdout)["documents"] == 1
    published = lightfoot(object_store.env, "snapshot", "--store", uri, "--embedder", "hashing", "--json")
    assert published.returncode == 0, published.stderr
    snapshot_id = json.loads(published.stdout)["snapshot_id"]
    assert object_store.keys(f"index/snapshots/{snapshot_id}/")
    answered = lightfoot(object_store.env, "query", "Which reservoir feeds Marrowby?", "--store", uri,
                         "--embedder", "hashing", "--no-answer", "--no-rerank", "--json")
    assert answered.returncode == 0, answered.stderr
    answer = json.loads(answered.stdout)
    assert answer["snapshot"]["snapshot_id"] == snapshot_id
    assert CANARY_DOC["doc_id"] in [p["doc_id"] for p in answer["passages"]]
    # The canary reached the tables and the snapshot, so the search below is able to find it.
    assert object_store.objects_containing(CANARY, f"index/snapshots/{snapshot_id}/", first=True)
    assert object_store.objects_containing(CANARY, "index/tables/", first=True)

    erased = lightfoot(object_store.env, "delete", CANARY_DOC["doc_id"], "--erase", "--store", uri, "--json")
    assert erased.returncode == 0, erased.stderr
    report = json.loads(erased.stdout)
    assert report["deleted"] == [CANARY_DOC["doc_id"]] and report["model_calls"] == 0
    assert sum(report["erase"]["files_vacuumed"].values()) > 0

    assert object_store.objects_containing(CANARY, "index/") == []
    # The surviving documents' text is still there, and the store still answers.
    assert object_store.objects_containing(survivor["text"][:40], "index/tables/", first=True)
    status = lightfoot(object_store.env, "status", "--store", uri, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["counts"]["documents"] == 50 - 5

    # The dangling-references check scans the remote tables in record batches: a piece at a time.
    store = Store(uri)
    manifest = store.manifest()
    pieces = list(store.column_pieces(PASSAGES.name, manifest, ["chunk_id"], rows_per_piece=7))
    assert len(pieces) > 1 and all(piece.height <= 7 for piece in pieces)
    assert sorted(pl.concat(pieces)["chunk_id"]) == sorted(store.read_column(PASSAGES.name, manifest, "chunk_id"))
    assert set(dangling_references(store, rows_per_piece=7).values()) == {0}
