"""The code location as Dagster loads it: names, groups, kinds, partitions, checks, automation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from assets.definitions import defs as load_defs

REPO = Path(__file__).resolve().parents[2]
PER_DOCUMENT = {"passages", "extraction_cache", "extractions", "forms"}
GRAPH = {"name_vectors", "name_links", "entities", "synonym_edges", "facts"}


@pytest.fixture(scope="module")
def defs() -> dg.Definitions:
    return load_defs()


def test_every_asset_is_a_described_noun_in_a_group_with_kinds(defs):
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    assert set(specs) == PER_DOCUMENT | GRAPH | {"serving_snapshot", "tombstones", "erasures", "source_files"}
    for name, spec in specs.items():
        assert spec.description and len(spec.description) > 30, name
        assert spec.kinds, name
    assert {specs[n].group_name for n in PER_DOCUMENT} == {"documents"}
    assert {specs[n].group_name for n in GRAPH} == {"graph"}
    assert specs["serving_snapshot"].group_name == "serving"
    assert {specs["tombstones"].group_name, specs["erasures"].group_name} == {"retention"}
    assert specs["source_files"].group_name == "sources"


def test_per_document_assets_are_partitioned_by_document_and_backfill_in_one_run(defs):
    graph = defs.resolve_asset_graph()
    for name in PER_DOCUMENT:
        node = graph.get(dg.AssetKey(name))
        assert isinstance(node.partitions_def, dg.DynamicPartitionsDefinition)
        assert node.partitions_def.name == "documents"
        assert node.backfill_policy == dg.BackfillPolicy.single_run()
    for name in GRAPH | {"serving_snapshot", "tombstones", "erasures"}:
        assert graph.get(dg.AssetKey(name)).partitions_def is None


def test_lineage_runs_from_documents_through_the_graph_to_serving(defs):
    graph = defs.resolve_asset_graph()
    parents = lambda name: {k.to_user_string() for k in graph.get(dg.AssetKey(name)).parent_keys}  # noqa: E731
    assert parents("extraction_cache") == {"passages"}
    assert parents("extractions") == {"extraction_cache"}
    assert parents("forms") == {"extractions"}
    assert parents("name_vectors") == {"forms", "tombstones"}
    assert parents("facts") == {"forms", "tombstones"}
    assert parents("serving_snapshot") == GRAPH
    assert parents("erasures") >= GRAPH


def test_checks_are_blocking_and_guard_the_serving_export(defs):
    graph = defs.resolve_asset_graph()
    checks = {(k.asset_key.to_user_string(), k.name): graph.get(k) for k in graph.asset_check_keys}
    assert ("extractions", "passages_accounted_for") in checks
    assert ("entities", "no_dangling_references") in checks
    assert {a for a, n in checks if n == "matches_fresh_rebuild"} == GRAPH
    assert all(node.blocking for node in checks.values())
    condition = graph.get(dg.AssetKey("serving_snapshot")).automation_condition
    assert "all_deps_blocking_checks_passed" in str(condition) or "blocking" in condition.get_label().lower() \
        or "blocking" in repr(condition).lower()


def test_model_calls_run_in_their_own_pool_and_commits_in_the_store_pool(defs):
    graph = defs.resolve_asset_graph()
    pools = {name: graph.get(dg.AssetKey(name)).pools for name in PER_DOCUMENT | GRAPH | {"serving_snapshot"}}
    assert pools.pop("extraction_cache") == {"lightfoot_extraction"}
    assert set(map(frozenset, pools.values())) == {frozenset({"lightfoot_store"})}


def test_jobs_sensors_and_schedules(defs):
    assert {j.name for j in defs.jobs} == {"document_ingestion", "document_deletion", "source_sync_job", "relink_graph"}
    sensors = {s.name: s for s in defs.sensors}
    assert set(sensors) == {"document_inbox", "erasure_inbox", "deleted_partitions", "lightfoot_automation",
                            "source_sync", "pool_limits"}
    assert all(s.default_status == dg.DefaultSensorStatus.RUNNING for s in sensors.values())
    assert isinstance(sensors["lightfoot_automation"], dg.AutomationConditionSensorDefinition)
    schedules = {s.name: s for s in defs.schedules}
    assert schedules["hourly_ingestion"].cron_schedule == "15 * * * *"
    assert schedules["retention_schedule"].cron_schedule == "0 3 * * *"
    ingestion = defs.resolve_job_def("document_ingestion")
    selected = {k.to_user_string() for k in ingestion.asset_layer.selected_asset_keys}
    assert selected == PER_DOCUMENT | GRAPH | {"serving_snapshot"}
    # every blocking check runs in each job that can change its answer
    assert {"matches_fresh_rebuild", "entities_no_dangling_references", "extractions_passages_accounted_for"} \
        <= set(ingestion.graph.node_dict)
    deletion = defs.resolve_job_def("document_deletion")
    selected = {k.to_user_string() for k in deletion.asset_layer.selected_asset_keys}
    assert selected == GRAPH | {"tombstones", "erasures", "serving_snapshot"}
    assert {"matches_fresh_rebuild", "entities_no_dangling_references", "extractions_passages_accounted_for"} \
        <= set(deletion.graph.node_dict)


def test_secrets_reach_the_extractor_only_as_environment_variables(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    extractor = load_defs().resources["extractor"]
    assert isinstance(extractor.api_key, dg.EnvVar) and extractor.api_key.env_var_name == "OPENAI_API_KEY"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert load_defs().resources["extractor"].api_key is None


@pytest.mark.slow
def test_dagster_definitions_validate_passes(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    done = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "All code locations passed validation" in done.stdout + done.stderr


@pytest.mark.slow
def test_the_local_instance_file_loads_with_sqlite_storage_and_one_store_writer(tmp_path):
    """dagster.yaml as Dagster loads it (the PostgreSQL one: tests/infra and test_instance_on_postgres.py)."""
    assert "storage" not in yaml.safe_load((REPO / "dagster.yaml").read_text())  # SQLite under DAGSTER_HOME
    home = tmp_path / "local"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert "Sqlite" in type(instance.run_storage).__name__
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
        instance.add_dynamic_partitions("documents", ["doc-1"])
    assert any(p.suffix == ".db" for p in home.rglob("*")), "the SQLite files live under DAGSTER_HOME"


def test_every_asset_has_a_code_version_and_every_table_its_column_schema(defs):
    from lightfoot_pipeline.store.tables import spec_for

    graph = defs.resolve_asset_graph()
    versions = {graph.get(key).code_version for key in graph.materializable_asset_keys}
    assert len(versions) == 1 and None not in versions, "one code version: the engine's and the settings'"
    for name in PER_DOCUMENT | GRAPH | {"tombstones"}:
        metadata = graph.get(dg.AssetKey(name)).metadata
        schema = metadata["dagster/column_schema"]
        assert schema.columns and all(c.type for c in schema.columns), name
    entities = graph.get(dg.AssetKey("entities")).metadata
    assert [c.name for c in entities["column_schema/mentions"].columns] == spec_for("mentions").columns
