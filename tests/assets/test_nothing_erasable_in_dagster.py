"""Nothing erasable in the orchestrator: after erasures through every path (the erasure inbox,
``lightfoot delete --erase``, a synced file removed from its folder), no file under
DAGSTER_HOME — the SQLite run and event storage, compute logs, anything — holds a word of the
erased documents, nor does anything the runs wrote to stdout or stderr, and the store's own
erasure check passes as before.

Dagster's SQL event storage cannot remove one partition's events, so this holds only because
no title, passage text, entity name, fact or evidence quote ever enters metadata, tags, log lines
or failure messages: they carry ids, counts, digests and costs.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from assets.resources import ExtractorResource, InboxResource
from lightfoot_pipeline.cli import main as lightfoot_cli
from lightfoot_pipeline.ingest.dataset import Document

pytestmark = [pytest.mark.dagster]

CANARY = "Zorvathquell"


def holders(root: Path, needle: str = CANARY) -> list[str]:
    """Files under ``root`` whose bytes hold the needle, as written or case-folded or upper-cased
    (names are normalised), each with the number of times."""
    forms = {needle.encode(), needle.casefold().encode(), needle.upper().encode()}
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        times = sum(data.count(form) for form in forms)
        if times:
            found.append(f"{path.relative_to(root)} ({times})")
    return found


def canary_document(doc_id: str, town: str) -> tuple[Document, dict]:
    """A document with the canary in its title, its text, an entity name, a fact and the fact's
    evidence quote, and its recorded extraction."""
    quote = f"Brightwater works with {CANARY} Holdings"
    text = f"{quote} in {town}. The {CANARY} ledger lists every shipment since 1988."
    record = {
        "doc_id": doc_id,
        "entities": [{"name": f"{CANARY} Holdings", "type": "organization", "description": None},
                     {"name": "Brightwater", "type": "organization", "description": None},
                     {"name": town, "type": "location", "description": None}],
        "facts": [["Brightwater", "works with", f"{CANARY} Holdings", quote],
                  [f"{CANARY} Holdings", "based in", town]],
    }
    return Document(doc_id, f"The {CANARY} memo from {town}", text), record


def test_no_file_under_dagster_home_holds_erased_content(
    lightfoot, twenty, sample_records, chat_server, document_files, capfd
):
    harness = lightfoot
    home = Path(harness.instance.root_directory)
    others = twenty[:6]
    memo, memo_record = canary_document("memo-7", "Oslo")
    note, note_record = canary_document("note-3", "Bergen")
    records = {**sample_records, memo.doc_id: memo_record, note.doc_id: note_record}

    # A batch through the inbox, its extractions recorded.
    harness.ingest_through_the_inbox([*others, memo, note], records)
    assert {memo.doc_id, note.doc_id} <= set(harness.stored_ids())
    (drop,) = harness.partitions()

    # A folder synced through sync_sensor / source_files; the model (a loopback server) names the canary.
    folder = harness.root / "shared"
    folder.mkdir()
    (folder / "handbook.md").write_bytes(document_files.markdown(
        f"{CANARY} handbook", [("Shipping", [f"Brightwater ships through {CANARY} Holdings every spring."])]))
    chat_server.queue(chat_server.Reply(content=json.dumps({
        "entities": [{"name": f"{CANARY} Holdings", "type": "organization", "description": ""},
                     {"name": "Brightwater", "type": "organization", "description": ""}],
        "facts": [["Brightwater", "ships through", f"{CANARY} Holdings",
                   f"Brightwater ships through {CANARY} Holdings"]]})))
    _use(harness, inbox=InboxResource(
        documents=str(harness.document_inbox), erasure_requests=str(harness.erasure_inbox),
        sync_source=str(folder), sync_erase=True),
        extractor=ExtractorResource(mode="auto", base_url=chat_server.base_url, model="test-model",
                                    api_key="sk-test"))
    (request,) = harness.tick("sync_sensor").run_requests
    assert harness.run(request, "sync_job").success
    assert "shared:handbook.md" in harness.stored_ids()
    synced = request.partition_key
    assert sorted(harness.partitions()) == sorted([drop, synced])
    assert len(chat_server.requests) == 1, "the synced file's passage went to the model"
    assert holders(harness.root / "store"), "the store holds the canary before the erasures (or the search is blind)"

    # Deleted on the command line, against the same store; the Dagster layer records it in its batch.
    assert lightfoot_cli(["delete", note.doc_id, "--erase", "--store", harness.store_uri]) == 0
    recorded = harness.tick("outside_deletions_sensor")
    assert {(e.partition, e.metadata["status"].value) for e in recorded.asset_events} == {(drop, "partly deleted")}

    # The synced file removed from its folder: the next sync deletes and erases its document.
    (folder / "handbook.md").unlink()
    (request,) = harness.tick("sync_sensor").run_requests
    assert harness.run(request, "sync_job").success
    assert "shared:handbook.md" not in harness.stored_ids()
    assert synced not in harness.partitions(), "the synced batch held only the handbook"
    erased = harness.store().read("tombstones").filter(pl.col("doc_id") == "shared:handbook.md")
    assert erased.get_column("erased_at").null_count() == 0, "sync_erase: the sync run erases the removed file"

    # Erased through the erasure inbox.
    harness.drop_erasure_request("request-1.json", [memo.doc_id], reason="data subject request")
    (request,) = harness.tick("erasure_sensor").run_requests
    deletion = harness.run(request, "deletion_job")
    assert deletion.success
    assert harness.checks_passed(deletion)
    harness.tick("erasure_sensor")
    harness.tick("outside_deletions_sensor")
    assert drop in harness.partitions(), "the drop's batch keeps its six other documents"
    assert not {memo.doc_id, note.doc_id, "shared:handbook.md"} & set(harness.stored_ids())

    # The store's own check, as before: no file under its root holds the canary.
    assert holders(harness.root / "store") == []
    # Nor does any file under DAGSTER_HOME, nor anything the runs printed or logged.
    assert harness.instance.get_runs_count() >= 4
    assert list(home.rglob("*.db")), "the instance keeps its storage in SQLite files under DAGSTER_HOME"
    assert list(home.rglob("compute_logs/*.err")), "and the steps' captured stdout and stderr"
    assert holders(home) == []
    printed = capfd.readouterr()
    assert CANARY.casefold() not in (printed.out + printed.err).casefold()
    # Ids and counts remain, as the audit trail: the batches that held the erased documents were
    # observed as tombstoned, or partly deleted.
    def observed(batch: str) -> list:
        return harness.instance.fetch_observations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("passages"), asset_partitions=[batch]), limit=5).records

    latest = observed(drop)[0].asset_observation.metadata
    assert latest["status"].value == "partly deleted" and latest["documents_deleted"].value == 2
    assert observed(synced)[0].asset_observation.metadata["status"].value == "tombstoned"


def _use(harness, **resources) -> None:
    """Rebind the harness's definitions to other resources."""
    harness.resources.update(resources)
    defs = harness.defs
    harness.defs = dg.Definitions(assets=defs.assets, asset_checks=defs.asset_checks, jobs=defs.jobs,
                                  sensors=defs.sensors, schedules=defs.schedules, resources=harness.resources)
