"""The answerer against a real OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import threading

import pytest

from lightfoot_pipeline.models.llm import (
    TEMPLATE_TOKENS_PER_MESSAGE,
    TEMPLATE_TOKENS_PER_REQUEST,
    LLMClient,
    LLMSettings,
    UnpricedModelError,
    prompt_token_bound,
)
from lightfoot_pipeline.retrieval.answer import (
    ANSWER_SCHEMA,
    AnswerBudget,
    Answerer,
    SharedBudget,
    build_answerer,
    parse_answer,
    render_prompt,
)
from lightfoot_pipeline.retrieval.retrieve import FactHit, PassageHit

QUESTION = "Who founded the company that makes the Zephyr phone?"


def facts(n: int = 12) -> list[FactHit]:
    out = [FactHit("f-made", "zephyr phone", "made by", "orbital corp", 0.81,
                   [{"chunk_id": "c1", "doc_id": "q-zephyr", "evidence": "a handset made by Orbital Corp"}]),
           FactHit("f-founded", "orbital corp", "founded by", "mira kalden", 0.64,
                   [{"chunk_id": "c2", "doc_id": "q-orbital", "evidence": None}])]
    out += [FactHit(f"f-{i}", f"thing {i}", "is", f"other {i}", 0.1) for i in range(n - 2)]
    return out


def passages(n: int = 12) -> list[PassageHit]:
    texts = [("Zephyr phone", "The Zephyr phone is a handset made by Orbital Corp."),
             ("Orbital Corp", "Orbital Corp was founded by Mira Kalden in Tallinn.")]
    texts += [(f"Filler {i}", f"Filler passage number {i}.") for i in range(n - 2)]
    return [PassageHit(rank=i + 1, chunk_id=f"c{i}", doc_id=f"d{i}", title=t, text=x, pagerank_rank=i + 1,
                       pagerank_score=1.0 / (i + 1), dense_score=0.5) for i, (t, x) in enumerate(texts)]


def client_for(server, **overrides) -> LLMClient:
    settings = LLMSettings(base_url=server.base_url, api_key="sk-test", model="answer-model", max_retries=0,
                           timeout_s=10, price_in_per_mtok=1.0, price_out_per_mtok=2.0, **overrides)
    return LLMClient(settings)


def test_the_model_gets_ten_facts_with_evidence_and_ten_passages_in_order(chat_server):
    chat_server.queue(chat_server.Reply(content='{"answer": "Mira Kalden"}', usage=(900, 7)))
    result = Answerer(client_for(chat_server)).answer(QUESTION, facts(), passages())
    assert result.answer == "Mira Kalden" and result.parsed and result.error is None
    assert (result.tokens_in, result.tokens_out) == (900, 7)
    assert result.cost_usd == pytest.approx((900 * 1.0 + 7 * 2.0) / 1e6)
    assert result.model == "answer-model" and result.output_mode == "json_schema"
    (request,) = chat_server.requests
    prompt = request.user_text
    assert prompt.count("\n   evidence:") == 1 and '"a handset made by Orbital Corp"' in prompt
    assert "(thing 7; is; other 7)" in prompt and "thing 8" not in prompt  # 10 facts: 2 + things 0-7
    assert "[10] Filler 7" in prompt and "Filler 8" not in prompt  # 10 passages
    assert prompt.index("[1] Zephyr phone") < prompt.index("[2] Orbital Corp") < prompt.index("[3] Filler 0")
    assert prompt.rstrip().endswith(f"Question: {QUESTION}")
    system = request.messages[0]["content"]
    assert "shortest span" in system and "best guess" in system
    assert request.body["response_format"]["json_schema"]["schema"] == ANSWER_SCHEMA


def test_an_endpoint_without_structured_output_still_gets_an_answer(chat_server):
    def reply(request):
        if request.response_format in ("json_schema", "json_object"):
            return chat_server.Reply(status=400)
        return chat_server.Reply(content='Sure! ```json\n{"answer": "Mira Kalden"}\n```')

    chat_server.script(reply)
    result = Answerer(client_for(chat_server)).answer(QUESTION, facts(2), passages(2))
    assert result.answer == "Mira Kalden" and result.parsed and result.output_mode == "prompt"
    assert [r.response_format for r in chat_server.requests] == ["json_schema", "json_object", None]


def test_a_reply_that_is_not_json_keeps_the_models_guess(chat_server):
    chat_server.queue(chat_server.Reply(content="\nMira Kalden\nbecause the passages say so"))
    result = Answerer(client_for(chat_server, output_mode="prompt")).answer(QUESTION, [], [])
    assert result.answer == "Mira Kalden" and not result.parsed and result.error is None
    assert "(none)" in chat_server.requests[0].user_text


def test_a_failing_endpoint_gives_an_answer_with_the_error(chat_server):
    chat_server.queue(chat_server.Reply(status=500))
    result = Answerer(client_for(chat_server)).answer(QUESTION, facts(2), passages(2))
    assert result.answer is None and "server_error" in result.error
    chat_server.queue(chat_server.Reply(content='{"answer": ""}'))
    empty = Answerer(client_for(chat_server)).answer(QUESTION, facts(2), passages(2))
    assert empty.answer == "" and empty.error == "the model returned no answer"


def test_parse_answer():
    assert parse_answer('{"answer": "1976"}') == ("1976", True)
    assert parse_answer('{"answer": 1976}') == ("1976", True)
    assert parse_answer('The answer: {"answer": "Tallinn"} (from passage 2)') == ("Tallinn", True)
    assert parse_answer("`Tallinn`") == ("Tallinn", False)
    assert parse_answer('{"result": "x"}') == ('{"result": "x"}', False)
    assert parse_answer("   ") == (None, False)


def test_render_prompt_is_plain_text():
    text = render_prompt(QUESTION, facts(3), passages(2))
    assert text.startswith("Facts (subject; predicate; object)")
    assert "1. (zephyr phone; made by; orbital corp)" in text
    json.dumps(text)


def test_without_an_endpoint_there_is_no_answerer_and_the_reason_says_so():
    answerer, status = build_answerer({})
    assert answerer is None and "OPENAI_BASE_URL" in status and "retrieval works without one" in status
    priced = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "LIGHTFOOT_LLM_MODEL": "m",
              "LIGHTFOOT_LLM_PRICE_IN": "1", "LIGHTFOOT_LLM_PRICE_OUT": "2"}
    answerer, status = build_answerer(priced)
    assert answerer is not None and answerer.model == "m" and status.startswith("available: m")


def test_a_model_without_a_known_price_is_refused_unless_priced_or_allowed():
    endpoint = {"OPENAI_BASE_URL": "http://user:secret@127.0.0.1:9/v1", "LIGHTFOOT_LLM_MODEL": "house-model"}
    answerer, status = build_answerer(endpoint)
    assert answerer is None and "house-model" in status and "no known price" in status
    assert "LIGHTFOOT_LLM_PRICE_IN" in status and "--allow-unpriced" in status
    assert "\n" not in status and "127.0.0.1" not in status and "secret" not in status
    # one side priced and no list price: the other side would be free, so it is still refused
    assert build_answerer({**endpoint, "LIGHTFOOT_LLM_PRICE_IN": "1"})[0] is None
    assert build_answerer({**endpoint, "LIGHTFOOT_LLM_PRICE_IN": "1", "LIGHTFOOT_LLM_PRICE_OUT": "2"})[0] is not None
    allowed, _ = build_answerer(endpoint, allow_unpriced=True)
    assert allowed is not None and allowed.client.settings.price_state() == "unpriced-allowed"
    assert build_answerer({**endpoint, "LIGHTFOOT_LLM_ALLOW_UNPRICED": "1"})[0] is not None
    listed, _ = build_answerer({**endpoint, "LIGHTFOOT_LLM_MODEL": "gpt-4o-mini"})
    assert listed is not None and listed.client.settings.price_status()["state"] == "priced"
    settings = LLMSettings(base_url="http://127.0.0.1:9/v1", model="house-model")
    with pytest.raises(UnpricedModelError, match="answers refused: the model 'house-model' has no known price"):
        Answerer(LLMClient(settings))


def test_the_hold_is_the_prompts_utf8_bytes_and_max_tokens():
    messages = [{"role": "system", "content": "abc"}, {"role": "user", "content": "Tallinn – Мира"}]
    assert len("Tallinn – Мира") == 14 and len("Tallinn – Мира".encode()) == 20
    bytes_ = 3 + len("system") + 20 + len("user")
    assert prompt_token_bound(messages) == bytes_ + 2 * TEMPLATE_TOKENS_PER_MESSAGE + TEMPLATE_TOKENS_PER_REQUEST
    schema_bytes = len(json.dumps(ANSWER_SCHEMA, separators=(",", ":")).encode())
    assert prompt_token_bound(messages, ANSWER_SCHEMA) == prompt_token_bound(messages) + schema_bytes
    settings = LLMSettings(model="m", price_in_per_mtok=3.0, price_out_per_mtok=7.0)
    worst = settings.worst_case_usd(messages, 50, ANSWER_SCHEMA)
    assert worst == pytest.approx((prompt_token_bound(messages, ANSWER_SCHEMA) * 3.0 + 50 * 7.0) / 1e6)
    answerer = Answerer(LLMClient(settings, client=object()), max_tokens=50)
    assert answerer.worst_case_usd(messages) == pytest.approx(worst)


def test_every_answer_call_sends_max_tokens_and_a_call_without_usage_is_charged_its_hold(chat_server):
    chat_server.queue(chat_server.Reply(body=json.dumps({
        "id": "x", "object": "chat.completion", "created": 0, "model": "answer-model",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                                                                      "content": '{"answer": "Mira Kalden"}'}}]})))
    answerer = Answerer(client_for(chat_server), max_tokens=120)
    messages = answerer.messages(QUESTION, facts(), passages())
    result = answerer.ask(messages)
    assert result.answer == "Mira Kalden" and not result.usage_reported
    assert chat_server.requests[0].body["max_tokens"] == 120
    assert (result.tokens_in, result.tokens_out) == (prompt_token_bound(messages, ANSWER_SCHEMA), 120)
    assert result.cost_usd == pytest.approx(answerer.worst_case_usd(messages))
    # the byte bound holds the tokens any byte-level tokenizer bills for the prompt
    assert result.tokens_in >= sum(len(m["content"].encode()) for m in messages)


def test_a_settled_call_that_reaches_the_cap_ends_every_later_call():
    budget = AnswerBudget(0.01)
    assert budget.reserve(0.001)
    budget.settle(0.001, 0.03, tokens_in=10, tokens_out=100_000)  # billed 30 times what was held
    assert budget.exhausted and budget.overbilled == 1
    assert not budget.reserve(0.0)  # not even a free call
    state = budget.as_dict()
    assert state["spent_usd"] == 0.03 and state["tokens_out"] == 100_000 and state["refused"] == 1
    exact = AnswerBudget(0.01)
    assert exact.reserve(0.004)
    exact.settle(0.004, 0.004)
    assert not exact.exhausted and exact.reserve(0.006)  # 0.004 spent + 0.006 held fits exactly
    exact.settle(0.006, 0.006)
    assert exact.exhausted and exact.overbilled == 0 and not exact.reserve(0.0)  # spend at the cap


def test_answer_budget_reserves_the_worst_case():
    budget = AnswerBudget(1.0)
    assert budget.reserve(0.6)
    budget.settle(0.6, 0.1)  # billed within its hold: calls may now run side by side
    assert budget.reserve(0.6) and budget.reserve(0.3)  # 0.1 spent, 0.9 held
    assert not budget.reserve(0.01)  # does not fit
    assert not budget.reserve(0.0)  # and once refused, the budget is spent
    budget.settle(0.6, 0.1)
    budget.settle(0.3, 0.1)
    assert budget.as_dict() == {"budget_usd": 1.0, "spent_usd": 0.3, "held_usd": 0.0, "calls": 3, "refused": 2,
                                "overbilled": 0, "tokens_in": 0, "tokens_out": 0, "exhausted": True}
    unlimited = AnswerBudget(None)
    assert all(unlimited.reserve(1e9) for _ in range(3))
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="non-negative"):
            AnswerBudget(bad)


def test_a_spenders_budget_within_a_shared_one_counts_its_own_calls():
    """A principal's budget within the service's: a call is made when both hold it; each spender's
    counters are its own; its own cap refuses it alone; the shared cap, once spent, refuses all."""
    shared = AnswerBudget(1.0)
    alice, bob = SharedBudget(AnswerBudget(0.5), shared), SharedBudget(AnswerBudget(0.5), shared)
    for budget, cost in ((alice, 0.3), (alice, 0.15), (bob, 0.2)):
        assert budget.reserve(0.05)
        budget.settle(0.05, cost, tokens_in=100)
    assert not alice.reserve(0.1) and alice.exhausted and not alice.shared_spent  # 0.45 + 0.1 > 0.5
    assert bob.reserve(0.1)  # alice's cap is hers alone
    bob.settle(0.1, 0.1)
    assert (alice.as_dict()["calls"], alice.as_dict()["tokens_in"], bob.as_dict()["calls"]) == (2, 200, 2)
    assert shared.as_dict()["calls"] == 4 and shared.as_dict()["spent_usd"] == pytest.approx(0.75)
    carol = SharedBudget(AnswerBudget(None), shared)
    assert (alice.limit_usd, carol.limit_usd) == (0.5, 1.0)  # the cap that holds each
    assert not carol.reserve(0.3)  # the shared 1.0 cannot hold it: 0.75 spent
    assert carol.shared_spent and carol.spent() and carol.as_dict()["refused"] == 2
    assert carol.own.held_usd == 0.0 and carol.as_dict()["calls"] == 0  # its hold was let go


def test_a_capped_budget_makes_one_call_at_a_time_until_one_is_billed_within_its_hold():
    budget = AnswerBudget(10.0)
    got: list[bool] = []

    def reserve_in_a_thread() -> threading.Thread:
        thread = threading.Thread(target=lambda: got.append(budget.reserve(0.1)), daemon=True)
        thread.start()
        thread.join(0.3)
        return thread

    assert budget.reserve(0.1)
    waiting = reserve_in_a_thread()
    assert waiting.is_alive() and got == []  # the second call waits for the first's bill
    budget.settle(0.1, 0.0)  # a failed call proves nothing
    waiting.join(5)
    assert got == [True]
    waiting = reserve_in_a_thread()
    assert waiting.is_alive()
    budget.settle(0.1, 0.05)  # billed within its hold: side by side from now on
    waiting.join(5)
    assert got == [True, True] and budget.reserve(0.1)  # two in flight
    budget.settle(0.1, 2.0)  # billed 20 times its hold: one at a time again, for good
    budget.settle(0.1, 0.05)
    assert budget.overbilled == 1 and budget.reserve(0.1)
    waiting = reserve_in_a_thread()
    assert waiting.is_alive()
    budget.settle(0.1, 0.05)
    waiting.join(5)
    assert got == [True, True, True]
