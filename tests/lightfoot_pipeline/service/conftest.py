"""The service's doors over the bundled sample, once per session: ``sample_doors`` is a running
service (the session's hashing build of the sample, copied, readers set, with a snapshot) with a
tokens file (an operator, a reader of no group, a spender with a small budget of its own) and answers by a
loopback chat-completions server that keeps every prompt. The chat endpoint's and the MCP
server's tests share it; each scripts the answer model as it needs (``doors.chat.script``).
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.retrieval.answer import AnswerBudget, Answerer
from lightfoot_pipeline.service.app import HttpLimits
from lightfoot_pipeline.service.auth import Tokens, token_line
from lightfoot_pipeline.service.queries import QueryService
from lightfoot_pipeline.service.server import QueryServer
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.store.store import Store
from tests.conftest import ChatServer
from tests.lightfoot_pipeline.permissions.conftest import seeded_readers, write_readers

OPERATOR_TOKEN = "operator-token-" + "p" * 24
READER_TOKEN = "reader-token-" + "r" * 24
SPENDER_TOKEN = "spender-token-" + "s" * 24
PRINCIPAL_BUDGET_USD = 0.05  # a spender billed 100,000 tokens at $1 a million passes it in one answer


@dataclass
class Doors:
    url: str
    store: Path
    tokens_file: Path
    service: QueryService
    chat: ChatServer

    def principal(self, token: str):
        """The principal ``token`` names."""
        return Tokens(tokens_file=self.tokens_file).authenticate(token).principal

    def call(self, path: str, token: str, body: dict | None = None) -> tuple[int, dict]:
        """An HTTP call of the service as ``token``'s principal: (status, JSON body)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method="POST" if body is not None else "GET",
                                         headers={"content-type": "application/json",
                                                  "authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())


@pytest.fixture(scope="session")
def sample_snapshot_store(tmp_path_factory, sample_store_built, sample_documents, hashing_embedder) -> Path:
    """A copy of the session's build of the bundled sample, its documents' readers set by the
    permission tests' seeded rule (about 40% public), with its snapshot exported."""
    root = tmp_path_factory.mktemp("sample-served") / "store"
    shutil.copytree(sample_store_built, root)
    store = Store(str(root))
    write_readers(store, seeded_readers([d.doc_id for d in sample_documents]))
    export_snapshot(store, hashing_embedder)
    return root


@pytest.fixture(scope="session")
def sample_doors(tmp_path_factory, sample_snapshot_store, hashing_embedder):
    tokens_file = tmp_path_factory.mktemp("doors-tokens") / "tokens"
    tokens_file.write_text("\n".join([token_line(OPERATOR_TOKEN, "operator", "*"), token_line(READER_TOKEN, "reader"),
                                      token_line(SPENDER_TOKEN, "spender")]) + "\n")
    chat = ChatServer()
    chat.thread.start()
    client = LLMClient(LLMSettings(base_url=chat.base_url, model="answer-model", max_retries=0,
                                   price_in_per_mtok=1.0, price_out_per_mtok=2.0))
    service = QueryService(Store(str(sample_snapshot_store)), hashing_embedder, answerer=Answerer(client),
                           budget=AnswerBudget(50.0), charge_ledger=False, principal_budget_usd=PRINCIPAL_BUDGET_USD)
    assert service.refresh()
    limits = HttpLimits(workers=2, client_rate=0, token_rate=0)
    server = QueryServer(service, "127.0.0.1", 0, tokens=Tokens(tokens_file=tokens_file), limits=limits).start()
    yield Doors(server.url, sample_snapshot_store, tokens_file, service, chat)
    server.stop()
    service.close()
    chat.httpd.shutdown()
    chat.httpd.server_close()
