"""Extraction: the extraction_cache asset asks the model only for passages that neither the store
nor the extraction cache has an answer for, and reports calls and retries apart; the extractions
asset commits the cached answers with no call."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import dagster as dg
import pytest

from assets.resources import ExtractorResource
from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.ingest.passages import split_passages
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.store import ledger

pytestmark = [pytest.mark.dagster]

ANSWER = {"entities": [{"name": "Oslo", "type": "location", "description": "a city"}],
          "facts": [["Oslo", "capital of", "Norway", "Oslo is the capital of Norway"]]}


def test_extractions_reuse_a_crashed_runs_answers_and_count_retries_apart_from_calls(
    lightfoot, twenty, chat_server, monkeypatch
):
    answer = chat_server.Reply(content=json.dumps(ANSWER), usage=(500, 50))
    chat_server.queue(answer)
    url = chat_server.base_url
    monkeypatch.setenv("LIGHTFOOT_LLM_BACKOFF_S", "0.01")
    lightfoot.resources["extractor"] = ExtractorResource(mode="openai", base_url=url, model="test-model",
                                                         api_key="sk-test")
    lightfoot.defs = lightfoot.defs.__class__(
        assets=lightfoot.defs.assets, asset_checks=lightfoot.defs.asset_checks, jobs=lightfoot.defs.jobs,
        sensors=lightfoot.defs.sensors, schedules=lightfoot.defs.schedules, resources=lightfoot.resources,
    )
    cached, asked = twenty[0], twenty[1]
    # An earlier run paid for the first document's answer and died before it stored anything else.
    settings = LLMSettings(base_url=url, model="test-model", api_key="sk-test", backoff_s=0.01)
    build_openai_extractor(lightfoot.store(), llm_settings=settings, run_id="crashed").extract(
        split_passages(cached, 4000))
    assert chat_server.count == 1

    chat_server.queue(chat_server.Reply(status=500), answer)  # the next request gets a 500, and is sent again
    lightfoot.drop_documents("two", [cached, asked], {})
    (request,) = lightfoot.tick("inbox_sensor").run_requests
    result = lightfoot.run(request)
    assert result.success
    assert chat_server.count == 1 + 2  # the asked passage only: one call, retried once
    (cache,) = result.asset_materializations_for_node("extraction_cache")  # one for the batch, not one per document
    assert cache.partition == request.partition_key
    metadata = cache.metadata
    values = {k: metadata[k].value for k in ("model_calls", "retries", "already_cached", "asked", "failed")}
    assert values == {"model_calls": 1, "retries": 1, "already_cached": 1, "asked": 1, "failed": 0}
    assert metadata["documents"].value == 2 and metadata["passages"].value == 2
    # Of the batch's two documents, only the one with no cached answer reached the model.
    assert not any(cached.text[:60] in r.user_text for r in chat_server.requests[1:])
    assert sum(1 for r in chat_server.requests[1:] if asked.text[:60] in r.user_text) == 2
    (committed,) = result.asset_materializations_for_node("extractions")
    assert committed.partition == request.partition_key
    values = {k: committed.metadata[k].value for k in ("from_cache", "passages_already_extracted", "failed",
                                                       "extracted", "documents_extracted")}
    assert values == {"from_cache": 2, "passages_already_extracted": 0, "failed": 0, "extracted": 2,
                      "documents_extracted": 2}
    totals = ledger.totals(lightfoot.store())  # the crashed run's call and this run's: the extractions step made none
    assert (totals["calls"], totals["retries"], totals["runs"]) == (2, 1, 2)
    assert lightfoot.store().read("extractions").get_column("status").to_list() == ["ok", "ok"]


# -- extraction in parallel runs --------------------------------------------------------------

REPO = Path(__file__).resolve().parents[3]
STORE_STEPS = ("passages", "extractions", "forms", "reconcile_graph", "serving_snapshot")


def _openai(lightfoot, url: str) -> None:
    lightfoot.resources["extractor"] = ExtractorResource(mode="openai", base_url=url, model="test-model",
                                                         api_key="sk-test")
    lightfoot.defs = lightfoot.defs.__class__(
        assets=lightfoot.defs.assets, asset_checks=lightfoot.defs.asset_checks, jobs=lightfoot.defs.jobs,
        sensors=lightfoot.defs.sensors, schedules=lightfoot.defs.schedules, resources=lightfoot.resources,
    )


def _step_spans(instance, run_id: str) -> dict[str, tuple[float, float]]:
    """Each step's (start, end) wall-clock times in a run, from its events."""
    import dagster as dg

    spans: dict[str, list[float]] = {}
    for record in instance.get_records_for_run(run_id, limit=100_000).records:
        event = record.event_log_entry.dagster_event
        if event is None or event.step_key is None:
            continue
        if event.event_type in (dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS,
                                dg.DagsterEventType.STEP_FAILURE):
            spans.setdefault(event.step_key, []).append(record.event_log_entry.timestamp)
    return {step: (min(times), max(times)) for step, times in spans.items()}


# A run in a process of its own, as the daemon launches it: the shipped definitions, configured by
# the environment, on the instance under DAGSTER_HOME. (Two runs in threads of one process would
# share Python's logging configuration, which Dagster sets up per run.)
RUN_ONE = """
import json, sys
import dagster as dg
from assets.definitions import defs
job = defs().resolve_job_def(sys.argv[1])
with dg.DagsterInstance.get() as instance:
    result = job.execute_in_process(instance=instance, tags=json.loads(sys.argv[2]), partition_key=sys.argv[3],
                                    raise_on_error=False)
print(json.dumps({"run_id": result.run_id, "success": result.success}))
"""


def _launch(lightfoot, request, url: str) -> subprocess.Popen:
    env = {**os.environ, "DAGSTER_HOME": str(lightfoot.root / "dagster_home"), "LIGHTFOOT_STORE": lightfoot.store_uri,
           "LIGHTFOOT_INBOX": str(lightfoot.document_inbox), "LIGHTFOOT_ERASURE_INBOX": str(lightfoot.erasure_inbox),
           "LIGHTFOOT_EMBEDDER": "hashing:32", "LIGHTFOOT_EXTRACTOR": "openai", "OPENAI_BASE_URL": url,
           "LIGHTFOOT_LLM_MODEL": "test-model", "OPENAI_API_KEY": "sk-test", "LIGHTFOOT_LLM_CONCURRENCY": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", RUN_ONE, request.job_name, json.dumps(dict(request.tags)),
                             request.partition_key],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_concurrent_batches_ask_each_passage_once_and_commit_one_at_a_time(
    lightfoot_pooled, twenty, chat_server, monkeypatch
):
    lightfoot = lightfoot_pooled
    monkeypatch.setenv("LIGHTFOOT_EXTRACTION_SLOTS", "2")
    said = lightfoot.tick("pool_limits_sensor").skip_message
    assert "lightfoot_extraction set from 0 to 2" in said  # the model calls' pool gets its two slots
    assert "lightfoot_store set from 0 to 1" in said  # the store's pool its one, before any step claims it
    both_asking = threading.Event()

    def answer(request):
        if chat_server.in_flight >= 2:
            both_asking.set()
        both_asking.wait(timeout=60)  # the first request waits until the other run asks too
        return chat_server.Reply(content=json.dumps(ANSWER), usage=(500, 50), delay=0.05)

    chat_server.script(answer)
    first, second = twenty[:6], twenty[3:9]  # three documents in both batches
    lightfoot.drop_documents("first", first, {})
    lightfoot.drop_documents("second", second, {})
    requests = lightfoot.tick("inbox_sensor").run_requests  # one run per drop, each of its own batch
    assert len(requests) == 2 and len({r.partition_key for r in requests}) == 2
    processes = [_launch(lightfoot, request, chat_server.base_url) for request in requests]
    runs = []
    for process in processes:
        out, err = process.communicate(timeout=900)
        assert process.returncode == 0, err[-3000:]
        runs.append(json.loads(out.strip().splitlines()[-1]))
        assert runs[-1]["success"], "\n".join(line for line in err.splitlines() if " - dagster - " not in line)[-4000:]

    texts = {d.doc_id: d.text[:60] for d in twenty[:9]}
    asked = {doc_id: sum(1 for r in chat_server.requests if text in r.user_text) for doc_id, text in texts.items()}
    assert asked == {doc_id: 1 for doc_id in texts}, "every passage asked once"
    assert chat_server.max_in_flight == 2, "the two runs asked the model at the same time (one call each at most)"
    assert lightfoot.stored_ids() == sorted(texts)
    extractions = lightfoot.store().read("extractions")
    assert extractions.height == 9 and set(extractions.get_column("status").to_list()) == {"ok"}

    # Commits serialised: both runs' commits are in the store log, each made on top of the one before
    # (a commit on a state that the other run's commit had replaced would have failed its run with
    # ConcurrentCommitError).
    history = lightfoot.store().history()
    assert history.get_column("seq").to_list() == list(range(1, history.height + 1))
    made = history.get_column("operation").value_counts()
    assert {op: n for op, n in made.iter_rows() if op in ("passages", "extractions", "forms")} == \
        {"passages": 2, "extractions": 2, "forms": 2}, "each run committed its own passages, extractions and forms"
    spans = {run["run_id"]: _step_spans(lightfoot.instance, run["run_id"]) for run in runs}
    writes = sorted((*spans[run_id][step], run_id, step) for run_id in spans for step in STORE_STEPS)
    assert len(writes) == 2 * len(STORE_STEPS)
    if lightfoot.storage == "postgres":
        # The store pool holds one store step at a time across runs. (On SQLite the pool's one slot
        # is best effort, dagster.yaml says why, and the local store's writer lock serialises instead.)
        for (_, end, *which), (start, _, *following) in itertools.pairwise(writes):
            assert end <= start, f"store steps {which} and {following} overlapped"
    waited = sorted(_run_metadata(lightfoot.instance, run["run_id"], "extraction_cache")["answered_by_other_runs"].value
                    for run in runs)
    assert waited == [0, 3], "the later run waited for the three passages the other was asking"
    # A run whose check finds the other mid-way leaves the comparison to it; one of them compares.
    rebuild = {}
    for run in runs:
        records = lightfoot.instance.get_records_for_run(
            run["run_id"], of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records
        rebuild[run["run_id"]] = [r.event_log_entry.dagster_event.event_specific_data for r in records
                                  if r.event_log_entry.dagster_event.event_specific_data.check_name
                                  == "matches_fresh_rebuild"]
    assert all(len(evaluations) == 5 for evaluations in rebuild.values())
    assert all(e.passed or "mid-way" in (e.description or "") for evaluations in rebuild.values() for e in evaluations)
    assert any(all(e.passed for e in evaluations) for evaluations in rebuild.values()), "no run compared"


def test_a_failing_endpoint_fails_the_run_with_the_reason_and_the_next_attempt_loses_nothing(
    lightfoot, twenty, chat_server, monkeypatch
):
    monkeypatch.setenv("LIGHTFOOT_LLM_MAX_RETRIES", "0")
    _openai(lightfoot, chat_server.base_url)
    documents = twenty[:4]
    calls = {"n": 0}

    def flaky(request):  # the first two calls are answered, then the endpoint fails
        calls["n"] += 1
        return (chat_server.Reply(content=json.dumps(ANSWER)) if calls["n"] <= 2
                else chat_server.Reply(status=503))

    chat_server.script(flaky)
    lightfoot.drop_documents("four", documents, {})
    (request,) = lightfoot.tick("inbox_sensor").run_requests
    failed = lightfoot.run(request)
    assert not failed.success
    (failure,) = [e for e in failed.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "extraction_cache"
    assert "2 of 4 passage texts got no answer" in failure.step_failure_data.user_failure_data.description
    assert "HTTP 503" in failure.step_failure_data.user_failure_data.description
    assert lightfoot.store().read("extractions").height == 0  # nothing committed from a failed extraction

    chat_server.script(lambda request: chat_server.Reply(content=json.dumps(ANSWER)))
    lightfoot.tick("inbox_sensor")  # the receipt's failed run is seen ...
    retry = lightfoot.tick("inbox_sensor")  # ... and asked again once its back-off allows
    (again,) = retry.run_requests or lightfoot.tick("inbox_sensor").run_requests
    assert lightfoot.run(again).success
    assert chat_server.count == 4 + 2, "the retry asks only the two passages that got no answer"
    extractions = lightfoot.store().read("extractions")
    assert sorted(extractions.get_column("doc_id").to_list()) == sorted(d.doc_id for d in documents)
    assert set(extractions.get_column("status").to_list()) == {"ok"}


def _run_metadata(instance, run_id: str, asset: str) -> dict:
    import dagster as dg

    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset)), limit=100).records
    return next(r.asset_materialization.metadata for r in records if r.run_id == run_id)
