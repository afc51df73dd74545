"""Extraction through a provider's Batch API, driven by Dagster: an inbox drop's run submits its
passages, the sensor sees the batch end, one run collects it and exports the snapshot
(tests/batch_server.py speaks /v1/files and /v1/batches on loopback)."""

from __future__ import annotations

import json

import dagster as dg
import polars as pl
import pytest

from lightfoot_pipeline.ingest.extraction.batch_record import BatchRecord
from lightfoot_pipeline.snapshot.format import latest_snapshot
from lightfoot_pipeline.store import ledger

pytestmark = [pytest.mark.dagster]

MODEL = "gpt-4o-mini"


def answer(line: dict) -> str:
    user = "\n".join(m["content"] for m in line["body"]["messages"] if m["role"] == "user")
    title = user.split("<passage>\n", 1)[1].split("\n", 1)[0]
    return json.dumps({"entities": [{"name": title, "type": "concept", "description": "the topic"}], "facts": []})


@pytest.fixture
def batched(lightfoot, batch_server):
    """The harness with the extractor in openai-batch mode against the loopback provider."""
    from assets.resources import ExtractorResource

    batch_server.answer = answer
    lightfoot.resources["extractor"] = ExtractorResource(mode="openai-batch", base_url=batch_server.base_url,
                                                         api_key="sk-dagster-batch", model=MODEL)
    old = lightfoot.defs
    lightfoot.defs = dg.Definitions(assets=old.assets, asset_checks=old.asset_checks, jobs=old.jobs,
                                    sensors=old.sensors, schedules=old.schedules, resources=lightfoot.resources)
    return lightfoot


@pytest.mark.slow  # the whole bundled sample through two runs
def test_the_sample_is_submitted_then_the_sensor_collects_it_and_the_snapshot_follows(batched, batch_server,
                                                                                       sample_documents):
    documents = sample_documents  # the whole bundled sample
    batched.drop_documents("batch-1", documents, {})  # no recorded extractions: every passage goes to the model
    tick = batched.tick("inbox_sensor")
    ingestion = batched.run(tick.run_requests[0])
    assert ingestion.success
    store = batched.store()
    awaiting = store.read("extractions")
    assert awaiting.height > 0 and awaiting.get_column("reason").str.starts_with("awaiting extraction").all()
    (cache_step,) = [e.event_specific_data.materialization for e in ingestion.get_asset_materialization_events()
                     if e.event_specific_data.materialization.asset_key.to_user_string() == "extraction_cache"]
    assert cache_step.metadata["awaiting_batch"].value == awaiting.height
    assert len(batch_server.batches) == 1  # one file holds them all (a batch takes 50,000 requests)

    # The sensor looks, and asks for nothing until the batch has ended.
    for state in ("in_progress", "finalizing"):
        assert batched.tick("extraction_batches_sensor").run_requests == []
        assert [s.state for s in BatchRecord(store).summaries().values()] == [state]
    tick = batched.tick("extraction_batches_sensor")
    assert len(tick.run_requests) == 1
    collection = batched.run(tick.run_requests[0])
    assert collection.success
    made = {e.event_specific_data.materialization.asset_key.to_user_string(): e.event_specific_data.materialization
            for e in collection.get_asset_materialization_events()}
    assert set(made) == {"extraction_batches", "serving_snapshot"}
    assert made["extraction_batches"].metadata["answered"].value == awaiting.height
    assert made["extraction_batches"].metadata["files_deleted_at_provider"].value == 2
    shown = " ".join(str(v.value) for v in made["extraction_batches"].metadata.values())
    assert not [d for d in documents if d.title in shown]
    extracted = store.read("extractions")
    assert extracted.filter(pl.col("status") == "ok").height == awaiting.height
    assert store.read("documents").height == len(documents)
    assert latest_snapshot(store).store_seq == store.manifest().seq
    assert set(ledger.read(store).get_column("price_source").to_list()) == {"list+batch"}
    assert batch_server.files == {}
    run = batched.instance.get_run_by_id(collection.run_id)
    assert float(run.tags["lightfoot/cost_usd"]) == pytest.approx(ledger.totals(store)["cost_usd"])

    # A restarted sensor finds nothing to collect: no answer is taken twice.
    batched.cursors.clear()
    assert batched.tick("extraction_batches_sensor").run_requests == []
    assert ledger.totals(store)["calls"] == awaiting.height


@pytest.mark.slow  # four runs: a drop, an erasure, two collections
def test_an_erasure_while_the_batch_is_open_cancels_it_at_the_provider(batched, batch_server, sample_documents):
    documents = sample_documents[:3]
    erased = documents[1]
    batched.drop_documents("batch-1", documents, {})
    assert batched.run(batched.tick("inbox_sensor").run_requests[0]).success
    assert batch_server.holding(erased.text[:40])

    batched.drop_erasure_request("gdpr-1.json", [erased.doc_id], reason="data subject request")
    deletion = batched.run(batched.tick("erasure_sensor").run_requests[0], "deletion_job")
    assert deletion.success
    (made,) = [e.event_specific_data.materialization for e in deletion.get_asset_materialization_events()
               if e.event_specific_data.materialization.asset_key.to_user_string() == "erasures"]
    assert made.metadata["provider_batches_cancelled"].value == 1 and made.metadata["provider_held_count"].value == 0
    assert batch_server.files == {} and [b["status"] for b in batch_server.batches.values()] == ["cancelled"]
    store = batched.store()
    assert store.read("tombstones").get_column("erased_at").is_not_null().all()

    # The others are asked again in a new batch, then collected.
    for _ in range(5):
        tick = batched.tick("extraction_batches_sensor")
        for request in tick.run_requests:
            assert batched.run(request).success
        if len(batch_server.batches) == 2 and not BatchRecord(store).open_keys():
            break
    extractions = store.read("extractions")
    assert erased.doc_id not in extractions.get_column("doc_id").to_list()
    assert extractions.filter(pl.col("status") == "ok").height == extractions.height > 0
    assert batch_server.holding(erased.text[:40]) == [] and batch_server.files == {}


@pytest.mark.slow  # two runs: a drop and a collection
def test_a_collection_run_told_to_ask_now_asks_the_expired_requests_synchronously(batched, batch_server,
                                                                                    sample_documents):
    documents = sample_documents[:3]
    batch_server.ending, batch_server.expire_after = "expired", 1
    batched.drop_documents("batch-1", documents, {})
    assert batched.run(batched.tick("inbox_sensor").run_requests[0]).success
    store = batched.store()
    submitted = store.read("extractions").height
    requests = []
    for _ in range(4):  # validating -> in_progress -> finalizing -> expired, with one line answered
        requests = batched.tick("extraction_batches_sensor").run_requests
        if requests:
            break
    (request,) = requests
    collection = batched.run(request, run_config={"ops": {"extraction_batches": {"config": {"ask_again": "now"}}}})
    assert collection.success
    (made,) = [e.event_specific_data.materialization for e in collection.get_asset_materialization_events()
               if e.event_specific_data.materialization.asset_key.to_user_string() == "extraction_batches"]
    assert made.metadata["answered"].value == 1
    assert made.metadata["answered_synchronously"].value == submitted - 1 == batch_server.chat_calls
    assert made.metadata["asked_again"].value == 0 and len(batch_server.batches) == 1  # no second batch
    assert made.metadata["model_calls"].value == submitted
    extracted = store.read("extractions")
    assert extracted.height == submitted and extracted.get_column("status").to_list() == ["ok"] * submitted
    run = batched.instance.get_run_by_id(collection.run_id)
    assert int(run.tags["lightfoot/model_calls"]) == submitted
    # the tag holds the run's total to the micro-dollar: the batch's answer and the synchronous calls
    assert float(run.tags["lightfoot/cost_usd"]) == pytest.approx(ledger.totals(store)["cost_usd"], abs=1e-6)
    assert set(ledger.read(store).get_column("price_source").to_list()) == {"list", "list+batch"}
