"""What the query service spends, through its real answer path against a chat-completions server
on loopback: every answer call lands in the cost ledger however many answer at once, the budget
stops an endpoint that bills past ``max_tokens``, and a model without a known price is refused
unless it is priced or allowed."""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.retrieval.answer import MAX_TOKENS, AnswerBudget, Answerer
from lightfoot_pipeline.service.queries import QueryService, open_service, shown_reranker
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.store import journals, ledger
from lightfoot_pipeline.store.log import StoreError
from lightfoot_pipeline.store.tables import LLM_LEDGER

DATA = Path(__file__).parents[1] / "data" / "query-corpus"
QUESTION = "Who founded the company that makes the Zephyr phone?"
ANSWER = '{"answer": "Mira Kalden"}'
PRICE_IN, PRICE_OUT = 0.15, 0.60  # USD per million tokens


@pytest.fixture
def indexed(store):
    embedder = HashingEmbedder(dim=32)
    operations.ingest(store, load_corpus(DATA), ReplayExtractor(load_recorded_extractions(DATA)), embedder)
    export_snapshot(store, embedder)
    return store, embedder


def answerer_for(server, **overrides) -> Answerer:
    settings = LLMSettings(base_url=server.base_url, api_key="sk-test", model="answer-model", max_retries=0,
                           timeout_s=30, price_in_per_mtok=PRICE_IN, price_out_per_mtok=PRICE_OUT, **overrides)
    return Answerer(LLMClient(settings))


def has_ledger(store) -> bool:
    return store.open_table(store.journal_uri(LLM_LEDGER.name)) is not None


@pytest.mark.slow
def test_32_answers_at_once_on_a_store_without_a_ledger_lose_no_row(indexed, chat_server):
    store, embedder = indexed
    assert not has_ledger(store)  # the first appends race to create it
    together = threading.Barrier(32, timeout=20)

    def reply(request):  # every answer comes back at once, so their ledger writes collide
        with contextlib.suppress(threading.BrokenBarrierError):
            together.wait()
        return chat_server.Reply(content=ANSWER, usage=(900, 7))

    chat_server.script(reply)
    service = QueryService(store, embedder, answerer=answerer_for(chat_server))
    assert service.refresh()
    start = threading.Barrier(32)

    def ask(_: int) -> dict:
        start.wait()
        return service.query(QUESTION, top_k=2)

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(ask, range(32)))
    assert [r["answer_status"] for r in results] == ["answered"] * 32, [r["answer"]["error"] for r in results if r["answer_status"] != "answered"][:1]
    assert chat_server.count == 32
    rows = ledger.read(store)
    assert rows.height == 32 and rows.get_column("call_id").n_unique() == 32
    assert set(rows.get_column("run_id")) == {service.ledger_run_id} and service.ledger_errors == 0
    assert rows.get_column("cost_usd").sum() == pytest.approx(32 * (900 * PRICE_IN + 7 * PRICE_OUT) / 1e6)


def test_an_append_that_keeps_losing_fails_after_its_bound_saying_why(store, monkeypatch):
    charge = ledger.Charge(run_id="r", purpose="answer", model="m", status="ok", attempts=1, tokens_in=1,
                           tokens_out=1, price_in_per_mtok=1.0, price_out_per_mtok=1.0, price_source="configured")
    ledger.record(store, [charge])
    tries = []

    def lose(*args, **kwargs):
        tries.append(1)
        raise journals.CommitFailedError("Failed to commit transaction: Metadata changed since last commit.")

    monkeypatch.setattr(journals, "write_deltalake", lose)
    monkeypatch.setattr(journals, "APPEND_BACKOFF_S", 0.001)
    frame = ledger.read(store)
    with pytest.raises(StoreError, match=r"journal llm_ledger after \d+ attempts in 0.2s: the commit was lost"):
        store.append_journal(LLM_LEDGER.name, frame, retry_for_s=0.2)
    assert len(tries) > 1  # tried again before giving up


def test_the_budget_stops_an_endpoint_that_bills_past_max_tokens(indexed, chat_server):
    store, embedder = indexed
    chat_server.script(lambda request: chat_server.Reply(content=ANSWER, usage=(900, 100_000)))
    per_call = (900 * PRICE_IN + 100_000 * PRICE_OUT) / 1e6  # $0.060135: six times the budget
    limit = 0.01
    service = QueryService(store, embedder, answerer=answerer_for(chat_server), budget=AnswerBudget(limit))
    assert service.refresh()
    for _ in range(5):
        service.query(QUESTION, top_k=2)
    assert chat_server.count == 1  # the first bill reached the cap: no call after it
    assert all(r.body["max_tokens"] == MAX_TOKENS for r in chat_server.requests)
    assert service.budget.spent_usd == pytest.approx(per_call) and service.budget.spent_usd <= limit + per_call
    answers = service.status()["answers"]
    assert answers["state"] == "budget spent" and answers["overbilled"] == 1 and answers["refused"] == 4
    assert answers["tokens_out"] == 100_000 and answers["price"]["state"] == "priced"
    (row,) = ledger.read(store).to_dicts()
    assert row["tokens_out"] == 100_000 and row["cost_usd"] == pytest.approx(per_call)


def test_answers_at_once_against_an_over_billing_endpoint_stop_after_one_call(indexed, chat_server):
    store, embedder = indexed
    chat_server.script(lambda request: chat_server.Reply(content=ANSWER, usage=(900, 100_000), delay=0.2))
    per_call = (900 * PRICE_IN + 100_000 * PRICE_OUT) / 1e6
    service = QueryService(store, embedder, answerer=answerer_for(chat_server), budget=AnswerBudget(0.01))
    assert service.refresh()
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: service.query(QUESTION, top_k=2), range(24)))
    # the first call is made alone until one is billed within its hold; this one never is
    assert chat_server.count == 1 and chat_server.max_in_flight == 1
    assert sum(r["answer_status"] == "answered" for r in results) == 1
    assert service.budget.spent_usd == pytest.approx(per_call)


def test_an_unpriced_model_is_refused_unless_priced_or_allowed(indexed, chat_server, monkeypatch):
    store, _ = indexed
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    monkeypatch.setenv("LIGHTFOOT_LLM_MODEL", "house-model")
    monkeypatch.setenv("LIGHTFOOT_LLM_MAX_RETRIES", "0")
    for name in ("LIGHTFOOT_LLM_PRICE_IN", "LIGHTFOOT_LLM_PRICE_OUT", "LIGHTFOOT_LLM_ALLOW_UNPRICED"):
        monkeypatch.delenv(name, raising=False)
    chat_server.script(lambda request: chat_server.Reply(content=ANSWER, usage=(900, 7)))

    refused = open_service(store, reranker_spec="none", answers=True, answer_budget_usd=1.0)
    result = refused.query(QUESTION, top_k=2)
    assert result["answer"] is None and result["passages"]  # retrieval still answers
    status = result["answer_status"]
    assert status.startswith("answers refused: the answer model has no known price") and "--allow-unpriced" in status
    assert "house-model" not in status and "127.0.0.1" not in status and "\n" not in status
    answers = refused.status()["answers"]
    assert answers["state"] == "refused" and answers["price"]["state"] == "refused"
    assert chat_server.count == 0 and not has_ledger(store)
    refused.close()

    allowed = open_service(store, reranker_spec="none", answers=True, answer_budget_usd=1.0, allow_unpriced=True)
    assert has_ledger(store)  # created before the first answer
    assert allowed.query(QUESTION, top_k=2)["answer_status"] == "answered"
    answers = allowed.status()["answers"]
    assert answers["price"]["state"] == "unpriced-allowed" and answers["state"] == "on"
    assert answers["spent_usd"] == 0.0 and answers["tokens_in"] == 900  # the spend in tokens is still shown
    assert ledger.read(store).get_column("price_source").to_list() == ["unpriced"]
    allowed.close()

    monkeypatch.setenv("LIGHTFOOT_LLM_PRICE_IN", "1")
    monkeypatch.setenv("LIGHTFOOT_LLM_PRICE_OUT", "2")
    priced = open_service(store, reranker_spec="none", answers=True, answer_budget_usd=1.0)
    assert priced.query(QUESTION, top_k=2)["answer_status"] == "answered"
    answers = priced.status()["answers"]
    assert answers["price"]["state"] == "priced" and answers["spent_usd"] == pytest.approx((900 + 14) / 1e6)
    assert chat_server.count == 2
    priced.close()


def test_a_principal_sees_the_rerankers_state_never_a_path_on_the_server():
    local = {"state": "unavailable", "model": "/srv/models/reranker", "reason": "cannot load /srv/models/reranker"}
    assert shown_reranker(local) == {"state": "unavailable", "model": None, "reason": ""}
    hub = {"state": "available", "model": "BAAI/bge-reranker-base", "reason": ""}
    assert shown_reranker(hub) == hub
