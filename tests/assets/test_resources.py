"""Resources: recorded extractions where a document has one, a real OpenAI-protocol endpoint for
the rest (a server on loopback), and where the inboxes are."""

from __future__ import annotations

import json

import polars as pl
import pytest

from assets.resources import ExtractorResource, InboxResource

ANSWER = {"entities": [{"name": "Oslo", "type": "location", "description": "a city"}],
          "facts": [["Oslo", "capital of", "Norway", "Oslo is the capital of Norway"]]}


@pytest.mark.dagster
def test_auto_mode_replays_recordings_and_asks_the_model_for_the_rest(
    lightfoot, twenty, sample_records, chat_server, monkeypatch
):
    chat_server.script(lambda request: chat_server.Reply(content=json.dumps(ANSWER), usage=(500, 50)))
    url = chat_server.base_url
    monkeypatch.setenv("LIGHTFOOT_LLM_PRICE_IN", "0.10")  # USD per million tokens
    monkeypatch.setenv("LIGHTFOOT_LLM_PRICE_OUT", "0.32")
    lightfoot.resources["extractor"] = ExtractorResource(
        mode="auto", base_url=url, model="test-model", api_key="sk-test-secret"
    )
    lightfoot.defs = lightfoot.defs.__class__(
        assets=lightfoot.defs.assets, asset_checks=lightfoot.defs.asset_checks, jobs=lightfoot.defs.jobs,
        sensors=lightfoot.defs.sensors, schedules=lightfoot.defs.schedules, resources=lightfoot.resources,
    )
    recorded, asked = twenty[0], twenty[1]
    lightfoot.drop_documents("mixed", [recorded, asked], {recorded.doc_id: sample_records[recorded.doc_id]})
    result = lightfoot.run(lightfoot.tick("inbox_sensor").run_requests[0])
    assert result.success
    (request,) = chat_server.requests
    assert request.path == "/v1/chat/completions"
    assert {k.lower(): v for k, v in request.headers.items()}["authorization"] == "Bearer sk-test-secret"
    assert asked.text[:40] in request.user_text
    extractions = lightfoot.store().read("extractions").sort("doc_id")
    assert extractions.get_column("status").to_list() == ["ok", "ok"]
    by_doc = dict(zip(extractions.get_column("doc_id").to_list(), extractions.get_column("extractor").to_list(), strict=True))
    assert by_doc[recorded.doc_id].startswith("replay:") and by_doc[asked.doc_id] == "openai:test-model"
    (cache,) = result.asset_materializations_for_node("extraction_cache")  # one for the batch
    metadata = cache.metadata
    assert cache.partition == result.dagster_run.tags["dagster/partition"]
    assert metadata["documents"].value == 2 and metadata["documents_asked"].value == 1  # the other is replayed
    assert metadata["model_calls"].value == 1
    assert metadata["tokens_in"].value == 500 and metadata["tokens_out"].value == 50
    assert metadata["cost_usd"].value == pytest.approx((500 * 0.10 + 50 * 0.32) / 1e6, abs=1e-6)
    tags = lightfoot.instance.get_run_by_id(result.run_id).tags  # the run's totals, on its run page
    assert (tags["lightfoot/model_calls"], tags["lightfoot/tokens_in"], tags["lightfoot/tokens_out"]) == ("1", "500", "50")
    forms = lightfoot.store().read("forms").filter(pl.col("doc_id") == asked.doc_id)
    assert "oslo" in forms.get_column("name").to_list()


def test_a_bad_extractor_mode_fails_the_step():
    import dagster as dg

    with pytest.raises(dg.Failure, match="auto, replay, openai or openai-batch"):
        ExtractorResource(mode="gpt").choice()


def test_the_inbox_resource_s_own_folders_come_before_the_defaults(tmp_path):
    from lightfoot_pipeline.store.store import Store

    store = Store(str(tmp_path / "store"))
    inbox = InboxResource(documents=str(tmp_path / "drops"), erasure_requests=str(tmp_path / "requests"))
    assert inbox.document_inbox(store).uri == str(tmp_path / "drops")
    assert inbox.erasure_inbox(store).uri == str(tmp_path / "requests")
