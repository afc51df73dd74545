"""The answerer against a real OpenAI-compatible server on loopback."""

from __future__ import annotations

import json

import pytest

from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.retrieval.answer import ANSWER_SCHEMA, Answerer, build_answerer, parse_answer, render_prompt
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
    answerer, status = build_answerer({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "LIGHTFOOT_LLM_MODEL": "m"})
    assert answerer is not None and answerer.model == "m" and status.startswith("available: m")
