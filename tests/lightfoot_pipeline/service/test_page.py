"""The web page of `lightfoot serve`: open files, explanations behind the token, and the page in
headless Chromium (a question asked, passages and an entity panel rendered; the screenshot is kept
under tests/artifacts/)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL
from lightfoot_pipeline.service.app import HttpLimits
from lightfoot_pipeline.service.auth import Tokens
from lightfoot_pipeline.service.queries import QueryService
from lightfoot_pipeline.service.server import QueryServer
from lightfoot_pipeline.snapshot.export import export_snapshot
from tests.assets.webserver import chromium
from tests.lightfoot_pipeline.service.pages import page_url, rendered

pytestmark = [pytest.mark.slow]

DATA = Path(__file__).parents[1] / "data" / "query-corpus"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
QUESTION = "Who founded the company that makes the Zephyr phone?"
TOKEN = "page-token-" + "z" * 24


@pytest.fixture
def serve(store):
    embedder = HashingEmbedder(dim=32)
    operations.ingest(store, load_corpus(DATA), ReplayExtractor(load_recorded_extractions(DATA)), embedder)
    export_snapshot(store, embedder)
    started = []

    def start(tokens: Tokens | None) -> str:
        service = QueryService(store, embedder)
        assert service.refresh()
        server = QueryServer(service, "127.0.0.1", 0, tokens=tokens, limits=HttpLimits(),
                             local_principal=OPERATOR_PRINCIPAL).start()  # previews are the operator's
        started.append((server, service))
        return server.url

    yield start
    for server, service in started:
        server.stop()
        service.close()


def fetch(url: str, body: dict | None = None, token: str | None = None) -> tuple[int, bytes, dict]:
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     method="POST" if body is not None else "GET", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read(), {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as err:
        return err.code, err.read(), {k.lower(): v for k, v in err.headers.items()}


def test_the_page_is_open_and_its_data_needs_the_token(serve):
    base = serve(Tokens(TOKEN, groups="*"))
    status, page, headers = fetch(base + "/")
    assert status == 200 and headers["content-type"].startswith("text/html") and b"/static/app.js" in page
    assert b"http://" not in page and b"https://" not in page, "no file comes from elsewhere"
    for name in ("app.js", "app.css", "vendor/vis-network.min.js"):
        status, body, _ = fetch(f"{base}/static/{name}")
        assert status == 200 and body, name
    assert fetch(base + "/static/../serve.py")[0] == 404
    assert fetch(base + "/static/nothing.js")[0] == 404
    calls = [("/explain/query", {"question": QUESTION}), ("/explain/entity?name=Orbital%20Corp", None),
             ("/explain/doc?doc_id=q-orbital", None)]
    for path, body in calls:
        assert fetch(base + path, body)[0] == 401, path
        status, raw, _ = fetch(base + path, body, TOKEN)
        assert status == 200, (path, raw[:300])
    status, raw, _ = fetch(base + "/explain/query", {"question": QUESTION, "top_k": 3}, TOKEN)
    result = json.loads(raw)
    assert len(result["passages"]) == 3 and result["snapshot"]["snapshot_id"] and result["seed_facts"]
    status, raw, _ = fetch(base + "/explain/doc?doc_id=q-orbital", token=TOKEN)
    assert json.loads(raw)["status"] == "live" and json.loads(raw)["deletion_preview"] is None  # a route of its own
    assert fetch(base + "/explain/doc/preview?doc_id=q-orbital")[0] == 401
    status, raw, _ = fetch(base + "/explain/doc/preview?doc_id=q-orbital", token=TOKEN)
    preview = json.loads(raw)
    assert status == 200 and preview["doc_id"] == "q-orbital"
    assert preview["deletion_preview"]["counts"]["passages_removed"] == 1
    status, raw, _ = fetch(base + "/explain/doc/preview?doc_id=q-none", token=TOKEN)
    assert status == 404 and "q-none" in json.loads(raw)["error"]
    assert fetch(base + "/explain/doc/preview", token=TOKEN)[0] == 400
    assert fetch(base + "/explain/entity?name=nobody%20at%20all", token=TOKEN)[0] == 404
    assert fetch(base + "/explain/doc", token=TOKEN)[0] == 400
    assert fetch(base + "/explain/query", {"question": ""}, TOKEN)[0] == 400
    assert fetch(base + "/explain/query", {"question": QUESTION, "top_k": 99}, TOKEN)[0] == 400


@pytest.mark.skipif(chromium() is None, reason="no Chromium here (scripts/setup.sh installs it)")
def test_the_page_in_headless_chromium(serve, tmp_path):
    base = serve(None)  # on loopback without tokens: the page needs no token to be typed in
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "lightfoot-page.png"
    dom = rendered(page_url(base, QUESTION, "Orbital Corp"), tmp_path / "profile", screenshot)
    assert len(re.findall(r'<li data-chunk="chunk-', dom)) == 10
    assert "Orbital Corp" in dom and "Zephyr phone" in dom
    assert re.search(r'<h2 id="entity-name">Orbital Corp', dom), "the entity panel is open"
    assert "Aliases and their passages" in dom and "q-orbital" in dom
    assert re.search(r'id="graph" data-nodes="([2-9]|\d\d+)"', dom), "the neighbourhood is drawn"
    assert "<canvas" in dom
    assert screenshot.exists() and screenshot.stat().st_size > 10_000
    # A document's panel shows at once, and its deletion's dry run fills in from a route of its own.
    dom = rendered(f"{base}/#doc=q-orbital", tmp_path / "profile", tmp_path / "document.png")
    assert re.search(r'<h2 id="document-id">', dom), dom[-2000:]
    assert re.search(r'<div id="deletion-preview" class="" data-doc="q-orbital">remove \d+ entities, change \d+', dom), \
        dom[-3000:]
