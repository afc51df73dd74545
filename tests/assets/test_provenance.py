"""Provenance in Dagster: per-document metadata that sums to the run's totals, deletions that never
show as a materialization, and every blocking check evaluated by each job."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from assets.resources import ExtractorResource

pytestmark = [pytest.mark.dagster]

PER_DOCUMENT = ("passages", "extractions", "forms")  # their row counts are the tables'
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
    assert all(e.passed for e in result.get_asset_check_evaluations())
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
    assert {k.name for k in blocking} == {"passages_accounted_for", "no_dangling_references", "matches_fresh_rebuild"}
    first, second = twenty[:6], twenty[6:12]
    asked = {d.doc_id for d in second[::2]}  # half the second batch has no recording: the model is asked
    runs = []
    for name, batch, records in (
        ("first", first, {d.doc_id: sample_records[d.doc_id] for d in first}),
        ("second", second, {d.doc_id: sample_records[d.doc_id] for d in second if d.doc_id not in asked}),
    ):
        lightfoot.drop_documents(name, batch, records)
        (request,) = lightfoot.tick("document_inbox").run_requests
        runs.append(_run(lightfoot, request, blocking))
    assert chat_server.count == len(asked)

    store = lightfoot.store()
    for result, batch in zip(runs, (first, second), strict=True):
        ids = {d.doc_id for d in batch}
        for asset in PER_DOCUMENT:
            partitions = {m.partition: m.metadata for m in result.asset_materializations_for_node(asset)}
            assert set(partitions) == ids
            rows = sum(m["dagster/row_count"].value for m in partitions.values())
            table = {"passages": "passages", "extractions": "extractions", "forms": "forms"}[asset]
            assert rows == store.read(table).filter(dg_in(ids)).height
        passages = {m.partition: m.metadata for m in result.asset_materializations_for_node("passages")}
        assert sum(m["dagster/row_count"].value for m in passages.values()) == \
            next(iter(passages.values()))["run_passages"].value
        calls = {m.partition: m.metadata for m in result.asset_materializations_for_node("extraction_cache")}
        assert set(calls) == ids
        any_partition = next(iter(calls.values()))
        for key in ("model_calls", "tokens_in", "tokens_out", "cost_usd"):
            total = sum(m[key].value for m in calls.values())
            assert total == pytest.approx(any_partition[f"run_{key}"].value, abs=1e-8), key
        for doc_id, metadata in calls.items():
            assert metadata["model_calls"].value == (1 if doc_id in asked else 0)
        extractions = {m.partition: m.metadata for m in result.asset_materializations_for_node("extractions")}
        for metadata in extractions.values():
            assert metadata["status"].value == "extracted" and metadata["entities"].value >= 1
    assert next(iter({m.partition: m.metadata for m in runs[1].asset_materializations_for_node("extraction_cache")}
                     .values()))["run_cost_usd"].value == pytest.approx(len(asked) * (400 * 0.10 + 40 * 0.32) / 1e6)
    graph = {e.event_specific_data.materialization.asset_key.to_user_string(): e.event_specific_data.materialization
             .metadata for e in runs[1].get_asset_materialization_events()}
    assert graph["entities"]["documents_added"].value == sorted(d.doc_id for d in second)
    assert graph["entities"]["entities_added"].value >= 1 and graph["facts"]["facts_added"].value >= 1
    assert "changes" not in graph["entities"] and "changes" not in graph["facts"], "counts, never names"
    assert graph["facts"]["documents_removed"].value == []

    deleted = [first[0].doc_id, second[-1].doc_id]
    lightfoot.drop_erasure_request("gone.json", deleted, erase=True, reason="asked by the author")
    (request,) = lightfoot.tick("erasure_inbox").run_requests
    deletion = _run(lightfoot, request, blocking, "document_deletion")
    entities = next(e.event_specific_data.materialization.metadata for e in deletion.get_asset_materialization_events()
                    if e.event_specific_data.materialization.asset_key.to_user_string() == "entities")
    assert entities["documents_removed"].value == sorted(deleted)
    assert entities["documents_added"].value == []
    lightfoot.tick("deleted_partitions")
    assert not set(deleted) & set(lightfoot.partitions())
    for asset in (*PER_DOCUMENT, "extraction_cache"):
        key = dg.AssetKey(asset)
        latest = lightfoot.instance.get_latest_materialization_event(key)
        assert latest.dagster_event.partition not in deleted
        assert "status" not in latest.asset_materialization.metadata or \
            latest.asset_materialization.metadata["status"].value != "tombstoned"
        made = lightfoot.instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=1000).records
        assert all(r.asset_materialization.metadata.get("status") is None
                   or r.asset_materialization.metadata["status"].value != "tombstoned" for r in made)
        observed = lightfoot.instance.fetch_observations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=deleted), limit=10).records
        assert {r.partition_key for r in observed} == set(deleted)
        assert {r.asset_observation.metadata["status"].value for r in observed} == {"tombstoned"}


def dg_in(ids):
    import polars as pl

    return pl.col("doc_id").is_in(sorted(ids))


def test_per_document_metadata_lists_the_partition_keys_once_a_run(monkeypatch):
    """Dagster checks each document's key against the run's range by listing every partition key:
    a run over a range lists them once, not once per document, and each partition gets its own."""
    from assets.provenance import add_document_metadata

    letters = dg.DynamicPartitionsDefinition(name="letters")
    listings, during = [], []

    @dg.asset(partitions_def=letters, backfill_policy=dg.BackfillPolicy.single_run())
    def per_letter(context) -> None:
        read = context.instance.get_dynamic_partitions
        per_document = {key: {"letter": key} for key in context.partition_keys}
        before = len(listings)
        add_document_metadata(context, per_document)
        during.append(len(listings) - before)
        assert context.instance.get_dynamic_partitions == read  # the instance is left as it was

    counted = dg.DagsterInstance.get_dynamic_partitions

    def counting(self, partitions_def_name):
        listings.append(partitions_def_name)
        return counted(self, partitions_def_name)

    monkeypatch.setattr(dg.DagsterInstance, "get_dynamic_partitions", counting)
    keys = [f"k{i:03d}" for i in range(40)]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("letters", keys)
        result = dg.materialize([per_letter], instance=instance, tags={
            "dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
    assert result.success
    assert during == [1]  # one listing for the 40 documents
    got = {m.partition: m.metadata["letter"].value for m in result.asset_materializations_for_node("per_letter")}
    assert got == {key: key for key in keys}
