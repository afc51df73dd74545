"""A narrowing commit reaches every door of a running service within seconds, without an export.

The query corpus and a document only ``legal`` reads (the canary's, test_views_leak.py) are
served with a watcher polling every 0.2 s. After ``lightfoot readers DOC --nobody`` the principal
of ``legal`` stops being served the document, and after ``lightfoot delete`` the operator too:
within the bound, at every door (queries, answers and their prompts, the deep mode, ``explain``,
``status``, ``snapshot``, the page in headless Chromium), and the view it is served equals the
snapshot of a fresh store of the documents it still reads. No snapshot is exported meanwhile.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.cli import main
from lightfoot_pipeline.ingest.dataset import load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL, Principal
from lightfoot_pipeline.permissions.views import Narrowing, narrowing_of, readable_documents
from lightfoot_pipeline.retrieval.answer import AnswerBudget, Answerer
from lightfoot_pipeline.service.app import HttpLimits
from lightfoot_pipeline.service.auth import Tokens, token_line
from lightfoot_pipeline.service.queries import QueryService
from lightfoot_pipeline.service.server import QueryServer
from lightfoot_pipeline.snapshot.collect import build_fact_index
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import latest_snapshot, load_snapshot
from lightfoot_pipeline.store.store import Store
from tests.assets.webserver import chromium
from tests.lightfoot_pipeline.permissions.compare import assert_same_snapshot
from tests.lightfoot_pipeline.permissions.conftest import write_readers
from tests.lightfoot_pipeline.service.pages import page_url, rendered
from tests.lightfoot_pipeline.service.test_views_leak import (
    DATA,
    QUESTION,
    SECRET,
    SECRET_RECORD,
    answering,
    call,
    doors,
    mentions,
)

BOUND_S = 5.0  # from the commit to the first request that no longer sees the document (the poll here: 0.2 s)
POLL_S = 0.2
COUNSEL = Principal("counsel", ("legal",))
COUNSEL_TOKEN, OPERATOR_TOKEN = "counsel-token-" + "c" * 24, "operator-token-" + "p" * 24


def _frames(readers: dict[str, str]) -> pl.DataFrame:
    return pl.DataFrame({"doc_id": list(readers), "readers": list(readers.values())},
                        schema={"doc_id": pl.String, "readers": pl.String})


def test_a_narrowing_takes_what_either_readers_refuse_and_leaves_widenings_to_the_export():
    snapshot = _frames({"a": "public", "b": "legal", "c": "legal", "d": "staff", "e": "", "f": "legal"})
    now = _frames({"a": "staff", "b": "public", "c": "hr", "d": "hr,staff", "e": "legal"})  # f deleted
    narrowing = narrowing_of(snapshot, now, 9)
    assert narrowing.deleted == {"f"} and narrowing.seq == 9
    assert narrowing.readers == (("a", "staff"), ("c", "hr"))  # b, d and e only widened
    assert narrowing.lost_by(OPERATOR_PRINCIPAL) == {"f"}
    assert narrowing.lost_by(Principal("p", ())) == {"a", "c", "f"}
    assert narrowing.lost_by(Principal("p", ("legal", "hr"))) == {"a", "f"}  # c: legal then, hr now: both let it
    assert narrowing_of(snapshot, snapshot, 10).same_as(None)
    assert narrowing.changed_since(None) == {"a", "c", "f"}
    assert narrowing.changed_since(Narrowing(8, frozenset({"f"}), (("a", "staff"), ("c", "legal")))) == {"c"}
    assert not Narrowing(3) and Narrowing(3).same_as(Narrowing(4))


def test_a_view_of_most_facts_reuses_the_snapshots_centroids_exactly():
    """A view keeps the snapshot's fact-index centroids when its training sample is the snapshot's
    (views.py view_snapshot): the index then equals one trained afresh on the view's facts."""
    rng = np.random.default_rng(27)
    ids = np.array([f"fact-{i:05d}" for i in rng.permutation(3000)])
    vectors = rng.standard_normal((3000, 16)).astype(np.float16)
    index, order = build_fact_index(ids, vectors, None, lambda done, total: None)
    snapshot = SimpleNamespace(fact_index=index, facts=pl.DataFrame({"fact_id": ids[order]}))
    kept = np.flatnonzero(ids != max(ids))  # the largest id is outside the sample
    reused, reused_order = build_fact_index(ids[kept], vectors[kept], snapshot, lambda done, total: None)
    fresh, fresh_order = build_fact_index(ids[kept], vectors[kept], None, lambda done, total: None)
    assert reused.centroids is index.centroids  # reused, not trained
    np.testing.assert_array_equal(reused.centroids, fresh.centroids)
    np.testing.assert_array_equal(reused.offsets, fresh.offsets)
    np.testing.assert_array_equal(reused_order, fresh_order)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The query corpus and the canary's document (readers: legal), with a snapshot; copied per test."""
    root = tmp_path_factory.mktemp("revocation") / "store"
    store, embedder = Store(str(root)), HashingEmbedder(dim=32)
    replay = ReplayExtractor({**load_recorded_extractions(DATA), SECRET.doc_id: SECRET_RECORD})
    operations.ingest(store, [*load_corpus(DATA), SECRET], replay, embedder)
    write_readers(store, {SECRET.doc_id: ("legal",)})
    export_snapshot(store, embedder)
    return root, embedder


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """The snapshot of a fresh store of the query corpus alone: the documents still readable."""
    store, embedder = Store(str(tmp_path_factory.mktemp("fresh") / "store")), HashingEmbedder(dim=32)
    operations.ingest(store, load_corpus(DATA), ReplayExtractor(load_recorded_extractions(DATA)), embedder)
    export_snapshot(store, embedder)
    return load_snapshot(store)


@pytest.fixture
def running(built, tmp_path, chat_server):
    """A server over a copy of the store, watching it every POLL_S, answering through the loopback model."""
    root, embedder = built
    shutil.copytree(root, tmp_path / "store")
    store = Store(str(tmp_path / "store"))
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{token_line(COUNSEL_TOKEN, 'counsel', 'legal')}\n{token_line(OPERATOR_TOKEN, 'ops', '*')}\n")
    chat_server.script(lambda request: chat_server.Reply(content=answering(request)))
    client = LLMClient(LLMSettings(base_url=chat_server.base_url, model="answer-model", max_retries=0,
                                   price_in_per_mtok=1.0, price_out_per_mtok=2.0))
    service = QueryService(store, embedder, answerer=Answerer(client), budget=AnswerBudget(5.0), charge_ledger=False)
    assert service.refresh()
    service.watch(POLL_S)
    server = QueryServer(service, "127.0.0.1", 0, tokens=Tokens(tokens_file=tokens), limits=HttpLimits()).start()
    yield store, server.url, service
    server.stop()
    service.close()


def canary_fact(base: str) -> str:
    status, text = call(base, "/explain/entity?name=" + urllib.parse.quote(SECRET_RECORD["entities"][0]["name"]),
                        COUNSEL_TOKEN)
    assert status == 200
    [entity] = json.loads(text)["entities"]
    return next(f["fact_id"] for f in entity["facts"] if f["predicate"] == "founded by")


def _seconds_until_gone(base: str, token: str, since: float) -> float:
    """From ``since`` to the first query answered without the canary."""
    while time.perf_counter() - since < 3 * BOUND_S:
        status, text = call(base, "/query", token, {"question": QUESTION, "top_k": 13, "answer": False})
        assert status == 200, text
        if mentions(text) == 0:
            return time.perf_counter() - since
        time.sleep(0.05)
    raise AssertionError("the document is still served")


def no_door_serves_it(base: str, token: str, fact_id: str, chat_server) -> None:
    got = doors(base, token, fact_id, chat_server)
    for name, (status, text) in got.items():
        assert mentions(text) == 0, (name, text[:500])
        assert status in (200, 404), (name, status, text[:300])
    assert len(json.loads(got["prompts"][1])) >= 3, "the answer and the deep mode asked the model"
    status, text = call(base, f"/explain/doc?doc_id={SECRET.doc_id}", token)
    if token == OPERATOR_TOKEN:  # the operator reads the deletion log: the document's id and its deletion alone
        assert status == 200 and json.loads(text)["status"] == "deleted", text
        assert mentions(text.replace(SECRET.doc_id, "")) == 0, text
    else:
        assert status == 404, text
    assert call(base, f"/explain/fact?fact_id={fact_id}", token)[0] == 404
    assert json.loads(got["status"][1])["counts"]["documents"] == 12


@pytest.mark.slow  # a server, the loopback model answering every door twice: about 4 s
def test_readers_nobody_reaches_every_door_within_seconds(running, fresh, chat_server, capsys):
    store, base, service = running
    fact_id = canary_fact(base)
    exported = latest_snapshot(store).snapshot_id
    assert mentions(call(base, "/query", COUNSEL_TOKEN, {"question": QUESTION, "top_k": 13})[1]) > 0
    outsider = service.current(Principal("outsider", ())).view

    assert main(["readers", SECRET.doc_id, "--nobody", "--store", store.uri]) == 0
    committed = time.perf_counter()
    printed = capsys.readouterr().out
    assert "a running service stops serving it at its next poll of the store log" in printed, printed
    assert _seconds_until_gone(base, COUNSEL_TOKEN, committed) < BOUND_S

    no_door_serves_it(base, COUNSEL_TOKEN, fact_id, chat_server)
    assert_same_snapshot(service.current(COUNSEL).snapshot, fresh)
    assert service.current(Principal("outsider", ())).view is outsider  # it lost nothing: kept, not rebuilt
    # nobody is the operator alone: the operator still reads it, from the snapshot as exported
    assert mentions(call(base, "/query", OPERATOR_TOKEN, {"question": QUESTION, "top_k": 13, "answer": False})[1]) > 0
    assert service.current(OPERATOR_PRINCIPAL).snapshot is service.snapshot
    status = json.loads(call(base, "/status", OPERATOR_TOKEN)[1])
    operator = status["narrowed"]
    assert operator["now"] == {"store_seq": store.manifest().seq, "deleted": 0, "readers_narrowed": 1}
    # the views held, and the scratch disk their files take (the operator's only)
    assert status["views"]["reader_sets"] >= 1 and status["views"]["file_mb"] > 0
    assert "narrowed" not in json.loads(call(base, "/status", COUNSEL_TOKEN)[1])
    assert "views" not in json.loads(call(base, "/status", COUNSEL_TOKEN)[1])
    assert latest_snapshot(store).snapshot_id == exported, "no export was needed"
    assert main(["status", "--store", store.uri]) == 0
    assert "1 behind: a running service serves the deletions and narrowed readers among them already" in \
        capsys.readouterr().out
    # Given back the readers the snapshot has, nothing is narrowed: counsel is served it again.
    operations.set_readers(store, {SECRET.doc_id: "legal"})
    time.sleep(4 * POLL_S)
    assert mentions(call(base, "/query", COUNSEL_TOKEN, {"question": QUESTION, "top_k": 13, "answer": False})[1]) > 0


@pytest.mark.slow  # a server, the loopback model answering every door twice: about 4 s
def test_a_deletion_reaches_every_door_for_every_principal_within_seconds(running, fresh, chat_server, capsys):
    store, base, service = running
    fact_id = canary_fact(base)
    exported = latest_snapshot(store).snapshot_id

    assert main(["delete", SECRET.doc_id, "--store", store.uri]) == 0
    committed = time.perf_counter()
    printed = capsys.readouterr().out
    assert "a running service stops serving it at its next poll of the store log" in printed, printed
    waited = max(_seconds_until_gone(base, token, committed) for token in (COUNSEL_TOKEN, OPERATOR_TOKEN))
    assert waited < BOUND_S

    for token in (COUNSEL_TOKEN, OPERATOR_TOKEN):
        no_door_serves_it(base, token, fact_id, chat_server)
    for principal in (COUNSEL, OPERATOR_PRINCIPAL, Principal("outsider", ())):
        assert_same_snapshot(service.current(principal).snapshot, fresh)
    assert readable_documents(service.snapshot, OPERATOR_PRINCIPAL, service.current().narrowing) is not None
    described = json.loads(call(base, "/snapshot", OPERATOR_TOKEN)[1])["serving"]
    assert described["narrowed"]["deleted"] == 1 and described["counts"]["documents"] == 12
    assert latest_snapshot(store).snapshot_id == exported, "no export was needed"
    # The next export serves the same documents, now as exported.
    export_snapshot(store, HashingEmbedder(dim=32))
    deadline = time.perf_counter() + BOUND_S
    while service.snapshot.snapshot_id == exported and time.perf_counter() < deadline:
        time.sleep(POLL_S)
    assert service.current().narrowing is None
    assert_same_snapshot(service.current(OPERATOR_PRINCIPAL).snapshot, fresh)


def test_a_deletion_from_a_store_of_public_documents_reads_the_access_tables_it_needs(tmp_path, fresh,
                                                                                       monkeypatch):
    """A snapshot of public documents keeps no access tables: the service reads the store's for
    its documents once the snapshot serves, so a deletion later derives its views from that base
    and reads none then; the view still equals a fresh build."""
    from lightfoot_pipeline.service import queries
    from lightfoot_pipeline.snapshot.format import ACCESS_FILE

    store, embedder = Store(str(tmp_path / "store")), HashingEmbedder(dim=32)
    replay = ReplayExtractor({**load_recorded_extractions(DATA), SECRET.doc_id: SECRET_RECORD})
    operations.ingest(store, [*load_corpus(DATA), SECRET], replay, embedder)
    info = export_snapshot(store, embedder)
    assert not (tmp_path / "store" / "snapshots" / info.snapshot_id / ACCESS_FILE).exists()

    def read_again(*args):
        raise AssertionError("the access tables were read when the deletion came, not once the snapshot served")

    with QueryService(store, embedder, charge_ledger=False) as service:
        assert service.refresh() and service.snapshot.access is not None
        assert service.snapshot.snapshot_id == info.snapshot_id
        monkeypatch.setattr(queries, "access_since", read_again)
        assert not service.narrow()  # nothing committed since the export
        operations.delete(store, [SECRET.doc_id])
        assert service.narrow()
        assert service.current().narrowing.deleted == {SECRET.doc_id}
        for principal in (OPERATOR_PRINCIPAL, Principal("outsider", ())):
            assert_same_snapshot(service.current(principal).snapshot, fresh)
        assert mentions(json.dumps(service.query(QUESTION, top_k=13, answer=False))) == 0
        assert not service.narrow()  # the same commit: nothing to read again


@pytest.mark.slow  # headless Chromium renders the page twice: about 10 s
@pytest.mark.skipif(chromium() is None, reason="no Chromium here (scripts/setup.sh installs it)")
def test_the_page_in_headless_chromium_stops_showing_a_revoked_document(built, tmp_path):
    root, embedder = built
    shutil.copytree(root, tmp_path / "store")
    store = Store(str(tmp_path / "store"))
    service = QueryService(store, embedder)
    assert service.refresh()
    service.watch(POLL_S)
    server = QueryServer(service, "127.0.0.1", 0, tokens=None, limits=HttpLimits(), local_principal=COUNSEL).start()

    def page(profile: str) -> str:
        return rendered(page_url(server.url, QUESTION, "Orbital Corp"), tmp_path / profile)

    try:
        assert mentions(page("before")) > 0
        operations.set_readers(store, {SECRET.doc_id: ""})  # the library's path: the same store log
        deadline = time.perf_counter() + BOUND_S
        while service.current(COUNSEL).view.may_read(SECRET.doc_id) and time.perf_counter() < deadline:
            time.sleep(POLL_S / 2)
        assert mentions(page("after")) == 0
    finally:
        server.stop()
        service.close()
