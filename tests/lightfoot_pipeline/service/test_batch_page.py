"""The page's batch view: /batch/ID opens the page (open, it holds no data), /explain/batch behind
the token says what the batch did and where each document stands, documents, entities and facts
name their batches, and run ids link to Dagster only with LIGHTFOOT_DAGSTER_URL set; in headless
Chromium the batch view renders with every text escaped and its documents one click from their
explanation and their deletion's dry run, and its entities one click from their sources and runs."""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import Document, load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL
from lightfoot_pipeline.service.app import HttpLimits
from lightfoot_pipeline.service.auth import Tokens
from lightfoot_pipeline.service.queries import QueryService
from lightfoot_pipeline.service.server import QueryServer
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.store.batches import CLI, DAGSTER, Batch, writing_batch
from lightfoot_pipeline.store.store import Store
from tests.assets.webserver import chromium
from tests.lightfoot_pipeline.service.pages import rendered

DATA = Path(__file__).parents[1] / "data" / "query-corpus"
TOKEN = "batch-page-token-" + "b" * 24
DROP, REVISE, ERASE = "drop-5a5a5a", "cli-ingest-20261201t170501-1c1c1c1c", "erase-7e7e7e"
DROP_RUN = "3f1c2b6e-0000-4000-8000-00000000a11c"
MARKUP = Document(doc_id="q-markup", title='<img src=x onerror="alert(1)"> & <b>bold</b>',
                  text="Hollin Vale lies beside Tarn Ostby.")
CANARY = Document(doc_id="q-canary", title="Vellamo Quarry", text="Vellamo Quarry was opened by Ansel Drift.")
RECORDS = {MARKUP.doc_id: {"doc_id": MARKUP.doc_id, "entities": [{"name": "Hollin Vale"}, {"name": "Tarn Ostby"}],
                           "facts": [["Hollin Vale", "lies beside", "Tarn Ostby"]]},
           CANARY.doc_id: {"doc_id": CANARY.doc_id, "entities": [{"name": "Vellamo Quarry"}, {"name": "Ansel Drift"}],
                           "facts": [["Vellamo Quarry", "opened by", "Ansel Drift"]]}}


@pytest.fixture(autouse=True)
def no_links(monkeypatch):
    for name in ("LIGHTFOOT_PAGE_URL", "LIGHTFOOT_DAGSTER_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The query corpus, a title full of markup and a canary dropped in one Dagster batch; q-zephyr
    revised from the command line; the canary erased."""
    store = Store(str(tmp_path_factory.mktemp("batch-page") / "store"))
    embedder = HashingEmbedder(dim=32)
    documents = load_corpus(DATA)
    replay = ReplayExtractor({**load_recorded_extractions(DATA), **RECORDS})
    with writing_batch(Batch(DROP, DROP_RUN, DAGSTER)):
        operations.ingest(store, [*documents, MARKUP, CANARY], replay, embedder)
    zephyr = next(d for d in documents if d.doc_id == "q-zephyr")
    with writing_batch(Batch(REVISE, "cli-ingest-20261201T170501Z-1c1c1c1c", CLI)):
        operations.ingest(store, [dataclasses.replace(zephyr, text=zephyr.text + " It was revised.")], replay,
                          embedder)
    with writing_batch(Batch(ERASE, "4d2e-erase-run", DAGSTER)):
        operations.delete(store, [CANARY.doc_id], erase=True)
    export_snapshot(store, embedder)
    return store, embedder


@pytest.fixture
def serve(built):
    store, embedder = built
    started = []

    def start(tokens: Tokens | None) -> str:
        service = QueryService(store, embedder)
        assert service.refresh()
        server = QueryServer(service, "127.0.0.1", 0, tokens=tokens, limits=HttpLimits(),
                             local_principal=OPERATOR_PRINCIPAL).start()  # batch views are the operator's
        started.append((server, service))
        return server.url

    yield start
    for server, service in started:
        server.stop()
        service.close()


def fetch(url: str, token: str | None = None) -> tuple[int, bytes, dict]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status, response.read(), {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as err:
        return err.code, err.read(), {k.lower(): v for k, v in err.headers.items()}


def test_the_batch_view_is_the_page_and_its_data_needs_the_token(serve):
    base = serve(Tokens(TOKEN, groups="*"))
    status, page, headers = fetch(f"{base}/batch/{DROP}")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert page == fetch(base + "/")[1], "the page itself, which holds no data"
    assert "default-src 'none'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"
    assert fetch(f"{base}/explain/batch?batch_id={DROP}")[0] == 401
    status, raw, _ = fetch(f"{base}/explain/batch?batch_id={DROP}", TOKEN)
    assert status == 200, raw[:300]
    batch = json.loads(raw)
    now = {d["doc_id"]: (d["status"], d["status_batch"]) for d in batch["documents"]}
    assert now["q-zephyr"] == ("replaced", REVISE) and now["q-canary"] == ("erased", ERASE)
    assert now["q-orbital"] == ("live", None) and now["q-markup"] == ("live", None)
    assert [(c["seq"], c["operation"], c["by"], c["run_id"]) for c in batch["commits"]] == [(1, "ingest", "dagster",
                                                                                            DROP_RUN)]
    for word in (b"Vellamo", b"Quarry", b"Ansel"):
        assert word not in raw, "an erased document is its id alone"
    assert "Orbital Corp" in {e["display_name"] for e in batch["entities"]} and batch["more_entities"] == 0
    status, raw, _ = fetch(f"{base}/explain/batch?batch_id={ERASE}", TOKEN)
    assert [d["status"] for d in json.loads(raw)["documents"]] == ["erased"] and b"Vellamo" not in raw

    status, raw, _ = fetch(f"{base}/explain/batch?batch_id=drop-nothing-here", TOKEN)
    error = json.loads(raw)["error"]
    assert status == 404 and "no batch 'drop-nothing-here'" in error and "\n" not in error
    status, raw, _ = fetch(f"{base}/batch/Not%20a%20batch")
    assert status == 404 and "is not a batch id" in json.loads(raw)["error"]
    assert fetch(f"{base}/explain/batch", TOKEN)[0] == 400
    assert fetch(f"{base}/batch/")[0] == 404


def test_documents_entities_and_facts_name_their_batches(serve):
    base = serve(Tokens(TOKEN, groups="*"))
    status, raw, _ = fetch(f"{base}/explain/doc?doc_id=q-zephyr", TOKEN)
    assert [(b["batch"], b["action"]) for b in json.loads(raw)["batches"]] == [(DROP, "added"), (REVISE, "replaced")]
    status, raw, _ = fetch(f"{base}/explain/doc?doc_id=q-canary", TOKEN)
    assert json.loads(raw)["status"] == "deleted" and [b["batch"] for b in json.loads(raw)["batches"]] == [DROP, ERASE]
    status, raw, _ = fetch(f"{base}/explain/entity?name=Orbital%20Corp", TOKEN)
    [orbital] = json.loads(raw)["entities"]
    assert {s["doc_id"]: s["produced_by"]["batch"] for s in orbital["sources"]} == {"q-orbital": DROP,
                                                                                     "q-zephyr": REVISE}
    fact_id = next(f["fact_id"] for f in orbital["facts"] if f["predicate"] == "founded by")
    assert fetch(f"{base}/explain/fact?fact_id={fact_id}")[0] == 401
    status, raw, _ = fetch(f"{base}/explain/fact?fact_id={fact_id}", TOKEN)
    fact = json.loads(raw)
    assert status == 200 and [s["produced_by"]["batch"] for s in fact["sources"]] == [DROP]
    assert fetch(f"{base}/explain/fact?fact_id=f-none", TOKEN)[0] == 404


def test_run_ids_link_to_dagster_only_with_its_url(serve, monkeypatch):
    base = serve(Tokens(TOKEN, groups="*"))
    batch = json.loads(fetch(f"{base}/explain/batch?batch_id={REVISE}", TOKEN)[1])
    assert [c["run_url"] for c in batch["commits"]] == [None]
    monkeypatch.setenv("LIGHTFOOT_DAGSTER_URL", "https://dagster.example")
    base = serve(Tokens(TOKEN, groups="*"))  # a new service: nothing kept from the other
    batch = json.loads(fetch(f"{base}/explain/batch?batch_id={DROP}", TOKEN)[1])
    assert [c["run_url"] for c in batch["commits"]] == [f"https://dagster.example/runs/{DROP_RUN}"]
    rows = json.loads(fetch(f"{base}/explain/doc?doc_id=q-zephyr", TOKEN)[1])["batches"]
    assert [r["run_url"] for r in rows] == [f"https://dagster.example/runs/{DROP_RUN}", None], "a CLI run has none"


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="no Chromium here (scripts/setup.sh installs it)")
def test_the_batch_view_in_headless_chromium(serve, tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHTFOOT_DAGSTER_URL", "https://dagster.example")
    base = serve(None)  # on loopback without tokens: the page needs no token typed in

    def dom(url: str) -> str:
        return rendered(url, tmp_path / "profile")

    page = dom(f"{base}/batch/{DROP}")
    assert re.search(rf'<h2 id="batch-id">Batch <span>{DROP}</span></h2>', page), page[-3000:]
    assert re.search(r'<tr data-doc="q-canary" data-status="erased">', page)
    assert re.search(r'<tr data-doc="q-zephyr" data-status="replaced">', page)
    assert f'href="/batch/{REVISE}"' in page, "the replacing batch is one click away"
    assert 'href="#doc=q-orbital"' in page and 'href="#preview=q-orbital"' in page
    assert f'href="https://dagster.example/runs/{DROP_RUN}"' in page
    assert "&lt;img src=x onerror=\"alert(1)\"&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page, "the title as text"
    assert "<b>bold</b>" not in page and "Vellamo" not in page
    # A document's deletion dry run, one click from the batch (its link's target, loaded directly).
    preview = dom(f"{base}/batch/{DROP}#preview=q-orbital")
    assert re.search(r'<div id="deletion-preview" class="" data-doc="q-orbital">remove \d+ entities', preview), \
        preview[-3000:]
    # An entity its documents mention, one click away: the entity's sources and the runs that made them.
    entity = re.search(r'<a class="entity" href="#entity=(ent-[0-9a-f]+)">Orbital Corp</a>', page)
    assert entity, page[-3000:]
    sources = dom(f"{base}/batch/{DROP}#entity={entity.group(1)}")
    assert re.search(r'<h2 id="entity-name">Orbital Corp ', sources) and 'href="#doc=q-orbital"' in sources
    assert f'<a class="run" href="https://dagster.example/runs/{DROP_RUN}">{DROP_RUN}</a>' in sources
    document = dom(f"{base}/batch/{DROP}#doc=q-zephyr")
    assert re.search(r'<h2 id="document-id">', document) and f'href="/batch/{REVISE}"' in document
    missing = dom(f"{base}/batch/drop-nothing-here")
    assert "no batch 'drop-nothing-here'" in missing
