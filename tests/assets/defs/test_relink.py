"""The relink job: the store migrate commits, steps in their own processes, nothing staged left."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.models.embedder import load_embedder
from lightfoot_pipeline.operations import relink
from lightfoot_pipeline.settings import IndexSettings, SettingsError
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store

pytestmark = [pytest.mark.dagster]

HASHING = "hashing:32"  # the harness's embedder (tests/assets/conftest.py)
# Names x bands a step: the sample's 19,146 names in several steps of band ranges.
PIECE_SIZE = "1500000"


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory, sample_store_built) -> tuple[Path, str]:
    """The bundled sample built with the harness's embedder (the session's store, tests/conftest.py:
    the hashing embedder of 32 dimensions), and the fingerprint migrate gives it."""
    assert HASHING == "hashing:32"
    root = tmp_path_factory.mktemp("relink-job")
    built = sample_store_built
    shutil.copytree(built, root / "migrated")
    migrated = Store(str(root / "migrated"))
    operations.migrate(migrated, load_embedder(HASHING), IndexSettings())
    return built, fingerprint(migrated).digest


def _staged(store_uri: str) -> list[Path]:
    folder = Path(store_uri) / "_lightfoot" / "relink"
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def _run(lightfoot):
    return lightfoot.defs.resolve_job_def("relink_job").execute_in_process(
        instance=lightfoot.instance, raise_on_error=False)


def _failure(result) -> str:
    """The messages of the failed steps' errors and their causes."""
    messages = []
    for event in (e for e in result.all_events if e.is_step_failure):
        error = event.event_specific_data.error
        while error is not None:
            messages.append(error.message)
            error = error.cause
    return " ".join(messages)


def test_the_job_commits_the_store_that_migrate_commits(lightfoot, sample_store, monkeypatch):
    built, expected = sample_store
    shutil.copytree(built, lightfoot.store_uri)
    monkeypatch.setenv("LIGHTFOOT_LINK_PIECE_SIZE", PIECE_SIZE)
    monkeypatch.setenv("LIGHTFOOT_RELINK_BATCH", "1000")  # the sample's 1,890 documents derived in two commits
    result = _run(lightfoot)
    assert result.success
    assert fingerprint(lightfoot.store()).digest == expected
    assert len([e for e in result.all_events if e.is_step_success and "link_pieces[" in e.step_key]) == 3
    materializations = [e for e in result.all_events if e.is_step_materialization]
    materialized = {e.asset_key.to_user_string() for e in materializations}
    assert materialized == {"name_vectors", "name_links", "entities", "synonym_edges", "facts"}
    metadata = materializations[0].event_specific_data.materialization.metadata
    assert metadata["derived_in_batches"].value == 1000
    assert _staged(lightfoot.store_uri) == []


def test_a_failing_piece_fails_the_run_and_leaves_the_store_as_it_was(lightfoot, sample_store, monkeypatch):
    built, expected = sample_store
    shutil.copytree(built, lightfoot.store_uri)
    before = fingerprint(lightfoot.store()).digest
    vectors = Path(lightfoot.store_uri) / "vectors"
    vectors.rename(vectors.with_name("vectors.aside"))  # keys are stored: only the pieces need vectors
    monkeypatch.setenv("LIGHTFOOT_LINK_PIECE_SIZE", PIECE_SIZE)
    result = _run(lightfoot)
    assert not result.success
    assert "have no cached vector" in _failure(result)  # the piece's reason
    assert not [e for e in result.all_events if e.step_key == "commit_relink" and e.is_step_success]
    assert lightfoot.store().manifest().seq == 1 and fingerprint(lightfoot.store()).digest == before
    assert _staged(lightfoot.store_uri) == []

    vectors.with_name("vectors.aside").rename(vectors)
    assert _run(lightfoot).success  # a rerun succeeds
    assert fingerprint(lightfoot.store()).digest == expected


def test_a_store_changed_since_prepare_is_refused(lightfoot, sample_store, sample_documents, monkeypatch):
    built, _ = sample_store
    shutil.copytree(built, lightfoot.store_uri)
    original = relink.link_pieces
    deleted = []

    def deleting_first(store, *args):  # a deletion commits while the pieces run
        if not deleted:
            deleted.append(operations.delete(Store(lightfoot.store_uri), [sample_documents[0].doc_id]))
        return original(store, *args)

    monkeypatch.setattr(relink, "link_pieces", deleting_first)
    result = _run(lightfoot)
    assert not result.success
    assert "changed since its names were prepared (commit 1, now 2)" in _failure(result)
    assert lightfoot.store().manifest().seq == 2 and lightfoot.store().manifest().operation == "delete"
    assert _staged(lightfoot.store_uri) == []


def test_steps_run_in_processes_of_their_own(sample_store, tmp_path, monkeypatch):
    built, expected = sample_store
    shutil.copytree(built, tmp_path / "store")
    monkeypatch.setenv("LIGHTFOOT_LINK_PIECE_SIZE", "4000000")  # the pieces in one step
    job = dg.build_reconstructable_job("assets.defs.relink", "relink_job_for",
                                       reconstructable_args=(str(tmp_path / "store"), HASHING))
    with dg.instance_for_test() as instance, dg.execute_job(job, instance=instance) as result:
        assert result.success
        started = [e for e in result.all_events if e.event_type_value == "STEP_START"]
        assert len({e.pid for e in started}) == len(started) == 4  # prepare, plan, one step, commit
    assert fingerprint(Store(str(tmp_path / "store"))).digest == expected
    assert _staged(str(tmp_path / "store")) == []


def test_the_commit_holds_the_store_pool_and_the_executor_follows_the_setting(monkeypatch):
    import assets.defs.relink as module

    assert module.relink_job.graph.node_dict["commit_relink"].definition.pool == "lightfoot_store"
    assert module.relink_job.executor_def is dg.multiprocess_executor
    k8s = pytest.importorskip("dagster_k8s")
    monkeypatch.setenv("LIGHTFOOT_RELINK_EXECUTOR", "k8s")
    assert module._executor() is k8s.k8s_job_executor
    monkeypatch.setenv("LIGHTFOOT_RELINK_EXECUTOR", "threads")
    with pytest.raises(SettingsError, match="expected multiprocess or k8s"):
        module._executor()
