"""The OpenAI-compatible client against a real HTTP server on loopback."""

from __future__ import annotations

import datetime as dt
import email.utils
import logging
import socket
import time

import pytest

from lightfoot_pipeline.models.llm import LLMClient, LLMError, LLMSettings, prompt_token_bound, retry_after_seconds

SCHEMA = {"title": "answer", "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": False}
HELLO = [{"role": "user", "content": "Say hello as JSON."}]
SECRET = "sk-test-0123456789abcdef"


def client_for(server, **overrides) -> LLMClient:
    values = dict(base_url=server.base_url, api_key=SECRET, model="test-model", backoff_s=0.01, backoff_max_s=0.05,
                  timeout_s=5.0)
    settings = LLMSettings(**{**values, **overrides})
    return LLMClient(settings)


# -- settings ----------------------------------------------------------------------------------


def test_settings_from_env_read_every_variable_and_keep_the_key_out_of_repr():
    env = {
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": SECRET, "OPENAI_MODEL": "fallback",
        "LIGHTFOOT_LLM_MODEL": "gpt-4o-mini", "LIGHTFOOT_LLM_TIMEOUT_S": "12.5", "LIGHTFOOT_LLM_MAX_RETRIES": "2",
        "LIGHTFOOT_LLM_CONCURRENCY": "3", "LIGHTFOOT_LLM_PRICE_IN": "0.2", "LIGHTFOOT_LLM_OUTPUT_MODE": "json_object",
        "LIGHTFOOT_LLM_BACKOFF_S": "0.5",
    }
    settings = LLMSettings.from_env(env, concurrency=5)
    assert settings.base_url == "http://127.0.0.1:9/v1"
    assert settings.api_key == SECRET
    assert settings.model == "gpt-4o-mini"  # LIGHTFOOT_LLM_MODEL wins over OPENAI_MODEL
    assert (settings.timeout_s, settings.max_retries, settings.backoff_s) == (12.5, 2, 0.5)
    assert settings.concurrency == 5  # keyword arguments win over the environment
    assert settings.output_mode == "json_object"
    # A configured input price, the list price for output.
    assert settings.prices() == (0.2, 0.60, "configured")
    assert SECRET not in repr(settings) and SECRET not in str(settings)
    assert SECRET not in repr(LLMClient(settings))


def test_settings_name_the_variable_that_is_wrong():
    with pytest.raises(ValueError, match="LIGHTFOOT_LLM_MAX_RETRIES"):
        LLMSettings.from_env({"LIGHTFOOT_LLM_MAX_RETRIES": "three"})
    with pytest.raises(ValueError, match="output_mode"):
        LLMSettings.from_env({"LIGHTFOOT_LLM_OUTPUT_MODE": "yaml"})
    with pytest.raises(ValueError, match="concurrency"):
        LLMSettings(concurrency=0)
    with pytest.raises(ValueError, match="batch_file_ttl_s must be 0 or between"):
        LLMSettings.from_env({"LIGHTFOOT_LLM_BATCH_FILE_TTL_S": "3600"})  # shorter than the batch's window
    assert LLMSettings.from_env({"LIGHTFOOT_LLM_BATCH_FILE_TTL_S": "0"}).batch_file_ttl_s == 0  # asks for none


def test_an_unpriced_model_costs_nothing_and_a_listed_one_its_list_price():
    assert LLMSettings(model="no-such-model").prices() == (0.0, 0.0, "unpriced")
    assert LLMSettings().prices() == (0.10, 0.32, "list")


def test_retry_after_headers():
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    future = email.utils.format_datetime(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30), usegmt=True)
    assert 25 <= retry_after_seconds({"retry-after": future}) <= 31
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


# -- calls -------------------------------------------------------------------------------------


def test_one_request_with_structured_output_and_usage(chat_server):
    chat_server.queue(chat_server.Reply(content='{"a":1}', usage=(40, 3)))
    completion = client_for(chat_server).complete(HELLO, json_schema=SCHEMA, max_tokens=50)
    assert chat_server.count == 1
    request = chat_server.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "test-model"
    assert request.body["max_tokens"] == 50
    assert request.body["response_format"]["type"] == "json_schema"
    assert request.body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert {k.lower(): v for k, v in request.headers.items()}["authorization"] == f"Bearer {SECRET}"
    assert (completion.text, completion.tokens_in, completion.tokens_out) == ('{"a":1}', 40, 3)
    assert completion.attempts == 1 and completion.mode == "json_schema" and completion.usage_reported


def test_429_is_retried_after_the_wait_the_server_asks_for(chat_server):
    chat_server.queue(chat_server.Reply(status=429, headers={"retry-after-ms": "300"}),
                      chat_server.Reply(content='{"a":1}'))
    started = time.monotonic()
    completion = client_for(chat_server).complete(HELLO, json_schema=SCHEMA)
    assert chat_server.count == 2
    assert (completion.attempts, completion.retries) == (2, 1)  # one call, retried once
    assert time.monotonic() - started >= 0.3


def test_5xx_is_retried_until_the_retries_give_up(chat_server):
    chat_server.queue(chat_server.Reply(status=500))
    with pytest.raises(LLMError) as caught:
        client_for(chat_server, max_retries=2).complete(HELLO)
    assert caught.value.kind == "server_error"
    assert caught.value.status == 500
    assert (caught.value.attempts, caught.value.retries) == (3, 2)
    assert chat_server.count == 3


def test_a_client_passed_in_makes_no_retry_of_its_own(chat_server):
    import openai

    chat_server.queue(chat_server.Reply(status=500))
    own_retries = openai.OpenAI(base_url=chat_server.base_url, api_key=SECRET, max_retries=5)
    settings = LLMSettings(base_url=chat_server.base_url, api_key=SECRET, model="test-model", backoff_s=0.01,
                           max_retries=1)
    with pytest.raises(LLMError) as caught:
        LLMClient(settings, own_retries).complete(HELLO)
    # Every request is one the client counted: two, not six from the openai client's own retries.
    assert chat_server.count == 2
    assert (caught.value.attempts, caught.value.retries) == (2, 1)


def test_every_call_of_every_client_is_counted_for_the_process(chat_server):
    chat_server.queue(chat_server.Reply(status=500), chat_server.Reply(content='{"a":1}'),
                      chat_server.Reply(status=401))
    first, second = client_for(chat_server, max_retries=1), client_for(chat_server, max_retries=0)
    before = LLMClient.calls_started()
    assert first.complete(HELLO).attempts == 2  # one call, two requests
    with pytest.raises(LLMError):
        second.complete(HELLO)  # a call that fails counts too
    assert LLMClient.calls_started() - before == 2 and chat_server.count == 3


def test_other_4xx_is_not_retried(chat_server):
    chat_server.queue(chat_server.Reply(status=400))
    with pytest.raises(LLMError) as caught:
        client_for(chat_server).complete(HELLO)
    assert caught.value.kind == "bad_request"
    assert chat_server.count == 1


def test_a_timeout_is_retried(chat_server):
    chat_server.queue(chat_server.Reply(content='{"a":1}', delay=1.5), chat_server.Reply(content='{"a":2}'))
    completion = client_for(chat_server, timeout_s=0.3).complete(HELLO)
    assert completion.text == '{"a":2}'
    assert chat_server.count == 2


def test_timeouts_until_the_retries_give_up(chat_server):
    chat_server.queue(chat_server.Reply(content='{"a":1}', delay=1.0))
    with pytest.raises(LLMError) as caught:
        client_for(chat_server, timeout_s=0.2, max_retries=1).complete(HELLO)
    assert caught.value.kind == "timeout"
    assert chat_server.count == 2


def test_an_endpoint_without_structured_output_falls_back_and_is_remembered(chat_server):
    def no_json_schema(request):
        if request.response_format == "json_schema":
            return chat_server.Reply(status=400)
        return chat_server.Reply(content='{"a":1}')

    chat_server.script(no_json_schema)
    client = client_for(chat_server)
    first = client.complete(HELLO, json_schema=SCHEMA)
    assert first.mode == "json_object" and first.attempts == 2
    assert [r.response_format for r in chat_server.requests] == ["json_schema", "json_object"]
    assert client.mode == "json_object"
    chat_server.reset()
    second = client.complete(HELLO, json_schema=SCHEMA)
    assert second.attempts == 1
    assert [r.response_format for r in chat_server.requests] == ["json_object"]


def test_a_plain_prompt_when_the_endpoint_takes_no_response_format(chat_server):
    chat_server.script(lambda r: chat_server.Reply(status=422) if r.response_format else chat_server.Reply(content="{}"))
    client = client_for(chat_server)
    assert client.complete(HELLO, json_schema=SCHEMA).mode == "prompt"
    assert chat_server.count == 3
    assert client.mode == "prompt"


def test_a_bad_request_in_every_mode_does_not_downgrade_the_client(chat_server):
    chat_server.queue(chat_server.Reply(status=400))
    client = client_for(chat_server)
    with pytest.raises(LLMError) as caught:
        client.complete(HELLO, json_schema=SCHEMA)
    assert caught.value.kind == "bad_request"
    assert chat_server.count == 3  # json_schema, json_object, then a plain prompt
    assert client.mode == "json_schema"


def test_a_fixed_output_mode_does_not_fall_back(chat_server):
    chat_server.queue(chat_server.Reply(status=400))
    with pytest.raises(LLMError):
        client_for(chat_server, output_mode="json_schema").complete(HELLO, json_schema=SCHEMA)
    assert chat_server.count == 1


def test_the_key_is_never_in_errors_or_logs(chat_server, caplog):
    def echo_key(request):
        auth = {k.lower(): v for k, v in request.headers.items()}["authorization"]
        return chat_server.Reply(status=401 if request.number == 1 else 503,
                                 body='{"error":{"message":"bad key ' + auth + '"}}')

    chat_server.script(echo_key)
    caplog.set_level(logging.DEBUG)
    client = client_for(chat_server, max_retries=1)
    with pytest.raises(LLMError) as first:
        client.complete(HELLO)
    with pytest.raises(LLMError) as second:
        client.complete(HELLO)
    assert first.value.kind == "auth" and second.value.kind == "server_error"
    for err in (first.value, second.value):
        assert "bad key" in str(err)  # the server's message is kept …
        assert SECRET not in str(err) and SECRET not in repr(err)  # … without the key
    assert SECRET not in caplog.text


def test_an_unreachable_endpoint(chat_server):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = LLMSettings(base_url=f"http://127.0.0.1:{port}/v1", backoff_s=0.01, max_retries=1)
    with pytest.raises(LLMError) as caught:
        LLMClient(settings).complete(HELLO)
    assert caught.value.kind == "unreachable"
    assert caught.value.attempts == 2


def test_no_endpoint_and_no_key_is_a_configuration_error():
    with pytest.raises(LLMError) as caught:
        LLMClient(LLMSettings(base_url=None, api_key=None))
    assert caught.value.kind == "config"


def test_missing_usage_is_estimated_and_marked(chat_server):
    body = ('{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,'
            '"finish_reason":"length","message":{"role":"assistant","content":"' + "word " * 40 + '"}}]}')
    chat_server.queue(chat_server.Reply(body=body))
    completion = client_for(chat_server).complete(HELLO)
    assert not completion.usage_reported
    assert completion.tokens_out == 201  # no max_tokens: the reply's 200 bytes bound its tokens (and an end)
    assert completion.tokens_in == prompt_token_bound(HELLO)  # the most the prompt can be billed
    assert completion.truncated
    chat_server.queue(chat_server.Reply(body=body))
    capped = client_for(chat_server).complete(HELLO, max_tokens=64)
    assert (capped.tokens_in, capped.tokens_out) == (prompt_token_bound(HELLO), 64)  # the worst case held
