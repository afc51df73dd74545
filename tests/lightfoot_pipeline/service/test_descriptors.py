"""The server's file descriptors: its bounds are cut to its open-file limit, and a flood of idle
sockets from one address under ``ulimit -n 1024`` costs another address's authenticated queries
nothing (benchmarks/serve_load.py ``descriptor_flood``: the server in a process of its own)."""

from __future__ import annotations

import pytest

from benchmarks.serve_load import descriptor_flood
from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.service.server import MIN_RESERVE, ConnectionCount, Descriptors
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.store.store import Store
from tests.lightfoot_pipeline.service.test_serve import DATA, QUESTION


def test_the_connection_bounds_fit_within_the_descriptor_limit():
    small = ConnectionCount(32, 1000, Descriptors(limit=1024, in_use=40, reserve=1024 // 8))
    sockets = small.descriptors.sockets
    assert sockets == 1024 - 40 - 128
    assert small.opened.total + small.held.total <= sockets and small.opened.total < 1000
    assert small.held.per_client <= small.held.total // 4 and small.opened.per_client == 32
    for _ in range(small.held.per_client):  # one address's refused connections: held up to its share
        assert small.hold("127.0.0.2")
    assert not small.hold("127.0.0.2") and small.hold("127.0.0.3")
    roomy = ConnectionCount(32, 1000, Descriptors(limit=65536, in_use=40, reserve=8192))
    assert (roomy.opened.total, roomy.held.total) == (1000, 8192)  # the configured bounds, where they fit
    assert Descriptors.now().reserve >= MIN_RESERVE


@pytest.mark.slow  # a server process under ulimit -n 1024 and 80 queries on fresh connections: about 15 s
def test_idle_sockets_from_one_address_take_no_descriptor_another_needs(tmp_path):
    store = Store(str(tmp_path / "store"))
    embedder = HashingEmbedder(dim=32)
    operations.ingest(store, load_corpus(DATA), ReplayExtractor(load_recorded_extractions(DATA)), embedder)
    export_snapshot(store, embedder)
    figures = descriptor_flood(store.uri, [QUESTION], flood=1000, fd_limit=1024, queries=20, timeout=240)
    assert figures["flood_opened"] == 1000, figures
    assert figures["beside_flood"]["failures"] == 0 and figures["alone"]["failures"] == 0, figures
    assert set(figures["beside_flood"]["health_statuses"]) == {"200"}, figures
    assert figures["server_fds_with_flood"] < 1024 - MIN_RESERVE, figures
    assert figures["query_p50_ratio"] <= 3.0, figures
