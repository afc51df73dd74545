"""The OpenAI-compatible chat endpoint (service/chat.py), called with the ``openai`` client on the
bundled sample: the models, a completion streamed and not, the conversation's earlier turns in the
answer model's prompt within their bound, citations of the principal's documents only (those of
``/query``'s passages for the same principal), usage as the budget counts it, and refusals and
malformed bodies in the OpenAI error shape."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest

from lightfoot_pipeline.service.chat import (
    HISTORY_CHARS,
    HISTORY_TURNS,
    MAX_MESSAGES,
    ChatError,
    conversation_context,
    parse_chat_request,
)
from lightfoot_pipeline.service.queries import MAX_QUESTION_CHARS
from tests.lightfoot_pipeline.service.conftest import OPERATOR_TOKEN, READER_TOKEN, SPENDER_TOKEN
from tests.lightfoot_pipeline.service.test_views_leak import answering

QUESTION = "Who founded the company that built the USS Donegal?"
USAGE = (321, 7)


def client(doors, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=doors.url + "/v1", api_key=token, max_retries=0, timeout=60)


@pytest.fixture
def doors(sample_doors):
    sample_doors.chat.reset()
    sample_doors.chat.script(lambda request: sample_doors.chat.Reply(content=answering(request), usage=USAGE))
    return sample_doors


def readable(doors, token: str) -> list[str]:
    """The documents of ``/query``'s passages for ``token``'s principal, in order."""
    status, body = doors.call("/query", token, {"question": QUESTION, "answer": False})
    assert status == 200
    return list(dict.fromkeys(p["doc_id"] for p in body["passages"]))


def test_models_and_a_completion_from_the_principals_view(doors):
    reader = client(doors, READER_TOKEN)
    assert [m.id for m in reader.models.list()] == ["lightfoot", "lightfoot-deep"]
    assert reader.models.retrieve("lightfoot-deep").id == "lightfoot-deep"
    spent = doors.service.budget_of(doors.principal(READER_TOKEN)).as_dict()
    completion = reader.chat.completions.create(model="lightfoot", messages=[
        {"role": "system", "content": "Answer as ZQXSYSTEMRULE says."},
        {"role": "user", "content": "Tell me of ships."},
        {"role": "assistant", "content": "The USS Donegal was a ship."},
        {"role": "user", "content": QUESTION}])
    content = completion.choices[0].message.content
    cited = completion.model_extra["citations"]
    assert content.startswith("Mira Kalden\n\nSources:\n[1] ")
    # Its sources are the documents of /query's passages for the same principal, and only those.
    reader_docs, operator_docs = readable(doors, READER_TOKEN), readable(doors, OPERATOR_TOKEN)
    assert [c["doc_id"] for c in cited] == reader_docs and reader_docs != operator_docs
    for number, c in enumerate(cited, start=1):
        assert f"[{number}] {c['title']} ({c['doc_id']})" in content
    # The usage is the answer call's, as the principal's budget (and the ledger) count it.
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == USAGE
    now = doors.service.budget_of(doors.principal(READER_TOKEN)).as_dict()
    assert now["tokens_in"] - spent["tokens_in"] == USAGE[0] and now["calls"] == spent["calls"] + 1
    # The earlier turns came before the retrieved knowledge; the client's system message did not.
    [request] = doors.chat.requests
    roles = [m["role"] for m in request.messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert request.messages[1]["content"] == "Tell me of ships." and "ZQXSYSTEMRULE" not in json.dumps(request.body)
    assert request.messages[3]["content"].endswith(f"Question: {QUESTION}")


def test_a_streamed_completion_is_the_same_reply_in_chunks(doors):
    reader = client(doors, READER_TOKEN)
    messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]
    whole = reader.chat.completions.create(model="lightfoot", messages=messages)
    chunks = list(reader.chat.completions.create(model="lightfoot", messages=messages, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finish] == ["stop"]
    assert finish[0].model_extra["citations"] == whole.model_extra["citations"]
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == USAGE and not chunks[-1].choices
    assert len({c.id for c in chunks}) == 1


def test_the_deep_mode_answers_through_the_same_door(doors):
    completion = client(doors, READER_TOKEN).chat.completions.create(
        model="lightfoot-deep", messages=[{"role": "user", "content": QUESTION}])
    assert completion.choices[0].message.content.startswith("Mira Kalden")
    cited = {c["doc_id"] for c in completion.model_extra["citations"]}
    assert cited and all(c["title"] for c in completion.model_extra["citations"])
    assert cited <= _view_docs(doors, READER_TOKEN)
    assert completion.usage.prompt_tokens == USAGE[0] * len(doors.chat.requests)


def _view_docs(doors, token: str) -> set[str]:
    return set(doors.service.current(doors.principal(token)).snapshot.passages.get_column("doc_id").to_list())


def test_a_spent_budget_is_refused_as_openai_refuses_it(doors):
    doors.chat.script(lambda request: doors.chat.Reply(content=answering(request), usage=(100_000, 10)))
    spender = client(doors, SPENDER_TOKEN)
    spender.chat.completions.create(model="lightfoot", messages=[{"role": "user", "content": QUESTION}])
    with pytest.raises(openai.RateLimitError) as refused:
        spender.chat.completions.create(model="lightfoot", messages=[{"role": "user", "content": QUESTION}])
    assert refused.value.body["code"] == "insufficient_quota" and refused.value.body["type"] == "rate_limit_error"
    assert "budget" in refused.value.body["message"]


def raw(doors, path: str, body: bytes | None, token: str | None = READER_TOKEN,
        content_type: str = "application/json") -> tuple[int, dict]:
    headers = {"content-type": content_type, **({"authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(doors.url + path, data=body, method="POST" if body is not None else "GET",
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def user(text: str = QUESTION) -> dict:
    return {"role": "user", "content": text}


MALFORMED = {
    "not JSON": (b"{", 400, None),
    "not an object": (b"[]", 400, None),
    "tools": ({"model": "lightfoot", "messages": [user()], "tools": [{"type": "function"}]}, 400, "tools"),
    "a tool message": ({"model": "lightfoot", "messages": [user(), {"role": "tool", "content": "x",
                                                                     "tool_call_id": "c1"}, user()]}, 400, "messages"),
    "a tool call": ({"model": "lightfoot", "messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]}, user()]}, 400,
                    "messages"),
    "an unknown role": ({"model": "lightfoot", "messages": [{"role": "root", "content": "x"}, user()]}, 400,
                        "messages"),
    "an unknown field": ({"model": "lightfoot", "messages": [user()], "principal": "operator"}, 400, "principal"),
    "an unknown model": ({"model": "gpt-4o", "messages": [user()]}, 404, "model"),
    "no model": ({"messages": [user()]}, 400, "model"),
    "the last message not a user's": ({"model": "lightfoot", "messages": [user(), {"role": "assistant",
                                                                                    "content": "x"}]}, 400, "messages"),
    "an image part": ({"model": "lightfoot", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:,"}}]}]}, 400, "messages"),
    "too many messages": ({"model": "lightfoot", "messages": [user()] * (MAX_MESSAGES + 1)}, 400, "messages"),
    "no messages": ({"model": "lightfoot", "messages": []}, 400, "messages"),
    "a question too long": ({"model": "lightfoot", "messages": [user("x" * (MAX_QUESTION_CHARS + 1))]}, 400,
                            "messages"),
    "a name too long": ({"model": "lightfoot", "messages": [{"role": "user", "content": "x", "name": "n" * 65}]}, 400,
                        "messages"),
    "n of 2": ({"model": "lightfoot", "messages": [user()], "n": 2}, 400, "n"),
    "stream not a boolean": ({"model": "lightfoot", "messages": [user()], "stream": "yes"}, 400, "stream"),
}


def test_malformed_bodies_and_refusals_get_the_openai_error_shape(doors):
    for name, (body, status, param) in MALFORMED.items():
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        got, payload = raw(doors, "/v1/chat/completions", data)
        assert got == status, (name, payload)
        error = payload["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"], (name, payload)
        assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error"), name
        assert error["param"] == param, (name, error)
    assert not doors.chat.requests, "no malformed body reached the answer model"
    # The gate, the token check and the router answer /v1/ in the same shape.
    for path, body, token, status, kind in [
        ("/v1/chat/completions", json.dumps({"model": "lightfoot", "messages": [user()]}).encode(), None, 401,
         "authentication_error"),
        ("/v1/models", None, "not-a-token-" + "x" * 20, 401, "authentication_error"),
        ("/v1/embeddings", None, READER_TOKEN, 404, "not_found_error"),
        ("/v1/chat/completions", b"x" * (64 * 1024 + 1), READER_TOKEN, 413, "invalid_request_error"),
    ]:
        got, payload = raw(doors, path, body, token)
        assert got == status and payload["error"]["type"] == kind, (path, payload)
    got, payload = raw(doors, "/v1/chat/completions", b"{}", READER_TOKEN, content_type="text/plain")
    assert got == 415 and payload["error"]["type"] == "invalid_request_error"
    # The openai client raises its own errors from them.
    with pytest.raises(openai.BadRequestError):
        client(doors, READER_TOKEN).chat.completions.create(model="lightfoot", messages=[{"role": "user",
                                                                                          "content": ""}])
    with pytest.raises(openai.AuthenticationError):
        client(doors, "wrong-token-" + "w" * 20).models.list()


def test_the_conversation_given_to_the_answer_model_is_bounded():
    turns = [("user" if n % 2 == 0 else "assistant", f"turn {n}") for n in range(20)]
    kept = conversation_context(turns)
    assert [t["content"] for t in kept] == [f"turn {n}" for n in range(20 - HISTORY_TURNS, 20)]
    long = [("user", "a" * (HISTORY_CHARS - 10)), ("assistant", "b" * 20), ("user", "c" * 5)]
    assert [t["content"][0] for t in conversation_context(long)] == ["b", "c"]  # the oldest dropped, none cut
    assert conversation_context([("system", "rules"), ("developer", "more"), ("user", "q")]) == (
        {"role": "user", "content": "q"},)
    request = parse_chat_request(json.dumps({"model": "lightfoot", "temperature": 0.2, "messages": [
        {"role": "user", "content": "first"}, {"role": "assistant", "content": None}, user()]}).encode())
    assert request.question == QUESTION and request.history == ({"role": "user", "content": "first"},)
    with pytest.raises(ChatError, match="lone surrogate"):
        parse_chat_request(b'{"model": "lightfoot", "messages": [{"role": "user", "content": "\\ud800"}]}')


def test_a_service_without_an_answer_model_says_so_in_the_openai_shape(sample_snapshot_store, hashing_embedder):
    from starlette.testclient import TestClient

    from lightfoot_pipeline.service.app import make_app
    from lightfoot_pipeline.service.queries import QueryService
    from lightfoot_pipeline.store.store import Store

    service = QueryService(Store(str(sample_snapshot_store)), hashing_embedder, charge_ledger=False)
    assert service.refresh()
    try:
        app = TestClient(make_app(service), base_url="http://127.0.0.1")
        response = app.post("/v1/chat/completions", json={"model": "lightfoot", "messages": [user()]})
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "answers_unavailable"
        assert app.get("/v1/models").json()["data"][0]["id"] == "lightfoot"
    finally:
        service.close()
