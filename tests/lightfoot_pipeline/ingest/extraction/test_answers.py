"""The model's answers put in the extraction cache by one of several runs: a passage text another
run holds is waited for, taken over when that run ended without an answer, and never asked twice."""

from __future__ import annotations

import json
import threading
import time

from lightfoot_pipeline.ingest.extraction.answers import CachedAnswers, answer_passages
from lightfoot_pipeline.ingest.extraction.claims import ExtractionClaims
from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.models.llm import LLMSettings

TEXTS = ["Warsaw is the capital of Poland.", "Kraków lies on the Vistula.", "Gdańsk is a port on the Baltic Sea."]
PASSAGES = [Passage(f"chunk-{i}", f"doc-{i}", 0, text.split()[0], text) for i, text in enumerate(TEXTS)]


def answer(request):
    name = request.user_text.split("<passage>\n", 1)[1].split("\n", 1)[1].split()[0]
    return json.dumps({"entities": [{"name": name, "type": "location", "description": "a city"}], "facts": []})


def extractor(store, server, run_id: str, **overrides):
    settings = dict(base_url=server.base_url, api_key="sk-test", model="test-model", backoff_s=0.01,
                    backoff_max_s=0.05, timeout_s=5.0, max_retries=0, concurrency=2)
    settings.update(overrides)
    return build_openai_extractor(store, llm_settings=LLMSettings(**settings), run_id=run_id)


def test_a_text_held_by_a_finished_run_is_taken_over_and_asked_once(store, chat_server):
    chat_server.script(lambda r: chat_server.Reply(content=answer(r)))
    model = extractor(store, chat_server, "run-b")
    ExtractionClaims(store, "run-a").claim([model.cache_key(PASSAGES[0])])  # run-a died holding it

    report = answer_passages(model, ExtractionClaims(store, "run-b"), PASSAGES, poll_s=0.05,
                             finished=lambda claimant: claimant == "run-a")
    assert (report.texts, report.asked, report.cached, report.answered_elsewhere) == (3, 3, 0, 0)
    assert chat_server.count == 3
    outcomes = CachedAnswers(extractor(store, chat_server, "run-c"), ExtractionClaims(store, "run-c")).extract(PASSAGES)
    assert [o.status for o in outcomes] == ["ok"] * 3 and all(o.cached for o in outcomes)
    assert chat_server.count == 3, "reading the cache asks nothing"


def test_a_text_another_run_is_asking_is_waited_for_not_asked(store, chat_server):
    chat_server.script(lambda r: chat_server.Reply(content=answer(r)))
    holder = ExtractionClaims(store, "run-a")
    held = extractor(store, chat_server, "run-a")
    holder.claim([held.cache_key(PASSAGES[0])])

    def answer_later():  # run-a answers its text a moment later, then releases it
        time.sleep(0.5)
        held.extract(PASSAGES[:1])
        holder.release([held.cache_key(PASSAGES[0])])

    thread = threading.Thread(target=answer_later)
    thread.start()
    report = answer_passages(extractor(store, chat_server, "run-b"), ExtractionClaims(store, "run-b"), PASSAGES,
                             poll_s=0.05)
    thread.join()
    assert (report.asked, report.answered_elsewhere) == (2, 1)
    assert chat_server.count == 3, "every text asked once in all"


def test_an_unanswered_text_keeps_its_reason_for_the_committing_step(store, chat_server):
    chat_server.script(lambda r: chat_server.Reply(status=503) if "Gdańsk" in r.user_text
                       else chat_server.Reply(content=answer(r)))
    model = extractor(store, chat_server, "run-a")
    report = answer_passages(model, ExtractionClaims(store, "run-a"), PASSAGES, poll_s=0.05)
    assert [o.chunk_id for o in report.unanswered] == ["chunk-2"]
    outcomes = CachedAnswers(model, ExtractionClaims(store, "run-a")).extract(PASSAGES)
    assert [o.status for o in outcomes] == ["ok", "ok", "failed"]
    assert "HTTP 503" in outcomes[2].reason
    never_asked = Passage("chunk-9", "doc-9", 0, "Łódź", "Łódź is a city in Poland.")
    (outcome,) = CachedAnswers(model, ExtractionClaims(store, "run-a")).extract([never_asked])
    assert outcome.status == "failed" and "the model was not asked" in outcome.reason
