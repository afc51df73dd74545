"""The exactness check of a run's changes (operations/exactness.py) and the choice between it and
the whole-store rebuild (operations/checks.py: ``check_exactness``): it passes after an ingest and
after a deletion, fails on a corrupted component naming the component and the table, finds a
corruption elsewhere through its sample, and keeps to its bound."""

from __future__ import annotations

import shutil

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.operations.checks import AUTO, CHANGED, FULL, check_exactness, latest_run
from lightfoot_pipeline.operations.exactness import ExactnessBounds, compare_changes, run_changes
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.batches import Batch, writing_batch
from lightfoot_pipeline.store.store import Store

pytestmark = [pytest.mark.slow]  # a store of 45 documents built once (~3 s), then a fraction of a second a check


@pytest.fixture(scope="module")
def changed_store(tmp_path_factory, sample_documents, sample_records, hashing_embedder):
    """A store built by three runs: ``run-build`` ingests 40 documents, ``run-add`` 5 more, and
    ``run-delete`` deletes two (one of each)."""
    root = tmp_path_factory.mktemp("exactness") / "store"
    store = Store(str(root))
    documents = sample_documents[:45]
    for run, part in (("run-build", documents[:40]), ("run-add", documents[40:])):
        with writing_batch(Batch(f"cli-{run}", run)):
            operations.ingest(store, part, ReplayExtractor(sample_records), hashing_embedder)
    with writing_batch(Batch("cli-run-delete", "run-delete")):
        operations.delete(store, [documents[3].doc_id, documents[42].doc_id])
    return root


def copy_of(root, tmp_path) -> Store:
    shutil.copytree(root, tmp_path / "store")
    return Store(str(tmp_path / "store"))


def tamper(store: Store, name: str, change) -> None:
    """Rewrite a table through the store's own writer, as corruption would leave it."""
    with store.transaction() as tx:
        tx.put(name, change(tx.table(name)))
        tx.commit("tamper", {})


def changed_entities(store: Store, run_id: str) -> list[str]:
    live = run_changes(store, run_id).names.filter(pl.col("live")).select("name", "type")
    return sorted(set(store.read("aliases").join(live, on=["name", "type"]).get_column("entity_id").to_list()))


def test_the_check_passes_after_an_ingest_and_after_a_deletion(changed_store):
    store = Store(str(changed_store))
    for run in ("run-add", "run-delete"):
        found = compare_changes(store, IndexSettings(), run)
        assert found.passed, found.summary()
        assert found.changed_components > 0 and found.compared_changed == found.changed_components
        assert found.changed_facts > 0 and found.compared_facts == found.changed_facts
        assert not found.sampled and found.untouched_compared > 0 and found.untouched_facts > 0
        assert found.compared_documents == found.live_run_documents == (4 if run == "run-add" else 0), "one of run-add's five is deleted"
        assert found.rows["entities"] > 0 and found.store_digests == found.derived_digests
        assert found.summary().endswith("; passed")
    deletion = run_changes(store, "run-delete")
    assert deletion.documents == 2 and not deletion.unreadable
    assert deletion.names.filter(~pl.col("live")).height > 0, "the deleted documents' own names are compared gone"
    assert latest_run(store) == "run-delete"


def test_a_corrupted_component_of_the_run_fails_naming_the_component_and_the_table(changed_store, tmp_path):
    store = copy_of(changed_store, tmp_path)
    victim = changed_entities(store, "run-add")[0]
    display = store.read("entities").filter(pl.col("entity_id") == victim).get_column("display_name")[0]
    tamper(store, "entities", lambda frame: frame.with_columns(
        pl.when(pl.col("entity_id") == victim).then(pl.lit("tampered")).otherwise("display_name").alias("display_name")))
    found = compare_changes(store, IndexSettings(), "run-add")
    assert not found.passed and found.differing["entities"] == [victim]
    assert [t for t, ids in found.differing.items() if ids] == ["entities"]
    assert f"entities: {victim} (1)" in found.summary()
    assert display not in found.summary() and "tampered" not in found.summary(), "ids, never content"


def test_a_dropped_synonym_edge_of_a_changed_component_fails(changed_store, tmp_path):
    store = copy_of(changed_store, tmp_path)
    mine = changed_entities(store, "run-add")
    edges = store.read("synonym_edges")
    edge = edges.filter(pl.col("entity_a").is_in(mine) | pl.col("entity_b").is_in(mine)).row(0, named=True)
    tamper(store, "synonym_edges", lambda frame: frame.filter(
        (pl.col("entity_a") != edge["entity_a"]) | (pl.col("entity_b") != edge["entity_b"])))
    found = compare_changes(store, IndexSettings(), "run-add")
    assert not found.passed
    assert found.differing["synonym_edges"] == sorted([edge["entity_a"], edge["entity_b"]])


def test_a_form_missing_from_a_document_of_the_run_fails_naming_the_document(changed_store, tmp_path):
    store = copy_of(changed_store, tmp_path)
    doc = run_changes(store, "run-add").live_documents[0]
    dropped = store.read("forms").filter(pl.col("doc_id") == doc).row(0, named=True)
    tamper(store, "forms", lambda frame: frame.filter(
        (pl.col("chunk_id") != dropped["chunk_id"]) | (pl.col("name") != dropped["name"])))
    found = compare_changes(store, IndexSettings(), "run-add")
    assert not found.passed and found.differing["forms"] == [doc] and found.compared_documents == 4
    assert dropped["name"] not in found.summary()


def test_a_corruption_the_run_did_not_make_is_found_when_the_sample_draws_it(changed_store, tmp_path):
    store = copy_of(changed_store, tmp_path)
    drawn = compare_changes(store, IndexSettings(), "run-add", bounds=ExactnessBounds(untouched=5))
    assert drawn.untouched_compared == 5 and not set(drawn.untouched_ids) & set(changed_entities(store, "run-add"))
    assert compare_changes(store, IndexSettings(), "run-add", bounds=ExactnessBounds(untouched=5)).untouched_ids == \
        drawn.untouched_ids, "the sample is drawn by the run's commit: the same every time"
    victim = drawn.untouched_ids[0]
    tamper(store, "mentions", lambda frame: frame.filter(pl.col("entity_id") != victim))
    found = compare_changes(store, IndexSettings(), "run-add", bounds=ExactnessBounds(untouched=5))
    assert found.untouched_ids == drawn.untouched_ids, "a later commit does not move the sample"
    assert not found.passed and victim in found.differing["mentions"]
    unsampled = compare_changes(store, IndexSettings(), "run-add", bounds=ExactnessBounds(untouched=0))
    assert unsampled.passed, "the run's own components are sound: only the sample finds it"


def test_a_run_that_changed_more_than_the_bound_compares_a_sample_and_says_so(changed_store):
    store = Store(str(changed_store))
    bounds = ExactnessBounds(changed=3, changed_facts=4, documents=2, untouched=2, untouched_facts=2)
    found = compare_changes(store, IndexSettings(), "run-build", bounds=bounds)
    assert found.passed and found.sampled
    assert found.compared_changed == 3 < found.changed_components and found.compared_facts == 4 < found.changed_facts
    assert found.rows["facts"] <= 4 + 2 and found.names_compared < found.changed_names
    assert found.compared_documents == 2 < found.live_run_documents == 39
    assert found.summary().startswith(f"compared 3 of {found.changed_components:,} changed components and 4 of "
                                      f"{found.changed_facts:,} changed facts and the forms of 2 of 39 documents "
                                      "(sample), 2 untouched components")
    assert compare_changes(store, IndexSettings(), "run-build", bounds=bounds).rows == found.rows


def test_the_whole_store_is_rebuilt_up_to_the_limit_and_the_changes_compared_above(changed_store, hashing_embedder):
    store = Store(str(changed_store))
    loads = []

    def embedder():
        loads.append(1)
        return hashing_embedder

    above = check_exactness(store, IndexSettings(), embedder, run_id="run-delete", mode=AUTO, full_limit=10)
    assert above.mode == CHANGED and above.passed and not loads, "comparing the changes loads no model"
    assert above.metadata()["compared_changed_components"] == above.changes.changed_components
    whole = check_exactness(store, IndexSettings(), embedder, run_id="run-delete", mode=FULL)
    assert whole.mode == FULL and whole.passed and loads == [1]
    assert whole.metadata()["store_fingerprint"] == whole.metadata()["rebuild_fingerprint"]
    assert check_exactness(store, IndexSettings(), embedder, run_id=None, mode=CHANGED).changes.changed_components == 0
    with pytest.raises(ValueError, match="exactness mode 'most'"):
        check_exactness(store, IndexSettings(), embedder, run_id=None, mode="most")


def test_a_deletion_whose_history_is_erased_says_its_changes_are_left_to_the_samples(changed_store, tmp_path,
                                                                                    sample_documents):
    store = copy_of(changed_store, tmp_path)
    with writing_batch(Batch("cli-run-erase", "run-erase")):
        operations.delete(store, [sample_documents[5].doc_id], erase=True)
    found = compare_changes(store, IndexSettings(), "run-erase")
    (seq,) = found.unreadable_commits  # the deletion's commit: the erasure vacuumed the state before it
    assert found.passed and found.changed_names == 0 and found.untouched_compared > 0
    assert f"commit {seq} is erased from storage history" in found.summary()


def test_a_sample_of_the_changed_facts_fills_the_buckets_it_reads(changed_store, monkeypatch):
    """Facts and their sources are bucketed by fact: a sample that takes every changed fact of the
    buckets it reads (but the last) reads as few buckets as can hold it."""
    from lightfoot_pipeline.store.tables import bucket_of

    store = Store(str(changed_store))
    asked: dict[str, list[str]] = {}
    real_rows = Store.rows

    def rows(self, name, column, values, manifest=None):
        asked.setdefault(name, []).extend(values)
        return real_rows(self, name, column, values, manifest)

    monkeypatch.setattr(Store, "rows", rows)
    changed = run_changes(store, "run-add").facts
    found = compare_changes(store, IndexSettings(), "run-add", bounds=ExactnessBounds(changed_facts=3, untouched_facts=0))
    assert found.passed and found.compared_facts == 3 < found.changed_facts == len(changed)

    n = store.layout_buckets(store.manifest())
    sampled = set(asked["facts"])
    assert len(sampled) == 3
    buckets = {bucket_of(fact, n) for fact in sampled}
    partly_taken = [b for b in buckets if {f for f in changed if bucket_of(f, n) == b} - sampled]
    assert len(partly_taken) <= 1, "only the last bucket read may hold changed facts the sample left out"
    assert len(buckets) < len({bucket_of(fact, n) for fact in changed})


def test_a_sample_of_the_changed_components_fills_the_entity_buckets_it_reads(changed_store, monkeypatch):
    """Entities, mentions and synonym edges are bucketed by entity: a sample of the changed
    components takes every changed component of the buckets it reads (but the last)."""
    from lightfoot_pipeline.store.tables import ALIASES, bucket_of

    store = Store(str(changed_store))
    n = store.layout_buckets(store.manifest())
    names = run_changes(store, "run-build").names.filter(pl.col("live")).select("name", "type")
    changed = set(store.read(ALIASES.name).join(names, on=["name", "type"]).get_column("entity_id").to_list())
    asked: list[str] = []
    real_rows = Store.rows

    def rows(self, name, column, values, manifest=None):
        if name == "entities":
            asked.extend(values)
        return real_rows(self, name, column, values, manifest)

    monkeypatch.setattr(Store, "rows", rows)
    bounds = ExactnessBounds(changed=5, untouched=0, untouched_facts=0)
    found = compare_changes(store, IndexSettings(), "run-build", bounds=bounds)
    assert found.passed and found.compared_changed == 5 < found.changed_components
    sampled = set(asked) & changed
    buckets = {bucket_of(e, n) for e in sampled}
    partly_taken = [b for b in buckets if {e for e in changed if bucket_of(e, n) == b} - sampled]
    assert len(partly_taken) <= 1, "only the last bucket read may hold changed components the sample left out"
    assert len(buckets) < len({bucket_of(e, n) for e in changed})
