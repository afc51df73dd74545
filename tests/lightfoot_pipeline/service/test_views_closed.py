"""A principal's view shows nothing of the operator's: ``/snapshot``, ``/status`` and the error
bodies a principal gets are the same whether or not the store holds documents it cannot read, and
answer spend, calls and budgets are counted per principal.

Two stores on loopback servers: ``hidden`` holds the query corpus and one document only ``legal``
reads (a commit of its own sets its readers); ``plain`` holds the query corpus alone. The
outsider (no group) reads the same documents in both, so every byte it is told must be the same
but for times (the export's and the load's) and the ledger run's id, which are the process's own.
"""

from __future__ import annotations

import json
import re

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.retrieval.answer import AnswerBudget, Answerer
from lightfoot_pipeline.service.app import HttpLimits
from lightfoot_pipeline.service.auth import Tokens, token_line
from lightfoot_pipeline.service.queries import QueryService
from lightfoot_pipeline.service.server import QueryServer
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.store.store import Store
from tests.lightfoot_pipeline.permissions.conftest import write_readers
from tests.lightfoot_pipeline.service.test_views_leak import DATA, SECRET, SECRET_RECORD, call

# Slow: it builds two stores of 12 and 13 documents (about 10 s on an idle 2-core machine); the
# per-principal budget's rules are also checked fast (retrieval/test_answer.py).
pytestmark = [pytest.mark.slow]

OUTSIDER, COUNSEL, OPERATOR = ("outsider-token-" + "o" * 24, "counsel-token-" + "c" * 24,
                               "operator-token-" + "p" * 24)
QUESTION = "Who founded the company that makes the Zephyr phone?"
TIMES = re.compile(r"\d{8}T\d{6,12}Z|\d{4}-\d\d-\d\dT[\d:.]+\+00:00")  # snapshot ids' and loads' times
BILLED = (100_000, 10)  # tokens each answer is billed: $0.10 at $1 per million, past a principal's $0.05


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """``{"hidden": store, "plain": store}``, each with a published snapshot."""
    embedder = HashingEmbedder(dim=32)
    built = {}
    for name, secret in (("hidden", True), ("plain", False)):
        store = Store(str(tmp_path_factory.mktemp(name) / "store"))
        records = {**load_recorded_extractions(DATA), **({SECRET.doc_id: SECRET_RECORD} if secret else {})}
        operations.ingest(store, [*load_corpus(DATA), *([SECRET] if secret else [])], ReplayExtractor(records),
                          embedder)
        if secret:
            write_readers(store, {SECRET.doc_id: ("legal",)})
        export_snapshot(store, embedder)
        built[name] = store
    return built, embedder


@pytest.fixture
def servers(stores, tmp_path, chat_server):
    """A server over each store, answering through the loopback chat server, each principal
    within $0.05 of the service's $5."""
    built, embedder = stores
    chat_server.script(lambda request: chat_server.Reply(content=json.dumps({"answer": "Mira Kalden"}),
                                                         usage=BILLED))
    tokens = tmp_path / "tokens"
    tokens.write_text("\n".join([token_line(OUTSIDER, "outsider"), token_line(COUNSEL, "counsel", "legal"),
                                 token_line(OPERATOR, "admin", "*")]) + "\n")
    settings = LLMSettings(base_url=chat_server.base_url, model="answer-model", max_retries=0,
                           price_in_per_mtok=1.0, price_out_per_mtok=1.0)
    running = {}
    for name, store in built.items():
        service = QueryService(store, embedder, answerer=Answerer(LLMClient(settings)), budget=AnswerBudget(5.0),
                               charge_ledger=False, principal_budget_usd=0.05)
        assert service.refresh()
        running[name] = (QueryServer(service, "127.0.0.1", 0, tokens=Tokens(tokens_file=tokens),
                                     limits=HttpLimits()).start(), service)
    yield {name: server.url for name, (server, _) in running.items()}
    for server, service in running.values():
        server.stop()
        service.close()


def told(base: str, path: str, token: str, body: dict | None = None) -> tuple[int, str]:
    """The response, with what is the process's own (times, the ledger run's id) blanked."""
    status, text = call(base, path, token, body)
    text = re.sub(r'"ledger_run_id": "[^"]*"', '"ledger_run_id": "RUN"', TIMES.sub("TIME", text))
    return status, text


def test_a_principal_is_told_the_same_whether_or_not_documents_it_cannot_read_exist(servers, stores):
    hidden, plain = servers["hidden"], servers["plain"]
    doors = ["/snapshot", "/status", "/explain/entity?name=Nobody%20Known", "/explain/doc?doc_id=q-none",
             "/explain/fact?fact_id=f-0000000000000000", "/explain/batch?batch_id=drop-000000", "/nowhere"]
    for path in doors:
        one, other = told(hidden, path, OUTSIDER), told(plain, path, OUTSIDER)
        assert one == other, (path, one, other)
    snapshot = json.loads(call(hidden, "/snapshot", OUTSIDER)[1])
    store_id = json.loads(call(hidden, "/snapshot", OPERATOR)[1])["published_id"]
    assert snapshot["published_id"] == snapshot["serving"]["snapshot_id"] != store_id
    assert store_id.split("-")[1] not in json.dumps(snapshot), "no digit of the store's fingerprint"
    assert snapshot["serving"]["store_seq"] is None and snapshot["serving_published"] is True
    error = json.loads(call(hidden, "/explain/entity?name=Nobody%20Known", OUTSIDER)[1])["error"]
    assert str(stores[0]["hidden"].uri) not in error and "the index" in error

    # Answers: counsel spends its own $0.05 and is refused; the outsider is not, and is told of its
    # own call alone, as on the store without the document; the operator sees every principal's.
    first, second = (json.loads(call(hidden, "/query", COUNSEL, {"question": QUESTION})[1]) for _ in range(2))
    assert first["answer_status"] == "answered" and second["answer_status"].startswith("your answer budget of $0.05")
    for base in (hidden, plain):
        assert json.loads(call(base, "/query", OUTSIDER, {"question": QUESTION})[1])["answer_status"] == "answered"
    outsider = [told(base, "/status", OUTSIDER) for base in (hidden, plain)]
    assert outsider[0] == outsider[1]
    answers = json.loads(outsider[0][1])["answers"]
    assert (answers["calls"], answers["tokens_in"], answers["spent_usd"]) == (1, BILLED[0], pytest.approx(0.10001))
    assert "principals" not in answers and "total" not in answers and "ledger_errors" not in answers
    totals = json.loads(call(hidden, "/status", OPERATOR)[1])["answers"]
    assert totals["total"]["calls"] == 2 and totals["total"]["spent_usd"] == pytest.approx(0.20002)
    assert {name: row["calls"] for name, row in totals["principals"].items()} == {"admin": 0, "counsel": 1,
                                                                                  "outsider": 1}
