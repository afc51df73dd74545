"""Provenance in Dagster: one materialization per batch whose counts are the batch's rows and the
run's totals, deletions that never show as a materialization, and every blocking check evaluated
by each job."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from assets.resources import ExtractorResource

pytestmark = [pytest.mark.dagster]

PER_BATCH = ("passages", "extractions", "forms")  # their row counts are the tables'
ANSWER = {"entities": [{"name": "Oslo", "type": "location", "description": "a city"}],
          "facts": [["Oslo", "capital of", "Norway", "Oslo is the capital of Norway"]]}


def _blocking_checks(defs: dg.Definitions) -> set[dg.AssetCheckKey]:
    graph = defs.resolve_asset_graph()
    return {key for key in graph.asset_check_keys if graph.get(key).blocking}


def _run(lightfoot, request, blocking, job_name: str | None = None):
    result = lightfoot.run(request, job_name)
    assert result.success
    evaluated = {e.asset_check_key for e in result.get_asset_check_evaluations()}
    assert evaluated == blocking, f"not evaluated: {blocking - evaluated}"
    assert lightfoot.checks_passed(result)
    return result


def test_two_batches_and_a_deletion_through_dagster(lightfoot, twenty, sample_records, chat_server, monkeypatch):
    chat_server.script(lambda request: chat_server.Reply(content=json.dumps(ANSWER), usage=(400, 40)))
    monkeypatch.setenv("LIGHTFOOT_LLM_PRICE_IN", "0.10")
    monkeypatch.setenv("LIGHTFOOT_LLM_PRICE_OUT", "0.32")
    lightfoot.resources["extractor"] = ExtractorResource(mode="auto", base_url=chat_server.base_url,
                                                         model="test-model", api_key="sk-test")
    lightfoot.defs = dg.Definitions(
        assets=lightfoot.defs.assets, asset_checks=lightfoot.defs.asset_checks, jobs=lightfoot.defs.jobs,
        sensors=lightfoot.defs.sensors, schedules=lightfoot.defs.schedules, resources=lightfoot.resources,
    )
    blocking = _blocking_checks(lightfoot.defs)
    assert {k.name for k in blocking} == {"passages_accounted_for", "no_dangling_references", "matches_fresh_rebuild",
                                          "views_match_fresh_stores"}
    first, second = twenty[:6], twenty[6:12]
    asked = {d.doc_id for d in second[::2]}  # half the second batch has no recording: the model is asked
    runs = []
    for name, batch, records in (
        ("first", first, {d.doc_id: sample_records[d.doc_id] for d in first}),
        ("second", second, {d.doc_id: sample_records[d.doc_id] for d in second if d.doc_id not in asked}),
    ):
        lightfoot.drop_documents(name, batch, records)
        (request,) = lightfoot.tick("inbox_sensor").run_requests
        runs.append(_run(lightfoot, request, blocking))
    assert chat_server.count == len(asked)

    store = lightfoot.store()
    batches = []
    for result, docs in zip(runs, (first, second), strict=True):
        ids = {d.doc_id for d in docs}
        batch = lightfoot.instance.get_run_by_id(result.run_id).tags["dagster/partition"]
        batches.append(batch)
        for asset in PER_BATCH:
            (made,) = result.asset_materializations_for_node(asset)  # one per batch, whatever its size
            assert made.partition == batch, asset
            assert made.metadata["dagster/row_count"].value == store.read(asset).filter(dg_in(ids)).height, asset
            assert made.metadata["documents"].value == made.metadata["documents_added"].value == len(ids), asset
            assert made.metadata["batch"].value == batch
        tags = lightfoot.instance.get_run_by_id(result.run_id).tags
        (calls,) = result.asset_materializations_for_node("extraction_cache")
        assert calls.partition == batch
        for key in ("model_calls", "tokens_in", "tokens_out"):
            assert calls.metadata[key].value == int(tags[f"lightfoot/{key}"]), key
        # the run's tag keeps the cost to six decimals
        assert calls.metadata["cost_usd"].value == pytest.approx(float(tags["lightfoot/cost_usd"]), abs=1e-6)
        assert calls.metadata["model_calls"].value == len(ids & asked)
        assert calls.metadata["documents_asked"].value == len(ids & asked)
        (extractions,) = result.asset_materializations_for_node("extractions")
        assert extractions.metadata["documents_extracted"].value == len(ids)
        assert extractions.metadata["failed"].value == 0
    assert runs[0].asset_materializations_for_node("extraction_cache")[0].metadata["cost_usd"].value == 0
    assert runs[1].asset_materializations_for_node("extraction_cache")[0].metadata["cost_usd"].value == \
        pytest.approx(len(asked) * (400 * 0.10 + 40 * 0.32) / 1e6)
    graph = {e.event_specific_data.materialization.asset_key.to_user_string(): e.event_specific_data.materialization
             .metadata for e in runs[1].get_asset_materialization_events()}
    assert graph["entities"]["documents_added"].value == len(second)  # counts, never ids or names
    assert graph["entities"]["entities_added"].value >= 1 and graph["facts"]["facts_added"].value >= 1
    assert "changes" not in graph["entities"] and "changes" not in graph["facts"], "counts, never names"
    assert graph["facts"]["documents_removed"].value == 0

    deleted = [first[0].doc_id, second[-1].doc_id]
    lightfoot.drop_erasure_request("gone.json", deleted, erase=True, reason="asked by the author")
    (request,) = lightfoot.tick("erasure_sensor").run_requests
    graph_checks = {k for k in blocking if k.name != "passages_accounted_for"}  # a deletion adds no passage
    deletion = _run(lightfoot, request, graph_checks, "deletion_job")
    entities = next(e.event_specific_data.materialization.metadata for e in deletion.get_asset_materialization_events()
                    if e.event_specific_data.materialization.asset_key.to_user_string() == "entities")
    assert entities["documents_removed"].value == len(deleted)
    assert entities["documents_added"].value == 0
    assert not [m for m in deletion.get_asset_materialization_events()
                if m.event_specific_data.materialization.asset_key.to_user_string() in (*PER_BATCH, "extraction_cache")], \
        "a deletion is no materialization"
    assert sorted(lightfoot.partitions()) == sorted(batches), "each batch keeps live documents"
    for asset in (*PER_BATCH, "extraction_cache"):
        key = dg.AssetKey(asset)
        made = lightfoot.instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=1000).records
        assert sorted(r.partition_key for r in made) == sorted(batches)
        assert all(r.asset_materialization.metadata.get("status") is None for r in made)
        observed = lightfoot.instance.fetch_observations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=batches), limit=10).records
        assert {r.partition_key for r in observed} == set(batches)
        assert {r.asset_observation.metadata["status"].value for r in observed} == {"partly deleted"}
        assert {r.asset_observation.metadata["documents_deleted"].value for r in observed} == {1}
        assert {r.asset_observation.metadata["documents_live"].value for r in observed} == {5}


def dg_in(ids):
    import polars as pl

    return pl.col("doc_id").is_in(sorted(ids))
