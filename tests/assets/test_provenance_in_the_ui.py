"""From the Dagster UI, an entity's source documents and the runs that made them are two clicks away:
a batch's materialization links to the page's view of the batch, which lists the entities its
documents mention, each linking to its panel of source documents with the batches and Dagster runs
that produced them. In headless Chromium, against ``dagster_webserver`` on the harness's instance
and the query service on its store, both on loopback. Screenshots are kept under tests/artifacts/
(not committed)."""

from __future__ import annotations

import html
import re
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import dagster as dg
import pytest

from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL
from lightfoot_pipeline.provenance import explain_entity
from lightfoot_pipeline.service.app import HttpLimits
from lightfoot_pipeline.service.queries import QueryService
from lightfoot_pipeline.service.server import QueryServer
from tests.assets.webserver import REPO, chromium, dagster_webserver, free_port

pytestmark = [pytest.mark.dagster]

ARTIFACTS = REPO / "tests" / "artifacts"


def _render(url: str, screenshot: Path, profile: Path, height: int = 1000) -> str:
    """The page's DOM after its scripts ran (and a screenshot of it)."""
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size=1600,{height}",
               "--virtual-time-budget=30000", f"--screenshot={screenshot}", "--dump-dom", url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="no Chromium on this machine (scripts/setup.sh installs it)")
def test_an_entitys_sources_and_runs_are_two_clicks_from_a_batch_materialization(
    lightfoot, sample_documents, sample_records, tmp_path, monkeypatch
):
    harness = lightfoot
    page_port, dagster_port = free_port(), free_port()  # chosen up front: the links are made at ingestion
    page, dagster = f"http://127.0.0.1:{page_port}", f"http://127.0.0.1:{dagster_port}"
    monkeypatch.setenv("LIGHTFOOT_PAGE_URL", page)
    monkeypatch.setenv("LIGHTFOOT_DAGSTER_URL", dagster)
    documents = sample_documents[:10]
    harness.ingest_through_the_inbox(documents, sample_records)
    [batch] = harness.partitions()
    [run] = [r.dagster_run for r in harness.instance.get_run_records()
             if r.dagster_run.tags.get("dagster/partition") == batch]
    made = harness.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("passages"), asset_partitions=[batch]), limit=1).records
    assert made and made[0].asset_materialization.metadata["batch_page"].value == f"{page}/batch/{batch}"

    store = harness.store()
    service = QueryService(store, HashingEmbedder(dim=32))
    assert service.refresh(), "the ingestion run exports a snapshot"
    server = QueryServer(service, "127.0.0.1", page_port, tokens=None, limits=HttpLimits(),
                         local_principal=OPERATOR_PRINCIPAL).start()  # batch views are the operator's
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    profile = tmp_path / "profile"
    try:
        home = harness.root / "dagster_home"
        (home / ".nux").mkdir(exist_ok=True)
        (home / ".nux" / "nux.yaml").write_text("seen: 1\n")  # no "join the community" dialog over the page
        with dagster_webserver(home, dagster_port, harness.store_uri, tmp_path / "webserver.log", 240) as base:
            assert base == dagster
            # The batch's partition of `passages` in the Dagster UI: its materialization links to the page.
            partition = _render(f"{dagster}/assets/passages?view=partitions&partition={urllib.parse.quote(batch)}",
                                ARTIFACTS / "provenance-1-dagster-partition.png", profile, height=2000)
            batch_page = f"{page}/batch/{batch}"
            assert f'href="{batch_page}"' in partition, "the partition's batch_page link"
            assert f">{batch}<" in partition

            # One click: the batch's view, with its documents and the entities they mention.
            view = _render(batch_page, ARTIFACTS / "provenance-2-batch-view.png", profile, height=2400)
            assert 'data-ready="true"' in view, view[-3000:]
            assert f'<h2 id="batch-id">Batch <span>{batch}</span></h2>' in view
            for document in documents:
                assert f'<tr data-doc="{document.doc_id}" data-status="live">' in view, document.doc_id
            listed = re.findall(r'<a class="entity" href="(#entity=[^"]+)">([^<]*)</a>', view)
            assert listed, "the batch's entities"
            href, name = listed[0]  # the one its passages mention most

            # Two clicks: the entity's panel, its source documents and the Dagster run that made them.
            panel = _render(urllib.parse.urljoin(batch_page, href), ARTIFACTS / "provenance-3-entity-sources.png",
                            profile, height=2400)
            assert 'data-ready="true"' in panel, panel[-3000:]
            assert f'<h2 id="entity-name">{name} ' in panel, panel[-3000:]
            entity_id = urllib.parse.unquote(href.removeprefix("#entity="))
            [explained] = explain_entity(store, entity_id)
            assert explained.documents and set(explained.documents) <= {d.doc_id for d in documents}
            for doc_id in explained.documents:
                assert f'href="#doc={doc_id}"' in panel, doc_id
            run_url = f"{dagster}/runs/{run.run_id}"
            assert f'<a class="run" href="{html.escape(run_url)}">{run.run_id}</a>' in panel, "the run, linked"

            # The run's link leads to the run in the Dagster UI.
            run_page = _render(run_url, ARTIFACTS / "provenance-4-dagster-run.png", profile)
            assert run.run_id[:8] in run_page and "ingestion_job" in run_page
    finally:
        server.stop()
        service.close()
