"""The deep query mode on the bundled sample, through a scripted chat-completions server on
loopback: a whole dialogue, what the prompts carry, the memory operations, the step cap, the
budgets, malformed and refused replies at each step, and an unreachable endpoint."""

from __future__ import annotations

import json
import shutil
import socket

import pytest

from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.retrieval.answer import AnswerBudget
from lightfoot_pipeline.retrieval.deep import DeepQuery, DeepQueryError, DeepSettings, charges, trace_lines
from lightfoot_pipeline.retrieval.deep.prompts import ANSWER_SYSTEM, CHECK_SYSTEM, MEMORY_SYSTEM
from lightfoot_pipeline.retrieval.retrieve import Retriever
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.store import Store

pytestmark = [pytest.mark.slow]

QUESTION = "Who was the first president of the association which published Journal of Psychotherapy Integration?"


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory, sample_store_built, hashing_embedder):
    """A copy of the session's store of the bundled sample (tests/conftest.py), with a snapshot."""
    root = tmp_path_factory.mktemp("deep") / "store"
    shutil.copytree(sample_store_built, root)
    store = Store(str(root))
    export_snapshot(store, hashing_embedder)
    return store


@pytest.fixture(scope="module")
def retriever(sample_store, hashing_embedder):
    return Retriever(load_snapshot(sample_store), hashing_embedder)


def client_for(server, **overrides) -> LLMClient:
    settings = LLMSettings(base_url=server.base_url, api_key="sk-test", model="deep-model", max_retries=0,
                           timeout_s=10, price_in_per_mtok=1.0, price_out_per_mtok=2.0, **overrides)
    return LLMClient(settings)


def stage(request) -> str:
    system = next(m["content"] for m in request.messages if m["role"] == "system")
    if system == MEMORY_SYSTEM:
        return "memory"
    if system == ANSWER_SYSTEM:
        return "answer"
    assert system.startswith(CHECK_SYSTEM[:60])
    return "check"


def reply(chat_server, payload) -> object:
    return chat_server.Reply(content=payload if isinstance(payload, str) else json.dumps(payload))


def op(kind: str, description: str = "", point: str = "", points=(), entities=(), facts=(), passages=()) -> dict:
    return {"op": kind, "point": point, "points": list(points), "description": description,
            "entities": list(entities), "facts": list(facts), "passages": list(passages)}


STEP1 = {"operations": [op("insert", "The journal is published by the American Psychological Association.",
                           entities=["E1"], facts=["F1"], passages=["P1"]),
                        op("insert", "The association had a first president.", passages=["P2"])]}
CHECK1 = {"sufficient": False, "reason": "the president is missing",
          "subqueries": [{"kind": "local", "point": "M1", "query": "first president of the association"},
                         {"kind": "global", "point": "", "query": "American Psychological Association president"}]}
STEP2 = {"operations": [op("update", "The APA publishes the journal; G. Stanley Hall was its first president.",
                           point="M1", passages=["P1"]),
                        op("merge", "G. Stanley Hall was the first president of the APA, which publishes it.",
                           points=["M1", "M2"]),
                        op("insert", "rests on evidence never given", entities=["E99"])]}
SUFFICIENT = {"sufficient": True, "reason": "the memory names the president", "subqueries": []}
ANSWER = {"answer": "G. Stanley Hall", "points": ["M3"]}


def script(chat_server, replies: dict[tuple[str, int], object], default=None):
    """Answer by (stage, how many calls of that stage came before + 1)."""
    seen: dict[str, int] = {}

    def answer(request):
        name = stage(request)
        seen[name] = seen.get(name, 0) + 1
        chosen = replies.get((name, seen[name]), default)
        return chosen if isinstance(chosen, chat_server.Reply) else reply(chat_server, chosen)

    chat_server.script(answer)


def dialogue(chat_server):
    script(chat_server, {("memory", 1): STEP1, ("check", 1): CHECK1, ("memory", 2): STEP2,
                         ("check", 2): SUFFICIENT, ("answer", 1): ANSWER})


def test_a_whole_dialogue_from_insufficient_memory_to_an_answer(chat_server, retriever, sample_store):
    dialogue(chat_server)
    result = DeepQuery(retriever, client_for(chat_server)).run(QUESTION)

    assert [stage(r) for r in chat_server.requests] == ["memory", "check", "memory", "check", "answer"]
    assert result.status == "answered" and result.answer == "G. Stanley Hall"
    first, second = result.steps[0], result.steps[1]
    # step 1 explores globally with the question itself; its prompt carries the facts and passages
    assert [(e.kind, e.query) for e in first.evidence] == [("global", QUESTION)]
    prompt = chat_server.requests[0].user_text
    assert first.evidence[0].facts and first.evidence[0].passages
    for fact in first.evidence[0].facts:
        assert fact.text in prompt
    for passage in first.evidence[0].passages:
        assert passage.text.strip() in prompt
    # the check's subqueries of both kinds are step 2's retrieval
    assert [(e.kind, e.point) for e in second.evidence] == [("local", "M1"), ("global", None)]
    local = second.evidence[0]
    index = DeepQuery(retriever, client_for(chat_server)).index
    anchors = [index.entity_nodes[e] for e in first.operations[0].entity_ids]
    import numpy as np

    _, around = index.neighbours(np.asarray(sorted(anchors)))
    assert local.passages and all(index.chunk_rows[p.chunk_id] in set(around.tolist()) for p in local.passages)
    step2_prompt = chat_server.requests[2].user_text
    for item in second.evidence:
        for passage in item.passages:
            assert passage.text.strip() in step2_prompt
    assert "M1: The journal is published by the American Psychological Association." in step2_prompt
    # the operations took effect: insert, update, merge; the one on evidence never given is refused
    inserted = first.operations[0]
    assert inserted.applied and inserted.point == "M1"
    assert inserted.fact_ids == [first.evidence[0].facts[0].fact_id]
    assert inserted.chunk_ids == [first.evidence[0].passages[0].chunk_id]
    update, merge, refused = second.operations
    assert update.applied and merge.applied and merge.point == "M3" and merge.points == ["M1", "M2"]
    assert not refused.applied and "at least one" in refused.reason and "E99" in refused.notes[0]
    assert list(result.memory.points) == ["M3"]
    merged = result.memory.points["M3"]
    assert set(merged.chunk_ids) >= {inserted.chunk_ids[0], first.operations[1].chunk_ids[0]}
    assert merged.description.startswith("G. Stanley Hall was the first president")
    # the answer is written from the memory and names its points, with their chunks and facts
    answer_prompt = chat_server.requests[-1].user_text
    assert "M3: G. Stanley Hall was the first president" in answer_prompt
    assert result.passages and result.passages[0].chunk_id == merged.chunk_ids[0]
    assert len(result.passages) <= 10 and result.passages[0].text.strip() in answer_prompt
    [used] = result.provenance()
    assert used["point"] == "M3" and used["chunks"][0] == {"chunk_id": merged.chunk_ids[0],
                                                           "doc_id": result.doc_ids[merged.chunk_ids[0]]}
    assert [f["fact_id"] for f in used["facts"]] == merged.fact_ids
    # calls, cost and the ledger
    assert [c.stage for c in result.calls] == ["memory", "check", "memory", "check", "answer"]
    assert result.cost_usd > 0
    rows = charges(result, "run-test", (1.0, 2.0, "configured"))
    ledger.record(sample_store, rows)
    written = ledger.read(sample_store, "run-test")
    assert sorted(written.get_column("purpose").to_list()) == sorted(
        ["deep-memory", "deep-check", "deep-memory", "deep-check", "deep-answer"])
    assert written.get_column("cost_usd").sum() == pytest.approx(result.cost_usd)
    lines = "\n".join(trace_lines(result.as_dict()))
    assert "local on M1" in lines and "merge M1 + M2 -> M3" in lines and "insert refused" in lines


def test_without_traces_a_result_keeps_ids_not_text(chat_server, retriever):
    dialogue(chat_server)
    result = DeepQuery(retriever, client_for(chat_server)).run(QUESTION)
    ids_only = json.dumps(result.as_dict(text=False))
    for text in (QUESTION, "G. Stanley Hall", "first president of the association", "American Psychological"):
        assert text not in ids_only
    assert result.memory.points["M3"].chunk_ids[0] in ids_only
    assert "G. Stanley Hall" in json.dumps(result.as_dict(text=True))


def test_the_step_cap_ends_the_loop_and_the_answer_comes_from_memory(chat_server, retriever):
    always_more = {"sufficient": False, "reason": "more", "subqueries": [{"kind": "global", "point": "",
                                                                          "query": "psychology association"}]}
    script(chat_server, {("answer", 1): ANSWER, ("check", 1): always_more, ("check", 2): always_more},
           default=STEP1)
    result = DeepQuery(retriever, client_for(chat_server), DeepSettings(max_steps=2)).run(QUESTION)
    assert [stage(r) for r in chat_server.requests] == ["memory", "check", "memory", "answer"]
    assert result.cap_reached and result.status == "answered" and "step cap of 2" in result.reason
    assert len(result.memory) == 4  # two insertions a step


@pytest.mark.parametrize("where, expected", [
    (("memory", 1), "step 1: unusable memory reply"),
    (("check", 1), "step 1: unusable check reply"),
    (("memory", 2), "step 2: unusable memory reply"),
    (("check", 2), "step 2: unusable check reply"),
    (("answer", 1), "unusable answer reply"),
])
def test_a_malformed_reply_at_any_step_ends_the_question_with_its_memory(chat_server, retriever, where, expected):
    replies = {("memory", 1): STEP1, ("check", 1): CHECK1, ("memory", 2): STEP2, ("check", 2): SUFFICIENT,
               ("answer", 1): ANSWER}
    replies[where] = '{"something": ' if where[0] != "answer" else "{}"
    script(chat_server, replies)
    engine = DeepQuery(retriever, client_for(chat_server))
    result = engine.run(QUESTION)
    assert result.status == "stopped" and result.reason.startswith(expected) and result.answer is None
    assert len(chat_server.requests) == list(replies).index(where) + 1
    held = {("memory", 1): 0, ("check", 1): 2, ("memory", 2): 2, ("check", 2): 1, ("answer", 1): 1}[where]
    assert len(result.memory) == held
    assert result.calls[-1].record.error == result.reason  # charged as unusable
    # the next question is not affected
    chat_server.reset()
    dialogue(chat_server)
    assert engine.run(QUESTION).answer == "G. Stanley Hall"


def test_a_refusal_ends_the_question(chat_server, retriever):
    script(chat_server, {("memory", 1): STEP1,
                         ("check", 1): chat_server.Reply(content="", finish_reason="content_filter")})
    result = DeepQuery(retriever, client_for(chat_server)).run(QUESTION)
    assert result.status == "stopped" and "refused the check call" in result.reason
    assert len(result.memory) == 2


def test_replies_that_stray_from_the_schema_are_read(chat_server, retriever):
    fenced = "Here you go:\n```json\n" + json.dumps(STEP1)[:-1] + ",}\n```"
    wordy_check = ("{'Sufficient': 'no', 'Reason': 'more', 'queries': ['first APA president', "
                   "{'kind': 'local', 'point': '1', 'query': 'APA founders'}]}")
    script(chat_server, {("memory", 1): fenced, ("check", 1): wordy_check, ("memory", 2): '{"ops": []}',
                         ("check", 2): '{"sufficient": true, "reason": "ok", "subqueries": [', ("answer", 1): ANSWER})
    result = DeepQuery(retriever, client_for(chat_server)).run(QUESTION)
    assert result.status == "answered", result.reason
    assert [(e.kind, e.point) for e in result.steps[1].evidence] == [("global", None), ("local", "M1")]
    assert "code fence removed" in result.steps[0].notes
    assert result.steps[1].check.sufficient and "truncated JSON closed" in result.steps[1].check.notes
    # the answer named M3, which this memory lacks: every point is listed instead
    assert result.used_points == ["M1", "M2"]
    assert "answer: the answer named no memory point: every point is listed" in result.steps[-1].notes


def test_the_question_budget_stops_a_call_before_it_is_made(chat_server, retriever):
    dialogue(chat_server)
    probe = DeepQuery(retriever, client_for(chat_server))
    answered = probe.run(QUESTION)
    assert answered.status == "answered"
    holds = [probe.worst_case_usd(r.messages, c.stage) for r, c in zip(chat_server.requests, answered.calls,
                                                                         strict=True)]
    costs = [c.record.cost_usd for c in answered.calls]
    # what call k needs free: the spend before it and its own hold; the first call that needs more
    # than every call before it is the one a budget of that earlier most stops
    needs = [sum(costs[:k]) + hold for k, hold in enumerate(holds)]
    stop = next(k for k in range(1, len(needs)) if needs[k] > max(needs[:k]))
    for budget, calls in ((holds[0] * 0.99, 0), (max(needs[:stop]), stop)):
        chat_server.reset()
        dialogue(chat_server)
        result = DeepQuery(retriever, client_for(chat_server), DeepSettings(question_budget_usd=budget)).run(QUESTION)
        assert result.status == "stopped" and result.reason.startswith("budget: the ")
        assert "more than is left of the question's" in result.reason
        assert len(result.calls) == chat_server.count == calls
        if calls == 0:
            assert len(result.memory) == 0
        assert result.cost_usd <= budget
        assert all(r.body["max_tokens"] == DeepSettings().tokens(stage(r)) for r in chat_server.requests)


def test_the_run_budget_stops_every_question_once_spent(chat_server, retriever):
    dialogue(chat_server)
    run_budget = AnswerBudget(0.0)
    result = DeepQuery(retriever, client_for(chat_server), budget=run_budget).run(QUESTION)
    assert result.status == "stopped" and "run's budget of $0" in result.reason
    assert chat_server.count == 0 and run_budget.exhausted


def test_an_unreachable_endpoint_fails_at_once_saying_where(retriever):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = LLMClient(LLMSettings(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout_s=5))
    with pytest.raises(DeepQueryError, match=f"127.0.0.1:{port}") as caught:
        DeepQuery(retriever, client).run(QUESTION)
    assert caught.value.result is not None and len(caught.value.result.calls) == 1


def test_settings_come_from_the_environment_and_are_checked():
    from lightfoot_pipeline.settings import SettingsError

    settings = DeepSettings.from_env({"LIGHTFOOT_DEEP_MAX_STEPS": "2", "LIGHTFOOT_DEEP_PASSAGES": "6",
                                      "LIGHTFOOT_DEEP_QUESTION_BUDGET_USD": "0.5"})
    assert (settings.max_steps, settings.passages, settings.question_budget_usd) == (2, 6, 0.5)
    assert DeepSettings.from_env({"LIGHTFOOT_DEEP_MAX_STEPS": "2"}, max_steps=4).max_steps == 4
    with pytest.raises(SettingsError, match="LIGHTFOOT_DEEP_MAX_STEPS"):
        DeepSettings.from_env({"LIGHTFOOT_DEEP_MAX_STEPS": "many"})
    with pytest.raises(SettingsError, match="max_steps must be from 1 to 10"):
        DeepSettings.from_env({"LIGHTFOOT_DEEP_MAX_STEPS": "0"})


def test_a_point_on_passages_alone_is_investigated_at_the_entities_they_mention(chat_server, retriever):
    only_passages = {"operations": [op("insert", "The association had a first president.", passages=["P2"])]}
    local = {"sufficient": False, "reason": "more",
             "subqueries": [{"kind": "local", "point": "M1", "query": "first president"}]}
    script(chat_server, {("memory", 1): only_passages, ("check", 1): local, ("memory", 2): {"operations": []},
                         ("check", 2): SUFFICIENT, ("answer", 1): ANSWER})
    result = DeepQuery(retriever, client_for(chat_server)).run(QUESTION)
    [investigation] = result.steps[1].evidence
    assert investigation.kind == "local" and investigation.point == "M1" and not investigation.note
    assert investigation.passages
