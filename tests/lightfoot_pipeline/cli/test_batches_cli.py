"""Every command-line store write is an ingestion batch: the commands print their batch and run, the
store log and the batch log record them, and ``lightfoot explain batch`` (with explain doc, entity
and fact) says what each batch did and where its documents stand now."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from lightfoot_pipeline.cli import main
from lightfoot_pipeline.store.batches import batch_log
from lightfoot_pipeline.store.store import Store

DATA = Path(__file__).parents[1] / "data" / "query-corpus"


@pytest.fixture(autouse=True)
def no_links(monkeypatch):
    for name in ("LIGHTFOOT_PAGE_URL", "LIGHTFOOT_DAGSTER_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY",
                 "LIGHTFOOT_LLM_BASE_URL", "LIGHTFOOT_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def run_json(capsys, *args: str) -> dict:
    assert main([*args, "--json"]) in (0, 1)
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_ingest_replace_and_delete_are_batches_explain_batch_follows(tmp_path, capsys):
    dataset = tmp_path / "dataset"
    shutil.copytree(DATA, dataset)
    store = str(tmp_path / "store")
    ingest = ["ingest", "--dataset", str(dataset), "--store", store, "--embedder", "hashing:32"]

    first = run_json(capsys, *ingest)["batch"]
    assert first["batch_id"].startswith("cli-ingest-") and first["run_id"].startswith("cli-ingest-")
    assert first["commits"] == [1]
    corpus = dataset / "corpus.jsonl"
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    rows[0]["text"] += " It was revised."  # q-zephyr
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(ingest) == 0
    out = capsys.readouterr().out
    [line] = [x for x in out.splitlines() if x.startswith("  batch cli-ingest-")]
    second = line.split()[1]
    assert f"see `lightfoot explain batch {second}`" in line and second != first["batch_id"]
    deleted = run_json(capsys, "delete", "q-orbital", "--erase", "--store", store)["batch"]
    assert deleted["batch_id"].startswith("cli-delete-") and deleted["commits"] == [3, 4], "the delete, then the erasure"

    # Each commit's log details carry its batch and run; the batch log says what each did.
    for row in Store(store).history().iter_rows(named=True):
        details = json.loads(row["details"])
        assert details["by"] == "cli" and details["batch"].startswith("cli-") and details["run_id"].startswith("cli-")
    log = batch_log(Store(store))
    actions = {b: dict(log.filter(pl.col("batch") == b).select("doc_id", "action").iter_rows())
               for b in (first["batch_id"], second, deleted["batch_id"])}
    assert set(actions[first["batch_id"]].values()) == {"added"} and len(actions[first["batch_id"]]) == 12
    assert actions[second]["q-zephyr"] == "replaced" and list(actions[second].values()).count("unchanged") == 11
    assert actions[deleted["batch_id"]] == {"q-orbital": "deleted"}

    explained = run_json(capsys, "explain", "batch", first["batch_id"], "--store", store)
    now = {d["doc_id"]: (d["status"], d["status_batch"]) for d in explained["documents"]}
    assert now["q-zephyr"] == ("replaced", second) and now["q-orbital"] == ("erased", deleted["batch_id"])
    assert now["q-riga"] == ("live", None)
    assert "title" not in next(d for d in explained["documents"] if d["doc_id"] == "q-orbital")
    assert [(c["seq"], c["operation"], c["by"], c["run_id"]) for c in explained["commits"]] == \
        [(1, "ingest", "cli", first["run_id"])]
    assert main(["explain", "batch", second, "--store", store]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"batch {second}: 12 documents (added 0, replaced 1, unchanged 11, deleted 0) in 1 store "
                          "commit;")
    assert "  q-zephyr 'Zephyr phone': replaced in commit 2; now live\n" in out
    assert f"  q-riga 'Riga': unchanged in commit 2; now unchanged (batch {first['batch_id']})\n" in out
    assert main(["explain", "batch", deleted["batch_id"], "--store", store]) == 0
    out = capsys.readouterr().out
    assert "  q-orbital: deleted in commit 3; now erased\n" in out and "Orbital Corp" not in out
    assert "commit 3 delete at" in out and "commit 4 erase at" in out

    assert main(["explain", "doc", "q-zephyr", "--store", store, "--no-preview"]) == 0
    out = capsys.readouterr().out
    assert f"  added by batch {first['batch_id']} in store commit 1, run {first['run_id']}\n" in out
    assert f"  replaced by batch {second} in store commit 2" in out
    assert main(["explain", "entity", "Zephyr phone", "--store", store]) == 0
    assert f"    q-zephyr: replaced by batch {second} (store commit 2" in capsys.readouterr().out
    [entity] = run_json(capsys, "explain", "entity", "Zephyr phone", "--store", store)
    fact = entity["facts"][0]
    assert main(["explain", "fact", fact["fact_id"], "--store", store]) == 0
    assert f"  q-zephyr: replaced by batch {second}" in capsys.readouterr().out

    assert main(["explain", "batch", "cli-ingest-nothing", "--store", store]) == 2
    assert capsys.readouterr().err.startswith("error: no batch 'cli-ingest-nothing' in the store at ")


@pytest.mark.slow
def test_a_command_that_commits_nothing_names_no_batch_and_a_migration_keeps_the_log(tmp_path, capsys):
    store = str(tmp_path / "store")
    assert main(["ingest", "--dataset", str(DATA), "--store", store, "--embedder", "hashing:32"]) == 0
    capsys.readouterr()
    vacuumed = run_json(capsys, "vacuum", "--store", store)["batch"]
    assert vacuumed["batch_id"] is None and vacuumed["commits"] == [], "nothing was owed: no commit"
    before = batch_log(Store(store)).sort("doc_id", "seq")
    migrated = run_json(capsys, "migrate", "--store", store, "--buckets", "4")["batch"]
    assert migrated["batch_id"].startswith("cli-migrate-") and migrated["commits"] == [2]
    assert batch_log(Store(store)).sort("doc_id", "seq").equals(before) and before.height == 12
    assert run_json(capsys, "explain", "batch", migrated["batch_id"], "--store", store)["commits"][0]["operation"] \
        == "migrate"


@pytest.mark.slow
def test_a_sync_and_its_readmission_are_batches_with_the_cost_ledgers_run(tmp_path, chat_server, monkeypatch,
                                                                          capsys, document_files):
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_bytes(document_files.markdown("A", [("Start", ["Open the lid."])]))
    (folder / "b.md").write_bytes(document_files.markdown("B", [("Start", ["Close the lid."])]))
    store = str(tmp_path / "store")
    sync = ["sync", "--store", store, "--source", str(folder), "--embedder", "hashing"]
    first = run_json(capsys, *sync)
    synced = first["batch"]
    assert synced["batch_id"].startswith("cli-sync-") and synced["commits"] and first["model_calls"] == 2
    cost = run_json(capsys, "cost", "--store", store, "--run", synced["run_id"])
    assert cost["totals"]["calls"] == 2, "the batch's run is the cost ledger's run of its model calls"
    deleted = run_json(capsys, "delete", "docs:a.md", "--store", store)["batch"]
    readmitted = run_json(capsys, *sync, "--readmit", "a.md")
    batch = readmitted["batch"]
    assert readmitted["readmitted"] == ["docs:a.md"] and batch["batch_id"].startswith("cli-sync-")
    explained = run_json(capsys, "explain", "batch", deleted["batch_id"], "--store", store)
    assert [(d["doc_id"], d["status"], d["status_batch"]) for d in explained["documents"]] == \
        [("docs:a.md", "readded", batch["batch_id"])]
    assert main([*sync, "--json"]) == 0  # nothing changed: no commit, no batch
    assert json.loads(capsys.readouterr().out)["batch"]["batch_id"] is None
