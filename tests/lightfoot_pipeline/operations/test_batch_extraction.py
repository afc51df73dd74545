"""Extraction through a provider's Batch API (a real ``openai`` client against tests/batch_server.py
on loopback), offline batches, and erasure at the provider."""

from __future__ import annotations

import json

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction.batch_record import BatchRecord
from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.models.batch_api import BatchAPI
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.operations import batch_extraction
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import EXTRACTIONS

MODEL = "gpt-4o-mini"  # list price $0.15 / $0.60; the batch price half that


def settings_for(server) -> LLMSettings:
    return LLMSettings(base_url=server.base_url, api_key="sk-batch-test", model=MODEL, backoff_s=0.01, timeout_s=5.0,
                       max_retries=0)


def passage_in(messages: list[dict]) -> tuple[str, str]:
    user = "\n".join(m["content"] for m in messages if m["role"] == "user")
    inside = user.split("<passage>\n", 1)[1].rsplit("\n</passage>", 1)[0]
    title, _, text = inside.partition("\n")
    return title, text


def answer(messages: list[dict]) -> str:
    """The answer a model gives a passage here: its title as an entity and one fact (the same by
    either protocol)."""
    title, text = passage_in(messages)
    words = text.split(". ")[0].split()
    return json.dumps({"entities": [{"name": title, "type": "concept", "description": "the passage's topic"}],
                       "facts": [[title, "is described by", " ".join(words[-3:]) or title, " ".join(words[:12])]]},
                      separators=(",", ":"))


def line_answer(line: dict) -> str:
    return answer(line["body"]["messages"])


def collect_until_settled(store, extractor, embedder, tries: int = 6, **kwargs):
    """Collect until no batch is open (each look moves a fake batch one state on)."""
    reports = []
    for _ in range(tries):
        reports.append(batch_extraction.collect(store, extractor, embedder, **kwargs))
        if not BatchRecord(store).open_keys():
            return reports
    raise AssertionError(f"batches still open after {tries} collections: {reports[-1].still_open}")


def test_a_round_trip_equals_a_synchronous_ingest_of_the_same_answers(tmp_path, store, batch_server, chat_server,
                                                                       sample_documents, hashing_embedder):
    documents = sample_documents[:6]
    batch_server.answer = line_answer
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    report = operations.ingest(store, documents, extractor, hashing_embedder)
    assert report.failed == report.passages and report.model_calls == 0  # all awaiting the batch
    reasons = store.read(EXTRACTIONS.name).get_column("reason").to_list()
    assert all(r.startswith("awaiting extraction: in batch eb-") for r in reasons)
    status = batch_extraction.batch_status(store)
    assert status["awaiting_passages"] == report.passages and len(status["open"]) == 1
    assert len(status["provider_files"]) == 1

    reports = collect_until_settled(store, extractor, hashing_embedder)
    assert [r.still_open for r in reports[:-1]] == [{status["open"][0]: "in_progress"},
                                                    {status["open"][0]: "finalizing"}]
    done = reports[-1]
    assert done.collected == status["open"] and done.answered == report.passages and done.without_answer == 0
    assert done.seq is not None and done.documents == len(documents)
    assert batch_server.files == {}  # input and output deleted at the provider
    assert batch_extraction.batch_status(store)["provider_files"] == []
    assert store.read(EXTRACTIONS.name).filter(pl.col("status") == "ok").height == report.passages

    # The cost ledger: one row per answer at the batch price, its run the batch.
    rows = ledger.read(store, status["open"][0])
    assert rows.height == report.passages
    assert set(rows.get_column("price_source").to_list()) == {"list+batch"}
    assert rows.get_column("price_in_per_mtok").to_list()[0] == pytest.approx(0.075)
    assert rows.get_column("cost_usd").sum() == pytest.approx(report.passages * (700 * 0.075 + 90 * 0.30) / 1e6)

    # The same answers, one synchronous call at a time, into a fresh store: the same index.
    chat_server.script(lambda request: chat_server.Reply(content=answer(request.messages), usage=(700, 90)))
    fresh = Store(str(tmp_path / "synchronous"))
    sync_settings = LLMSettings(base_url=chat_server.base_url, model=MODEL, backoff_s=0.01)
    operations.ingest(fresh, documents, build_openai_extractor(fresh, llm_settings=sync_settings), hashing_embedder)
    assert fingerprint(store, store.manifest()).digest == fingerprint(fresh, fresh.manifest()).digest

    # Collecting again takes nothing twice and asks for nothing.
    again = batch_extraction.collect(store, extractor, hashing_embedder)
    assert (again.collected, again.answered, again.seq) == ([], 0, None)
    assert len(batch_server.batches) == 1
