"""A deletion through Dagster reaches every door of a running service within seconds.

The deletion path of the revocation promise (tests/lightfoot_pipeline/service/test_revocation.py
covers ``lightfoot readers --nobody`` and ``lightfoot delete``): an erasure request's deletion
run, executed by the Dagster harness on the store a running service reads, with that module's
server, store and fresh build.
"""

from __future__ import annotations

import threading
import time

import pytest

from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL, Principal
from tests.lightfoot_pipeline.permissions.compare import assert_same_snapshot
from tests.lightfoot_pipeline.service import test_revocation as revocation
from tests.lightfoot_pipeline.service.test_views_leak import QUESTION, SECRET, call, mentions

pytestmark = [pytest.mark.dagster]

# The service test's fixtures: its store (the query corpus and a document only legal reads), a
# fresh build without that document, and a server over a copy of the store in the test's tmp_path,
# where the harness's store is too.
built, fresh, running = revocation.built, revocation.fresh, revocation.running


@pytest.mark.slow  # a server and a deletion run: about 10 s
def test_a_dagster_deletion_reaches_every_door_for_every_principal_within_seconds(
    running, lightfoot, fresh, chat_server
):
    """The deletion path of item 2's promise, through Dagster: an erasure request's deletion run,
    against the store a running service reads (test_revocation.py's server, polling every 0.2 s),
    stops every door serving the document to everyone within the bound of the commit."""
    store, base, service = running
    assert lightfoot.store_uri == store.uri, "the harness runs on the store the service reads"
    fact_id = revocation.canary_fact(base)
    lightfoot.drop_erasure_request("canary.json", [SECRET.doc_id], erase=True)
    tick = lightfoot.tick("erasure_sensor")
    results: list = []
    run = threading.Thread(target=lambda: results.extend(lightfoot.launch(tick, "erasure_sensor", "deletion_job")))
    run.start()
    committed, gone = None, {}
    deadline = time.perf_counter() + 120
    while (committed is None or len(gone) < 2) and time.perf_counter() < deadline:
        if committed is None and SECRET.doc_id not in store.read("documents", columns=["doc_id"])["doc_id"]:
            committed = time.perf_counter()  # the deletion run's tombstone commit, seen
        for token in (revocation.COUNSEL_TOKEN, revocation.OPERATOR_TOKEN):
            if token not in gone:
                status, text = call(base, "/query", token, {"question": QUESTION, "top_k": 13, "answer": False})
                assert status == 200, text
                if mentions(text) == 0:
                    gone[token] = time.perf_counter()
        time.sleep(0.05)
    run.join()
    (result,) = results
    assert result is not None and result.success
    assert committed is not None and len(gone) == 2
    assert max(gone.values()) - committed < revocation.BOUND_S
    for token in (revocation.COUNSEL_TOKEN, revocation.OPERATOR_TOKEN):
        revocation.no_door_serves_it(base, token, fact_id, chat_server)
    for principal in (revocation.COUNSEL, OPERATOR_PRINCIPAL, Principal("outsider", ())):
        assert_same_snapshot(service.current(principal).snapshot, fresh)
