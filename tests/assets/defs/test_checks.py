"""The asset checks find what is wrong, and a failed blocking check stops the serving export."""

from __future__ import annotations

import shutil

import dagster as dg
import polars as pl
import pytest

from lightfoot_pipeline.snapshot.format import latest_snapshot
from lightfoot_pipeline.snapshot.verdict import unpublished_snapshot
from lightfoot_pipeline.store.tables import EXTRACTIONS, FACTS, MENTIONS, with_buckets

pytestmark = [pytest.mark.dagster]


@pytest.fixture(scope="module")
def ingested_once(tmp_path_factory, harness_in, twenty, sample_records):
    """Six documents through the inbox, once per module: the harness's root (store, inboxes, and
    an instance on disk under dagster_home/) and its sensor cursors. Each test changes a copy."""
    root = tmp_path_factory.mktemp("checks") / "root"
    with pytest.MonkeyPatch.context() as monkeypatch, harness_in(root, monkeypatch) as harness:
        harness.ingest_through_the_inbox(twenty[:6], sample_records)
        return root, dict(harness.cursors)


@pytest.fixture
def ingested(ingested_once, harness_in, tmp_path, monkeypatch):
    """The harness on a copy of the module's ingested root, with its own instance."""
    template, cursors = ingested_once
    root = tmp_path / "root"
    shutil.copytree(template, root)
    with harness_in(root, monkeypatch, rebuild_check=True, home_exists=True) as harness:
        harness.cursors.update(cursors)
        yield harness


def deletion_run(lightfoot, run_config: dict | None = None):
    """A deletion run with no request pending: it applies nothing and runs the graph's checks."""
    return lightfoot.run(dg.RunRequest(tags={"lightfoot/deletion": "erase-check"}), "deletion_job",
                         run_config=run_config)


def evaluations(result) -> dict[tuple[str, str], dg.AssetCheckEvaluation]:
    return {(e.asset_key.to_user_string(), e.check_name): e for e in result.get_asset_check_evaluations()}


def materialized(result) -> set[str]:
    return {e.event_specific_data.materialization.asset_key.to_user_string()
            for e in result.get_asset_materialization_events()}


def tamper(store, name: str, change) -> None:
    with store.transaction() as tx:
        tx.put(name, change(tx.table(name), tx.n_buckets))
        tx.commit("tamper", {})


def test_a_sound_store_passes_every_check(ingested):
    result = deletion_run(ingested)
    assert result.success
    checks = evaluations(result)
    # The graph's checks: a deletion removes passages with their extractions, so the deletion job
    # leaves the passages check to the jobs that extract; the serving snapshot's permission check
    # passes at once, every document being public.
    assert len(checks) == 7 and all(c.passed for c in checks.values())
    assert checks[("serving_snapshot", "views_match_fresh_stores")].metadata["principals"].value == 0
    assert ("extractions", "passages_accounted_for") not in checks
    rebuild = checks[("facts", "matches_fresh_rebuild")].metadata
    assert rebuild["store_fingerprint"].value == rebuild["rebuild_fingerprint"].value
    assert rebuild["differing_tables"].value == []
    assert "serving_snapshot" in materialized(result)


def test_a_dangling_mention_fails_its_check_and_blocks_the_export(ingested):
    def add_dangling(frame: pl.DataFrame, n_buckets: int) -> pl.DataFrame:
        ghost = frame.head(1).drop("bucket").with_columns(pl.lit("chunk-deleted-long-ago").alias("chunk_id"))
        return pl.concat([frame, with_buckets(ghost, MENTIONS, n_buckets).cast(frame.schema)])

    tamper(ingested.store(), MENTIONS.name, add_dangling)
    result = deletion_run(ingested)
    check = evaluations(result)[("entities", "no_dangling_references")]
    assert not check.passed
    assert check.metadata["dangling"].value["mentions -> passages"] == 1
    assert check.metadata["total"].value == 1
    assert "serving_snapshot" not in materialized(result)
    assert "erasures" not in materialized(result)


def test_a_store_that_differs_from_a_fresh_rebuild_fails_on_the_asset_that_differs(ingested):
    def miscount(frame: pl.DataFrame, n_buckets: int) -> pl.DataFrame:
        first = frame.get_column("fact_id")[0]
        return frame.with_columns(
            pl.when(pl.col("fact_id") == first).then(pl.col("n_sources") + 1).otherwise(pl.col("n_sources"))
            .alias("n_sources")
        )

    tamper(ingested.store(), FACTS.name, miscount)
    result = deletion_run(ingested)
    checks = evaluations(result)
    assert not checks[("facts", "matches_fresh_rebuild")].passed
    assert checks[("facts", "matches_fresh_rebuild")].metadata["differing_tables"].value == ["facts"]
    assert checks[("entities", "matches_fresh_rebuild")].passed
    assert checks[("entities", "no_dangling_references")].passed
    assert "serving_snapshot" not in materialized(result)


def test_the_rebuild_comparison_can_be_turned_off_and_then_only_warns(ingested):
    def miscount(frame: pl.DataFrame, n_buckets: int) -> pl.DataFrame:
        return frame.with_columns((pl.col("n_sources") + 1).alias("n_sources"))

    tamper(ingested.store(), FACTS.name, miscount)
    off = {"ops": {"matches_fresh_rebuild": {"config": {"enabled": False}}}}
    result = deletion_run(ingested, off)
    rebuild = [c for (a, n), c in evaluations(result).items() if n == "matches_fresh_rebuild"]
    assert len(rebuild) == 5
    assert all(not c.passed and c.severity == dg.AssetCheckSeverity.WARN for c in rebuild)
    assert all("disabled" in c.description for c in rebuild)
    assert "serving_snapshot" in materialized(result), "a warning does not block"


def test_a_passage_with_no_extraction_is_not_accounted_for(ingested):
    from assets.defs.checks import passages_accounted_for

    store = ingested.store()
    context = dg.build_asset_check_context()  # outside a run: every document's passages
    assert passages_accounted_for(context, store=ingested.resources["store"]).passed
    tamper(store, EXTRACTIONS.name, lambda frame, n: frame.slice(1))
    extracted = set(store.read("extractions").get_column("chunk_id").to_list())
    (missing,) = [r for r in store.read("passages").iter_rows(named=True) if r["chunk_id"] not in extracted]
    result = passages_accounted_for(context, store=ingested.resources["store"])
    assert not result.passed
    assert result.metadata["missing"].value == 1
    assert result.metadata["documents_missing_extractions"].value == [missing["doc_id"]]
    # The message names the document, never the passage.
    assert result.description == f"1 documents have passages without an extraction ({missing['doc_id']})"
    assert missing["chunk_id"] not in result.description


def test_the_jobs_rebuild_the_whole_store_up_to_the_limit_and_compare_the_runs_changes_above(
        lightfoot_checked, twenty, sample_records):
    lightfoot = lightfoot_checked
    lightfoot.drop_documents("small", twenty[:3], sample_records)
    (request,) = lightfoot.tick("inbox_sensor").run_requests
    result = lightfoot.run(request)
    assert result.success
    checks = evaluations(result)
    facts = checks[("facts", "matches_fresh_rebuild")]
    assert facts.passed and facts.metadata["mode"].value == "full", "3 documents are under the limit"
    lightfoot.drop_documents("more", twenty[3:5], sample_records)
    (request,) = lightfoot.tick("inbox_sensor").run_requests
    limited = {"ops": {"matches_fresh_rebuild": {"config": {"full_limit": 4}}}}
    result = lightfoot.run(request, run_config=limited)
    assert result.success
    # The passages check of an ingestion run accounts for its batch's documents, not the store's.
    accounted = evaluations(result)[("extractions", "passages_accounted_for")]
    assert accounted.passed and accounted.metadata["batch"].value == request.partition_key
    mine = lightfoot.store().read("passages").filter(pl.col("doc_id").is_in([d.doc_id for d in twenty[3:5]]))
    assert 0 < accounted.metadata["passages"].value == mine.height < lightfoot.store().read("passages").height
    checks = evaluations(result)
    facts = checks[("facts", "matches_fresh_rebuild")]
    assert facts.passed and facts.metadata["mode"].value == "changed", "5 documents: the run's changes"
    assert facts.metadata["run_documents"].value == 2 and facts.metadata["changed_components"].value > 0
    assert facts.metadata["compared_changed_components"].value == facts.metadata["changed_components"].value
    links = checks[("name_links", "matches_fresh_rebuild")]  # compared by nothing this run: a warning, not a pass
    assert not links.passed and links.severity == dg.AssetCheckSeverity.WARN
    assert links.description.startswith("not compared:") and "whole-store check only" in links.description
    result = deletion_run(lightfoot, run_config=limited)
    facts = evaluations(result)[("facts", "matches_fresh_rebuild")]
    assert result.success and facts.passed and facts.metadata["mode"].value == "changed"
    assert facts.metadata["run_documents"].value == 0 and facts.metadata["untouched_components"].value > 0, \
        "a deletion run that deleted nothing compares the sample of the rest"


def test_the_rebuild_comparison_waits_for_no_other_run_to_be_mid_way(ingested, twenty, sample_records):
    """Another run's documents can be in the store before its graph step runs; while such a run is
    in progress the comparison is left to a later check (and its passages to its own check, which
    accounts for its batch's documents), and the first check that finds none mid-way compares."""
    from assets.defs.checks import documents_of, passages_accounted_for, runs_mid_way
    from lightfoot_pipeline.store.batches import DAGSTER, Batch, writing_batch

    instance = ingested.instance
    other = dg.DagsterRun(job_name="ingestion_job", run_id="other-ingestion-run", status=dg.DagsterRunStatus.STARTED)
    instance.add_run(other)
    assert runs_mid_way(instance, "this-run") == ["other-ingestion-run"]
    assert runs_mid_way(instance, "other-ingestion-run") == []

    # Its batch's documents and their extractions are in the store; its forms and graph steps have not run.
    from lightfoot_pipeline.index.documents import record_extractions, upsert_documents
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor
    from lightfoot_pipeline.settings import IndexSettings

    store = ingested.store()
    other_batch = "drop-other0123456789"
    instance.add_dynamic_partitions("batches", [other_batch])
    instance.add_run_tags("other-ingestion-run", {"dagster/partition": other_batch})
    with writing_batch(Batch(other_batch, "other-ingestion-run", DAGSTER)):
        with store.transaction() as tx:
            passages = upsert_documents(tx, twenty[6:8], IndexSettings())
            tx.commit("the other run's passages", {})
        with store.transaction() as tx:
            record_extractions(tx, ReplayExtractor(sample_records).extract(passages[:-1]))  # one passage still to ask
            tx.commit("the other run's extractions", {})
    # The mid-way run's documents are found through its batch, the partition it runs.
    assert documents_of(instance, store, runs_mid_way(instance, "this-run")) == {twenty[6].doc_id, twenty[7].doc_id}
    result = deletion_run(ingested)
    rebuild = evaluations(result)[("facts", "matches_fresh_rebuild")]
    assert not rebuild.passed and rebuild.severity == dg.AssetCheckSeverity.WARN
    assert "other-ingestion-run is mid-way" in rebuild.description
    assert result.success and "serving_snapshot" in materialized(result)  # a warning blocks nothing

    instance.report_run_failed(instance.get_run_by_id("other-ingestion-run"))  # it stops mid-way
    assert runs_mid_way(instance, "this-run") == []
    result = deletion_run(ingested)
    checks = evaluations(result)
    # Nothing is mid-way now, and what the failed run left is found: its documents' forms were
    # never derived, so no fresh rebuild is equal; and its last passage has no extraction.
    assert not checks[("facts", "matches_fresh_rebuild")].passed
    accounted = passages_accounted_for(dg.build_asset_check_context(), store=ingested.resources["store"])
    assert not accounted.passed and passages[-1].doc_id in accounted.description


def _restrict(harness) -> dict[str, tuple[str, ...]]:
    """Readers for the ingested documents: public, staff, legal and nobody's in turn."""
    from tests.lightfoot_pipeline.permissions.conftest import write_readers

    store = harness.store()
    doc_ids = sorted(store.read("documents", columns=["doc_id"]).get_column("doc_id").to_list())
    cycle = [("public",), ("staff",), ("legal",), ()]
    readers = {doc: cycle[i % len(cycle)] for i, doc in enumerate(doc_ids)}
    write_readers(store, readers)
    return readers


def test_each_sampled_view_after_the_export_matches_a_fresh_store_of_its_documents(ingested):
    readers = _restrict(ingested)
    result = deletion_run(ingested)
    assert "serving_snapshot" in materialized(result)
    check = evaluations(result)[("serving_snapshot", "views_match_fresh_stores")]
    assert check.passed, check.description
    meta = check.metadata
    assert meta["principals"].value == 3 and meta["equal"].value == 3 and meta["questions"].value == 5
    assert meta["principals_from"].value == "reader groups" and meta["model_calls"].value == 0
    views = meta["views"].value
    # no group first, then each group alone, the one that reads more documents first (six: two staff, one legal)
    assert [v["principal"] for v in views] == ["public", "staff", "legal"]
    assert [v["documents"] for v in views] == [
        sum(1 for g in readers.values() if "public" in g or name in g) for name in ("public", "staff", "legal")]
    assert all(set(v) == {"principal", "groups", "documents", "equal", "documents_equal", "differing_questions",
                          "parts", "digest"} for v in views), "counts, ids and digests only"


def test_a_view_that_leaks_a_document_fails_the_permission_check_and_the_snapshot_stays_unpublished(
    ingested, monkeypatch, tmp_path, capsys
):
    from lightfoot_pipeline.evaluation import permission_audit
    from lightfoot_pipeline.permissions import views
    from lightfoot_pipeline.permissions.principals import Principal

    _restrict(ingested)
    groups = tmp_path / "groups.jsonl"
    groups.write_text('{"principal": "clerk", "groups": ["staff"]}\n')
    leaky = lambda snapshot, principal: views.reader_view(snapshot, Principal(principal.name, (*principal.groups, "legal")))  # noqa: E731
    monkeypatch.setattr(permission_audit, "reader_view", leaky)
    store = ingested.store()
    served = latest_snapshot(store)
    config = {"ops": {"serving_snapshot": {"config": {"groups_file": str(groups)}}}}
    result = deletion_run(ingested, config)
    assert not result.success, "a blocking check that fails fails the run"
    check = evaluations(result)[("serving_snapshot", "views_match_fresh_stores")]
    staged = unpublished_snapshot(store)
    assert not check.passed and staged is not None
    assert check.description == f"staged snapshot {staged.snapshot_id} not published: views differ from a fresh " \
        "store of their readable documents: clerk (5 of 5 questions; other documents)"
    assert staged.reason == f"views_match_fresh_stores failed: {check.description.split(': ', 1)[1]}"
    (view,) = check.metadata["views"].value
    assert view["principal"] == "clerk" and not view["equal"] and not view["documents_equal"]
    assert check.metadata["published"].value is False
    # Services keep the snapshot published before; the materialization names it, and the one kept back.
    assert latest_snapshot(store) == served
    (made,) = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()
               if e.asset_key.to_user_string() == "serving_snapshot"]
    assert made.metadata["published"].value is False
    assert made.metadata["snapshot_id"].value == served.snapshot_id
    assert made.metadata["staged_snapshot_id"].value == staged.snapshot_id
    assert made.metadata["not_published"].value == staged.reason
    assert made.metadata["store_commit"].value == served.store_seq
    from lightfoot_pipeline.cli import main

    capsys.readouterr()
    assert main(["status", "--store", store.uri]) == 0
    assert f"staged snapshot {staged.snapshot_id} not published: {staged.reason}" in capsys.readouterr().out
