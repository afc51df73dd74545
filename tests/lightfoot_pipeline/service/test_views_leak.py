"""Nothing of a document a principal may not read leaks through any door of the service.

A canary ("ZEBRACANARY") is planted in a document only the group ``legal`` reads: in its id, its
title and text, in an entity name only it gives, in a fact and in that fact's evidence quote. The
document shares entities with public ones (Orbital Corp, Mira Kalden), so that a view that let
anything through would let it through here. As a principal of no group, every response of
``/query`` (answered by the loopback chat server, whose every prompt is kept), ``/explain/query``,
``/explain/entity``, ``/explain/fact``, ``/explain/doc``, ``/status``, ``/snapshot``, the deep
mode (every prompt), batch views and deletion previews, and the page in headless Chromium holds
the canary 0 times; the restricted entity, fact and document are answered as unknown ones are,
but for the name asked. A principal of ``legal`` sees the canary through the same doors (the
positive control, so that the test can fail).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import Document, load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.retrieval.answer import AnswerBudget, Answerer
from lightfoot_pipeline.retrieval.deep.prompts import ANSWER_SYSTEM, CHECK_SYSTEM, MEMORY_SYSTEM
from lightfoot_pipeline.service.app import HttpLimits
from lightfoot_pipeline.service.auth import Tokens, token_line
from lightfoot_pipeline.service.queries import QueryService
from lightfoot_pipeline.service.server import QueryServer
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import latest_snapshot
from lightfoot_pipeline.store.batches import DAGSTER, Batch, writing_batch
from lightfoot_pipeline.store.store import Store
from tests.assets.webserver import chromium
from tests.lightfoot_pipeline.permissions.conftest import write_readers
from tests.lightfoot_pipeline.service.pages import page_url, rendered

pytestmark = [pytest.mark.slow]

DATA = Path(__file__).parents[1] / "data" / "query-corpus"
CANARY = "zebracanary"  # looked for case-insensitively
SECRET = Document(doc_id="q-zebracanary", title="ZEBRACANARY lab",
                  text="The ZEBRACANARY lab of Orbital Corp was founded by Mira Kalden in Tallinn.")
SECRET_RECORD = {"doc_id": SECRET.doc_id, "entities": [{"name": "ZEBRACANARY lab"}, {"name": "Orbital Corp"},
                                                        {"name": "Mira Kalden"}],
                 "facts": [["ZEBRACANARY lab", "founded by", "Mira Kalden",
                            "The ZEBRACANARY lab of Orbital Corp was founded by Mira Kalden"],
                           ["ZEBRACANARY lab", "part of", "Orbital Corp"]]}
BATCH = "drop-2727aa"
OUTSIDER_TOKEN, COUNSEL_TOKEN = "outsider-token-" + "o" * 24, "counsel-token-" + "c" * 24
QUESTION = "Who founded the lab of Orbital Corp in Tallinn?"
UNKNOWN_ENTITY, UNKNOWN_DOC = "QUOKKAFERRET lab", "q-quokkaferret"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The query corpus and the secret document (readers: legal) in one batch, with a snapshot."""
    store = Store(str(tmp_path_factory.mktemp("views-leak") / "store"))
    embedder = HashingEmbedder(dim=32)
    replay = ReplayExtractor({**load_recorded_extractions(DATA), SECRET.doc_id: SECRET_RECORD})
    with writing_batch(Batch(BATCH, "run-2727", DAGSTER)):
        operations.ingest(store, [*load_corpus(DATA), SECRET], replay, embedder)
    write_readers(store, {SECRET.doc_id: ("legal",)})
    export_snapshot(store, embedder)
    return store, embedder


def answering(request) -> str:
    """The loopback model's reply to a deep memory step, a deep check, a deep answer or an answer
    prompt: each one its parser takes, so that a deep question runs to the step cap."""
    system = next((m["content"] for m in request.messages if m["role"] == "system"), "")
    if system == MEMORY_SYSTEM:
        return json.dumps({"operations": [{"op": "insert", "point": "", "points": [], "description": "A point.",
                                           "entities": ["E1"], "facts": ["F1"], "passages": ["P1", "P2"]}]})
    if system.startswith(CHECK_SYSTEM[:60]):
        return json.dumps({"sufficient": False, "reason": "more",
                           "subqueries": [{"kind": "global", "point": "", "query": "Orbital Corp lab founder"}]})
    if system == ANSWER_SYSTEM:
        return json.dumps({"answer": "Mira Kalden", "points": ["M1"]})
    return json.dumps({"answer": "Mira Kalden"})


@pytest.fixture(scope="module")
def tokens_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokens") / "tokens"
    path.write_text(f"{token_line(OUTSIDER_TOKEN, 'outsider')}\n{token_line(COUNSEL_TOKEN, 'counsel', 'legal')}\n")
    return path


@pytest.fixture
def served(built, tokens_file, chat_server):
    """A server over the store with the tokens file, answering through the loopback chat server."""
    store, embedder = built
    chat_server.script(lambda request: chat_server.Reply(content=answering(request)))
    client = LLMClient(LLMSettings(base_url=chat_server.base_url, model="answer-model", max_retries=0,
                                   price_in_per_mtok=1.0, price_out_per_mtok=2.0))
    service = QueryService(store, embedder, answerer=Answerer(client), budget=AnswerBudget(5.0), charge_ledger=False)
    assert service.refresh()
    server = QueryServer(service, "127.0.0.1", 0, tokens=Tokens(tokens_file=tokens_file), limits=HttpLimits()).start()
    yield server.url
    server.stop()
    service.close()


def call(base: str, path: str, token: str, body: dict | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method="POST" if body is not None else "GET",
                                     headers={"content-type": "application/json", "authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def doors(base: str, token: str, fact_id: str, chat_server) -> dict[str, tuple[int, str]]:
    """Every door, asked without naming the canary, and the prompts the model received meanwhile."""
    chat_server.reset()
    out = {
        "query": call(base, "/query", token, {"question": QUESTION, "top_k": 13}),
        "deep": call(base, "/query", token, {"question": QUESTION, "mode": "deep"}),
        "explain-query": call(base, "/explain/query", token, {"question": QUESTION, "top_k": 13}),
        "entity-shared": call(base, "/explain/entity?name=Orbital%20Corp", token),
        "entity-founder": call(base, "/explain/entity?name=Mira%20Kalden", token),
        "doc-shared": call(base, "/explain/doc?doc_id=q-orbital", token),
        "fact": call(base, "/explain/fact?fact_id=" + urllib.parse.quote(fact_id), token),
        "status": call(base, "/status", token),
        "snapshot": call(base, "/snapshot", token),
    }
    out["prompts"] = (200, json.dumps([r.body for r in chat_server.requests]))
    return out


def mentions(text: str) -> int:
    return text.lower().count(CANARY)


def same_but_for(one: tuple[int, str], other: tuple[int, str], asked: tuple[str, str]) -> bool:
    """Whether two responses are equal once each asked-for name is replaced by the same word."""
    def plain(response: tuple[int, str], name: str) -> tuple[int, str]:
        text = response[1]
        for form in (name, name.lower(), urllib.parse.quote(name)):
            text = text.replace(form, "NAME")
        return response[0], text
    return plain(one, asked[0]) == plain(other, asked[1])


def test_nothing_of_an_unreadable_document_leaks_and_its_reader_sees_it(built, served, chat_server):
    base = served
    status, entity = call(base, "/explain/entity?name=" + urllib.parse.quote(SECRET_RECORD["entities"][0]["name"]),
                          COUNSEL_TOKEN)
    assert status == 200 and mentions(entity) > 0
    [secret_entity] = json.loads(entity)["entities"]
    fact_id = next(f["fact_id"] for f in secret_entity["facts"] if f["predicate"] == "founded by")

    # The positive control: through the same doors, legal's principal sees the canary.
    seen = doors(base, COUNSEL_TOKEN, fact_id, chat_server)
    for name in ("query", "deep", "explain-query", "entity-shared", "entity-founder", "fact", "prompts"):
        assert seen[name][0] == 200 and mentions(seen[name][1]) > 0, (name, seen[name][1][:300])
    assert json.loads(seen["status"][1])["counts"]["documents"] == 13
    assert json.loads(seen["status"][1])["principal"] == {"principal": "counsel", "groups": ["legal"]}

    # The outsider: 0 times everywhere, prompts included.
    got = doors(base, OUTSIDER_TOKEN, fact_id, chat_server)
    for name, (status, text) in got.items():
        assert mentions(text) == 0, (name, text[:500])
        assert status in (200, 404), (name, status, text[:300])
    assert len(json.loads(got["prompts"][1])) >= 3, "the answer and the deep mode asked the model"
    query = json.loads(got["query"][1])
    assert query["answer_status"] == "answered" and len(query["passages"]) == 12
    store_fingerprint = latest_snapshot(built[0]).fingerprint
    assert query["snapshot"]["fingerprint"] != store_fingerprint and query["snapshot"]["view"].startswith("v-")
    status_body = json.loads(got["status"][1])
    assert status_body["principal"] == {"principal": "outsider", "groups": []}
    assert status_body["counts"]["documents"] == 12 and status_body["counts"]["passages"] == 12
    assert json.loads(got["snapshot"][1])["serving"]["counts"]["documents"] == 12
    assert json.loads(got["snapshot"][1])["serving"]["fingerprint"] == query["snapshot"]["fingerprint"]  # the view's

    # What names the canary itself is answered as what names nothing, but for the name.
    secret_name, secret_fact = SECRET_RECORD["entities"][0]["name"], fact_id
    unknown_fact = fact_id[:-6] + ("000000" if not fact_id.endswith("000000") else "111111")
    pairs = [
        (f"/explain/entity?name={urllib.parse.quote(secret_name)}",
         f"/explain/entity?name={urllib.parse.quote(UNKNOWN_ENTITY)}", (secret_name, UNKNOWN_ENTITY)),
        (f"/explain/entity?name={urllib.parse.quote('zebracanary')}",
         f"/explain/entity?name={urllib.parse.quote('quokkaferret')}", ("zebracanary", "quokkaferret")),
        (f"/explain/fact?fact_id={secret_fact}", f"/explain/fact?fact_id={unknown_fact}", (secret_fact, unknown_fact)),
        (f"/explain/doc?doc_id={SECRET.doc_id}", f"/explain/doc?doc_id={UNKNOWN_DOC}", (SECRET.doc_id, UNKNOWN_DOC)),
        (f"/explain/doc/preview?doc_id={SECRET.doc_id}", f"/explain/doc/preview?doc_id={UNKNOWN_DOC}",
         (SECRET.doc_id, UNKNOWN_DOC)),
        (f"/explain/batch?batch_id={BATCH}", "/explain/batch?batch_id=drop-000000", (BATCH, "drop-000000")),
    ]
    for secret_path, unknown_path, asked in pairs:
        secret, unknown = call(base, secret_path, OUTSIDER_TOKEN), call(base, unknown_path, OUTSIDER_TOKEN)
        assert secret[0] in (403, 404), (secret_path, secret)
        assert same_but_for(secret, unknown, asked), (secret, unknown)
        assert mentions(secret[1].replace(asked[0], "").replace(asked[0].lower(), "")) == 0, secret
    # The reader of the document gets it.
    assert call(base, f"/explain/doc?doc_id={SECRET.doc_id}", COUNSEL_TOKEN)[0] == 200
    assert call(base, f"/explain/fact?fact_id={secret_fact}", COUNSEL_TOKEN)[0] == 200
    # Neither is the operator: batch views and dry runs are refused, whatever is asked.
    assert call(base, f"/explain/batch?batch_id={BATCH}", COUNSEL_TOKEN)[0] == 403


def test_one_principals_answers_are_never_served_to_another(served):
    """The page's per-commit cache is keyed by the view: asked in turns, each gets its own."""
    for _ in range(2):
        for token, sees in ((COUNSEL_TOKEN, True), (OUTSIDER_TOKEN, False), (COUNSEL_TOKEN, True)):
            status, text = call(served, "/explain/entity?name=Orbital%20Corp", token)
            assert status == 200 and (mentions(text) > 0) == sees, token


@pytest.mark.skipif(chromium() is None, reason="no Chromium here (scripts/setup.sh installs it)")
@pytest.mark.parametrize("groups, sees", [((), False), (("legal",), True)], ids=["public-only", "legal"])
def test_the_page_in_headless_chromium_shows_only_the_view(built, tmp_path, groups, sees):
    """The page of a service without tokens on loopback, answering as ``--as`` says: a question,
    the panel of an entity the canary's document shares, and whom it answers as."""
    store, embedder = built
    service = QueryService(store, embedder)
    assert service.refresh()
    principal = Principal("reader", groups)
    server = QueryServer(service, "127.0.0.1", 0, tokens=None, limits=HttpLimits(), local_principal=principal).start()
    try:
        dom = rendered(page_url(server.url, QUESTION, "Orbital Corp"), tmp_path / "profile")
    finally:
        server.stop()
        service.close()
    assert re.search(r'<h2 id="entity-name">Orbital Corp', dom), dom[-2000:]
    assert len(re.findall(r'<li data-chunk="chunk-', dom)) == 10
    shown = "legal and public documents" if groups else "public documents only"
    assert f"answering as reader: {'groups ' if groups else ''}{shown}" in dom, dom[:3000]
    assert (mentions(dom) > 0) == sees, dom[-3000:]


def test_neither_the_chat_endpoint_nor_the_mcp_tools_let_the_canary_through(served, chat_server):
    """Both new doors, as the outsider and as legal's principal (the positive control): every
    chat completion (plain, streamed, deep), every prompt the answer model received for them, and
    every MCP tool's result over streamable HTTP hold the canary exactly when the principal reads
    the document; the secret's own document, fact and resource are refused to the outsider."""
    import anyio
    import httpx2
    import openai
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError

    async def tools(token: str, fact_id: str | None) -> tuple[list[str], dict]:
        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=60) as http, \
                Client(streamable_http_client(served + "/mcp", http_client=http)) as client:
            said, asked = [], {}
            for tool, arguments in [("search", {"question": QUESTION, "top_k": 13}),
                                    ("explain_entity", {"name": "Orbital Corp"}),
                                    ("explain_entity", {"name": "Mira Kalden"}),
                                    ("explain_document", {"doc_id": "q-orbital"})]:
                result = await client.call_tool(tool, arguments)
                assert not result.is_error, (tool, result.content)
                said.append(json.dumps(result.structured_content))
            secret = await client.call_tool("explain_entity", {"name": SECRET_RECORD["entities"][0]["name"]})
            entities = [] if secret.is_error else secret.structured_content["entities"]
            asked["fact"] = next((f["fact_id"] for e in entities for f in e["facts"]
                                  if f["predicate"] == "founded by"), None)
            if fact_id is not None:
                asked["fact_result"] = await client.call_tool("explain_fact", {"fact_id": fact_id})
                asked["doc_result"] = await client.call_tool("explain_document", {"doc_id": SECRET.doc_id})
                try:
                    await client.read_resource(f"lightfoot://documents/{SECRET.doc_id}")
                    asked["resource_refused"] = False
                except MCPError:
                    asked["resource_refused"] = True
            return said, asked

    fact_id = None
    for token, sees in ((COUNSEL_TOKEN, True), (OUTSIDER_TOKEN, False)):
        chat_server.reset()
        chat = openai.OpenAI(base_url=served + "/v1", api_key=token, max_retries=0, timeout=60)
        messages = [{"role": "user", "content": QUESTION}]
        replies = [chat.chat.completions.create(model="lightfoot", messages=messages).model_dump_json(),
                   json.dumps([c.model_dump() for c in chat.chat.completions.create(
                       model="lightfoot", messages=messages, stream=True)]),
                   chat.chat.completions.create(model="lightfoot-deep", messages=messages).model_dump_json()]
        prompts = json.dumps([r.body for r in chat_server.requests])
        said, asked = anyio.run(tools, token, fact_id)
        # (the shared document's explanation names no canary to anyone: it is counted for the outsider)
        seen = {"completions": "".join(replies), "prompts": prompts, "search": said[0], "entity-shared": said[1],
                "entity-founder": said[2]}
        for name, text in seen.items():
            assert (mentions(text) > 0) == sees, (token[:8], name, text[:300])
        assert sees or mentions(said[3]) == 0
        if sees:
            fact_id = asked["fact"]
            assert fact_id
        else:
            assert asked["fact"] is None  # the outsider's index has no such entity
            assert asked["fact_result"].is_error and asked["doc_result"].is_error and asked["resource_refused"]
            assert mentions(asked["fact_result"].content[0].text) == 0
