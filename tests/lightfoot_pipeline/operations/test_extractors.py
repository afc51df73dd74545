"""The extractor a deployment chose (operations/extractors.py): which passages go to the model,
replay without a call, a model that cannot be reached failing its passages with the reason, and
a mode that does not exist refused."""

from __future__ import annotations

import pytest

from lightfoot_pipeline.ingest.passages import split_passages
from lightfoot_pipeline.operations.extractors import ExtractionChoice, ModelEndpoint
from lightfoot_pipeline.settings import IndexSettings, SettingsError


def test_each_mode_sends_the_passages_it_says_to_the_model():
    recorded = {"has-recording"}
    asked = {mode: [ExtractionChoice(mode).asks_model(d, recorded) for d in ("has-recording", "none")]
             for mode in ("auto", "replay", "openai", "openai-batch")}
    assert asked == {"auto": [False, True], "replay": [False, False], "openai": [True, True],
                     "openai-batch": [False, True]}
    assert ExtractionChoice("openai-batch").batched and not ExtractionChoice("auto").batched


def test_an_unusable_model_fails_the_passages_with_the_reason(store, sample_documents, monkeypatch):
    monkeypatch.setenv("LIGHTFOOT_LLM_MAX_RETRIES", "0")  # nothing listens there; no point waiting
    choice = ExtractionChoice("auto", ModelEndpoint("http://127.0.0.1:9/v1", model="nobody", api_key="k"))
    outcomes = choice.extractor(store, IndexSettings(), {}, "run-1").extract(split_passages(sample_documents[0], 4000))
    assert [o.status for o in outcomes] == ["failed"]
    assert "cannot reach http://127.0.0.1:9/v1" in outcomes[0].reason


def test_replay_mode_never_calls_a_model(store, sample_documents, sample_records):
    first, second = sample_documents[:2]
    passages = [*split_passages(first, 4000), *split_passages(second, 4000)]
    outcomes = ExtractionChoice("replay").extractor(store, IndexSettings(), {first.doc_id: sample_records[first.doc_id]},
                                                    "run-1").extract(passages)
    assert [o.status for o in outcomes] == ["ok", "failed"]
    assert "replay mode" in outcomes[1].reason and outcomes[1].model_calls == 0


def test_the_endpoint_given_wins_over_the_environment_and_a_bad_mode_is_refused(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("LIGHTFOOT_LLM_MODEL", "from-environment")
    settings = ModelEndpoint(base_url="http://127.0.0.1:2/v1").llm_settings()
    assert (settings.base_url, settings.model) == ("http://127.0.0.1:2/v1", "from-environment")
    assert ModelEndpoint(base_url="http://127.0.0.1:2/v1").batch_api() is not None
    monkeypatch.setenv("LIGHTFOOT_LLM_MAX_RETRIES", "-1")  # settings that cannot be used: no Batch API, no error
    assert ModelEndpoint().batch_api() is None
    with pytest.raises(SettingsError, match="auto, replay, openai or openai-batch, not 'gpt'"):
        ExtractionChoice("gpt")
