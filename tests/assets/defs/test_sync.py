"""The sync_sensor and the source_files asset: a folder of files followed by Dagster."""

from __future__ import annotations

import json

import pytest

from assets.resources import ExtractorResource, InboxResource
from lightfoot_pipeline.ingest.extraction.outcome import reason_kind

pytestmark = [pytest.mark.dagster]


def test_the_sensor_asks_for_a_sync_when_the_folder_changes_and_the_asset_reports_failures(
    lightfoot, chat_server, document_files, monkeypatch
):
    monkeypatch.setenv("LIGHTFOOT_LLM_BACKOFF_S", "0.01")
    chat_server.queue(chat_server.Reply(content=json.dumps(
        {"entities": [{"name": "Oslo", "type": "location", "description": ""}], "facts": []})))
    folder = lightfoot.root / "shared-drive"
    assert lightfoot.tick("sync_sensor").skip_message.startswith("no source to follow")

    folder.mkdir()
    (folder / "guide.md").write_bytes(document_files.markdown("Guide", [("Start", ["Open the lid in Oslo."])]))
    (folder / "broken.docx").write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    lightfoot.resources["inbox"] = InboxResource(sync_source=str(folder), sync_erase=True)
    lightfoot.resources["extractor"] = ExtractorResource(mode="openai", base_url=chat_server.base_url,
                                                         model="test-model", api_key="sk-test")
    lightfoot.defs = lightfoot.defs.__class__(
        assets=lightfoot.defs.assets, asset_checks=lightfoot.defs.asset_checks, jobs=lightfoot.defs.jobs,
        sensors=lightfoot.defs.sensors, schedules=lightfoot.defs.schedules, resources=lightfoot.resources,
    )
    tick = lightfoot.tick("sync_sensor")
    assert len(tick.run_requests) == 1 and tick.run_requests[0].run_key.startswith("sync-")
    assert lightfoot.tick("sync_sensor").run_requests[0].run_key == tick.run_requests[0].run_key
    batch = tick.run_requests[0].partition_key
    assert batch.startswith("sync-") and batch in lightfoot.partitions()
    result = lightfoot.run(tick.run_requests[0], job_name="sync_job")
    assert result.success
    made = {m.asset_key.to_user_string(): m for m in
            (e.event_specific_data.materialization for e in result.get_asset_materialization_events())}
    assert {"source_files", "passages", "extraction_cache", "extractions", "forms", "facts", "serving_snapshot"} <= set(made)
    assert all(made[a].partition == batch for a in ("passages", "extraction_cache", "extractions", "forms"))
    # source_files is a sync run's, not a partition of every batch (a drop's showed as missing there):
    # its materialization names its batch.
    assert made["source_files"].partition is None
    files = made["source_files"].metadata
    assert (files["files"].value, files["files_new"].value, files["files_failed"].value) == (2, 2, 1)
    assert files["batch"].value == batch and files["documents_added"].value == 1
    assert files["model_calls"].value == 0, "the sync stores the files; the batch's extraction steps extract them"
    assert made["extraction_cache"].metadata["model_calls"].value == 1 and chat_server.count == 1
    records = {r["doc_id"]: r for r in lightfoot.store().read("source_files").iter_rows(named=True)}
    reason = records["shared-drive:broken.docx"]["reason"]
    assert reason.startswith("truncated or corrupt Word document")
    assert files["failure_kinds"].value == {reason_kind(reason): 1}, "kinds of failure, never the reason's text"
    assert lightfoot.stored_ids() == ["shared-drive:guide.md"]
    assert "is in sync: 2 files" in lightfoot.tick("sync_sensor").skip_message

    (folder / "guide.md").unlink()
    tick = lightfoot.tick("sync_sensor")
    removal = lightfoot.run(tick.run_requests[0], job_name="sync_job")
    assert removal.success
    assert lightfoot.stored_ids() == []
    # The first batch's only document is deleted: the batch is tombstoned and its partition goes.
    observed = [e.event_specific_data.asset_observation for e in removal.get_asset_observation_events()]
    assert {o.metadata["status"].value for o in observed if o.partition == batch} == {"tombstoned"}
    assert batch not in lightfoot.partitions()
    assert "is in sync: 1 files" in lightfoot.tick("sync_sensor").skip_message
