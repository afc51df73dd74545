"""The graph derived again with its links computed in pieces: the store migrate commits, staging gone."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.index.link_pieces import RelinkError
from lightfoot_pipeline.ingest.extraction.replay import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.operations import relink
from lightfoot_pipeline.operations.erase import vacuum
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import NAME_SKETCHES

pytestmark = [pytest.mark.slow]

SETTINGS = IndexSettings()
# Small enough that the sample's names (one type, 19,146) are cut into band ranges.
SIZE = 600_000


@pytest.fixture(scope="module")
def built(sample_store_built) -> Path:
    """The bundled sample, built with the hashing embedder (32 dimensions) and the default settings,
    once per session (tests/conftest.py; copied by each test)."""
    assert IndexSettings() == SETTINGS and Store(str(sample_store_built)).exists()
    return sample_store_built


def _copy(built: Path, to: Path) -> Store:
    shutil.copytree(built, to)
    return Store(str(to))


def _sketches(store: Store) -> pl.DataFrame:
    return store.read(NAME_SKETCHES.name).select(NAME_SKETCHES.columns).sort(["type", "name"])


def _staging(store: Store) -> list[Path]:
    folder = Path(store.uri) / "_lightfoot" / "relink"
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def test_pieces_commit_the_store_that_migrate_commits(built, tmp_path):
    one, spread = _copy(built, tmp_path / "one"), _copy(built, tmp_path / "spread")
    embedder = HashingEmbedder(dim=32)
    prepared = relink.prepare(spread, embedder, SETTINGS, "run-1")
    steps = relink.plan(spread, prepared, SIZE)
    assert len(steps) > 3 and any(p.first_band > 0 for s in steps for p in s)  # the bands cut into ranges
    assert len(_staging(spread)) > 2
    for step in steps:
        relink.link_pieces(spread, prepared, step, SETTINGS)
    spread_change = relink.commit(spread, prepared, SETTINGS)
    one_change = operations.migrate(one, embedder, SETTINGS)

    assert fingerprint(spread).digest == fingerprint(one).digest
    assert spread_change.links_added == one_change.links_added > 1000
    assert spread_change.entities_after == one_change.entities_after
    assert _sketches(spread).equals(_sketches(one))  # not in the fingerprint: compared here
    assert _staging(spread) == []


def test_keys_are_computed_again_for_another_banding(built, tmp_path):
    """A store relinked with another LSH seed equals one migrated with it: stored keys are not reused."""
    other = IndexSettings(lsh_seed=7)
    one, spread = _copy(built, tmp_path / "one"), _copy(built, tmp_path / "spread")
    operations.migrate(one, HashingEmbedder(dim=32), other)
    relink.relink(spread, HashingEmbedder(dim=32), other, size=SIZE)
    assert fingerprint(spread).digest == fingerprint(one).digest
    assert _sketches(spread).equals(_sketches(one))
    assert not _sketches(spread).equals(_sketches(Store(str(built))))
    assert spread.manifest().config["settings"]["lsh_seed"] == 7


def test_a_store_changed_since_prepare_is_refused_and_left_as_it_is(built, tmp_path, sample_documents):
    store = _copy(built, tmp_path / "store")
    prepared = relink.prepare(store, HashingEmbedder(dim=32), SETTINGS, "run-2")
    for step in relink.plan(store, prepared, SIZE):
        relink.link_pieces(store, prepared, step, SETTINGS)
    operations.delete(store, [sample_documents[0].doc_id])
    before = store.manifest()
    with pytest.raises(RelinkError, match=r"changed since its names were prepared \(commit 1, now 2\)"):
        relink.commit(store, prepared, SETTINGS)
    assert store.manifest().seq == before.seq
    assert _staging(store) == []


def test_a_missing_piece_is_refused_and_nothing_is_committed(built, tmp_path):
    store = _copy(built, tmp_path / "store")
    digest = fingerprint(store).digest
    prepared = relink.prepare(store, HashingEmbedder(dim=32), SETTINGS, "run-3")
    steps = relink.plan(store, prepared, SIZE)
    for step in steps[:-1]:
        relink.link_pieces(store, prepared, step, SETTINGS)
    with pytest.raises(RelinkError, match="no links"):
        relink.commit(store, prepared, SETTINGS)
    assert store.manifest().seq == 1 and fingerprint(store).digest == digest
    assert _staging(store) == []
    with pytest.raises(RelinkError, match="was removed"):  # a step of the failed run stops
        relink.link_pieces(store, prepared, steps[-1], SETTINGS)
    assert _staging(store) == []


def test_an_erasure_removes_what_a_run_staged(built, tmp_path):
    store = _copy(built, tmp_path / "store")
    prepared = relink.prepare(store, HashingEmbedder(dim=32), SETTINGS, "run-4")
    relink.link_pieces(store, prepared, relink.plan(store, prepared, SIZE)[0], SETTINGS)
    assert any(p.parent.name == "links" for p in _staging(store))
    vacuum(store)
    assert _staging(store) == []


def test_bad_input_is_refused_with_its_reason(built, tmp_path):
    with pytest.raises(RelinkError, match="no store at"):
        relink.prepare(Store(str(tmp_path / "empty")), HashingEmbedder(dim=32), SETTINGS, "run-5")
    store = _copy(built, tmp_path / "store")
    with pytest.raises(RelinkError, match="run id"):
        relink.prepare(store, HashingEmbedder(dim=32), SETTINGS, "../elsewhere")
    with pytest.raises(RelinkError, match="no bands to split by"):
        relink.prepare(store, HashingEmbedder(dim=32), IndexSettings(lsh_bands=0), "run-5")
    prepared = relink.prepare(store, HashingEmbedder(dim=32), SETTINGS, "run-5")
    with pytest.raises(RelinkError, match="prepared for settings"):
        relink.link_pieces(store, prepared, [], IndexSettings(lsh_seed=3))


def test_migrate_with_pieces_on_the_command_line(built, tmp_path, monkeypatch, capsys):
    import json

    from lightfoot_pipeline.cli import main

    one, spread = _copy(built, tmp_path / "one"), _copy(built, tmp_path / "spread")
    operations.migrate(one, HashingEmbedder(dim=32), SETTINGS)
    monkeypatch.setenv("LIGHTFOOT_LINK_PIECE_SIZE", str(SIZE))
    assert main(["migrate", "--store", spread.uri, "--pieces", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["commit"] == 2 and payload["graph"]["links_added"] > 1000
    assert fingerprint(Store(spread.uri)).digest == fingerprint(one).digest
    assert _staging(spread) == []
    monkeypatch.setenv("LIGHTFOOT_LINK_PIECE_SIZE", "0")
    assert main(["migrate", "--store", spread.uri, "--pieces"]) == 2
    assert "LIGHTFOOT_LINK_PIECE_SIZE=0" in capsys.readouterr().err


def test_a_first_build_with_the_graph_deferred_equals_a_fresh_build(tmp_path, sample_documents, sample_records):
    """Documents through the document stage alone (as the per-document assets commit them), then a
    relink: the store a one-commit ingest builds."""
    from lightfoot_pipeline.index.documents import derive_forms, document_passages, record_extractions, upsert_documents

    documents, embedder = sample_documents[:300], HashingEmbedder(dim=32)
    fresh = Store(str(tmp_path / "fresh"))
    operations.ingest(fresh, documents, ReplayExtractor(sample_records), embedder, SETTINGS)
    deferred = Store(str(tmp_path / "deferred"))
    outcomes = ReplayExtractor(sample_records).extract(document_passages(documents, SETTINGS))
    with deferred.transaction() as tx:
        operations.check_config(tx, SETTINGS, embedder)
        upsert_documents(tx, documents, SETTINGS)
        record_extractions(tx, outcomes)
        derive_forms(tx, [d.doc_id for d in documents])
        tx.commit("ingest", {})
    assert deferred.read("aliases").height == 0  # no graph yet
    change = relink.relink(deferred, embedder, SETTINGS, size=SIZE // 4)
    assert change.names_added > 1000
    assert fingerprint(deferred).digest == fingerprint(fresh).digest
    assert _sketches(deferred).equals(_sketches(fresh))
    assert deferred.read("graph_queue").height == 0  # nothing left for the graph asset to do


def test_a_graph_derived_in_batches_commits_the_store_that_migrate_commits(built, tmp_path):
    """The commit step in batches of 400 documents in a store of its own (each batch a commit
    there), its tables then copied in a group of buckets at a time: the store migrate commits,
    every table of it, and no staging left."""
    from lightfoot_pipeline.store import transaction

    one, batched = _copy(built, tmp_path / "one"), _copy(built, tmp_path / "batched")
    embedder = HashingEmbedder(dim=32)
    before = batched.manifest()
    change = None
    shadows: list[int] = []
    commit = transaction.Transaction.commit

    def noting(tx, operation, details=None):
        if operation == "relink batch":
            shadows.append(tx.count("aliases"))
        return commit(tx, operation, details)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transaction.Transaction, "commit", noting)
        patch.setattr(transaction, "REWRITE_ROWS", 20_000)  # the copy in several groups of buckets
        change = relink.relink(batched, embedder, SETTINGS, size=SIZE, batch=400)
    one_change = operations.migrate(one, embedder, SETTINGS)
    assert len(shadows) == 5 and shadows == sorted(shadows)  # 1,890 documents, 400 at a time
    after = batched.manifest()
    assert after.seq == before.seq + 1 and after.details["derived_in_batches"] == 400
    assert after.versions["forms"] - before.versions["forms"] > 1  # copied a group of buckets at a time
    assert fingerprint(batched).digest == fingerprint(one).digest
    assert change.links_added == one_change.links_added and change.entities_after == one_change.entities_after
    assert _sketches(batched).equals(_sketches(one))
    for name in ("document_keys", "name_links_reverse", "graph_queue"):  # not fingerprinted: compared here
        assert batched.read(name).drop("bucket").sort(pl.all()).equals(one.read(name).drop("bucket").sort(pl.all()))
    assert _staging(batched) == []
