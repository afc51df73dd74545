"""The source_sync sensor and the source_files asset: a folder of files followed by Dagster."""

from __future__ import annotations

import json

import pytest

from assets.resources import ExtractorResource, InboxResource

pytestmark = [pytest.mark.dagster]


def test_the_sensor_asks_for_a_sync_when_the_folder_changes_and_the_asset_reports_failures(
    lightfoot, chat_server, document_files, monkeypatch
):
    monkeypatch.setenv("LIGHTFOOT_LLM_BACKOFF_S", "0.01")
    chat_server.queue(chat_server.Reply(content=json.dumps(
        {"entities": [{"name": "Oslo", "type": "location", "description": ""}], "facts": []})))
    folder = lightfoot.root / "shared-drive"
    assert lightfoot.tick("source_sync").skip_message.startswith("no source to follow")

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
    tick = lightfoot.tick("source_sync")
    assert len(tick.run_requests) == 1 and tick.run_requests[0].run_key.startswith("sync-")
    assert lightfoot.tick("source_sync").run_requests[0].run_key == tick.run_requests[0].run_key
    result = lightfoot.run(tick.run_requests[0], job_name="source_sync_job")
    assert result.success
    metadata = result.get_asset_materialization_events()[0].event_specific_data.materialization.metadata
    assert metadata["new"].value == ["shared-drive:broken.docx", "shared-drive:guide.md"] and metadata["model_calls"].value == 1
    assert metadata["failed"].value[0]["doc_id"] == "shared-drive:broken.docx"
    assert metadata["failed"].value[0]["reason"].startswith("truncated or corrupt Word document")
    assert lightfoot.stored_ids() == ["shared-drive:guide.md"]
    assert "is in sync: 2 files" in lightfoot.tick("source_sync").skip_message

    (folder / "guide.md").unlink()
    tick = lightfoot.tick("source_sync")
    assert lightfoot.run(tick.run_requests[0], job_name="source_sync_job").success
    assert lightfoot.stored_ids() == []
    assert "is in sync: 1 files" in lightfoot.tick("source_sync").skip_message
