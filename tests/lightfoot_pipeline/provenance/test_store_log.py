"""The store log judged: external commits move the version commit at once; an orchestrated run's
commits wait while it runs, and count once it ended unless a snapshot reflects them."""

from __future__ import annotations

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.provenance.store_log import LogState, read_store_log
from lightfoot_pipeline.store.batches import DAGSTER, Batch, writing_batch
from lightfoot_pipeline.store.store import Store


def test_external_commits_move_the_version_and_a_run_s_wait_until_it_ended(tmp_path, sample_documents,
                                                                           sample_records):
    store = Store(str(tmp_path / "store"), n_buckets=2)
    replay = ReplayExtractor(sample_records)
    operations.ingest(store, sample_documents[:2], replay, None, link=False)  # the command line's
    first = read_store_log(store, LogState(), 0, lambda run_id: True)
    seq = store.manifest().seq
    assert first.moved and first.previous_version is None
    assert first.state.external_commit == first.state.version_commit == first.state.store_commit == seq
    assert first.external.height == seq

    with writing_batch(Batch("drop-test", "run-1", DAGSTER)):
        operations.ingest(store, sample_documents[2:4], replay, None, link=False)
    running = read_store_log(store, first.state, seq, lambda run_id: False)
    assert not running.moved and running.state.pending_runs == {"run-1": store.manifest().seq}
    assert running.external.height == 0
    reflected = read_store_log(store, running.state, store.manifest().seq, lambda run_id: True)
    assert not reflected.moved and reflected.state.pending_runs == {}, "a snapshot reflects it"
    ended = read_store_log(store, running.state, seq, lambda run_id: True)
    assert ended.moved and ended.state.version_commit == store.manifest().seq and ended.state.pending_runs == {}


def test_a_state_round_trips_through_a_cursor():
    state = LogState(3, 2, 2, {"run-1": 3})
    assert LogState.of(state.as_cursor()) == state
    assert LogState.of({}) == LogState()
