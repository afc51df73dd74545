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

REPO = Path(__file__).resolve().parents[2]
PER_BATCH = {"passages", "extraction_cache", "extractions", "forms"}
GRAPH = {"name_vectors", "name_links", "entities", "synonym_edges", "facts"}


@pytest.fixture(scope="module")
def defs(shipped_defs) -> dg.Definitions:
    return shipped_defs


def test_every_asset_is_a_described_noun_in_a_group_with_kinds(defs):
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    assert set(specs) == PER_BATCH | GRAPH | {"serving_snapshot", "tombstones", "erasures", "source_files", "store_log",
                                              "extraction_batches"}
    for name, spec in specs.items():
        assert spec.description and len(spec.description) > 30, name
        assert spec.kinds, name
    assert {specs[n].group_name for n in PER_BATCH} == {"batches"}
    assert {specs[n].group_name for n in GRAPH} == {"graph"}
    assert specs["serving_snapshot"].group_name == "serving"
    assert {specs["tombstones"].group_name, specs["erasures"].group_name} == {"retention"}
    assert specs["source_files"].group_name == "sources"
    assert specs["store_log"].group_name == "sources"
    assert specs["extraction_batches"].group_name == "extraction_batches"


def test_per_batch_assets_are_partitioned_by_batch_and_nothing_else_is(defs):
    graph = defs.resolve_asset_graph()
    for name in PER_BATCH:
        node = graph.get(dg.AssetKey(name))
        assert isinstance(node.partitions_def, dg.DynamicPartitionsDefinition), name
        assert node.partitions_def.name == "batches", name
    # source_files is a sync run's, each naming its batch: partitioned by batch, it showed as
    # missing on every drop's partition (issue 35). tombstones is the deletion log, each
    # materialization naming its deletion run: partitioned by deletion run, it showed "All" in
    # every status column (the UI's count for a partition set with no partition yet).
    for name in GRAPH | {"serving_snapshot", "erasures", "source_files", "tombstones"}:
        assert graph.get(dg.AssetKey(name)).partitions_def is None, name
    for job in ("ingestion_job", "sync_job"):
        assert defs.resolve_job_def(job).partitions_def.name == "batches", job
    assert defs.resolve_job_def("deletion_job").partitions_def is None
    assert {p.name for p in graph.all_partitions_defs if hasattr(p, "name")} == {"batches"}


def test_lineage_runs_from_documents_through_the_graph_to_serving(defs):
    graph = defs.resolve_asset_graph()
    parents = lambda name: {k.to_user_string() for k in graph.get(dg.AssetKey(name)).parent_keys}  # noqa: E731
    assert parents("passages") == {"source_files"}
    assert parents("extraction_cache") == {"passages"}
    assert parents("extractions") == {"extraction_cache"}
    assert parents("forms") == {"extractions"}
    assert parents("name_vectors") == {"forms", "tombstones", "store_log"}
    assert parents("facts") == {"forms", "tombstones", "store_log"}
    assert all("store_log" in parents(name) for name in GRAPH)  # a write outside Dagster makes each stale
    # extraction_batches orders a collection run's export after it; automation ignores it (test below)
    assert parents("serving_snapshot") == GRAPH | {"store_log", "extraction_batches"}
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
    pools = {name: graph.get(dg.AssetKey(name)).pools for name in PER_BATCH | GRAPH | {"serving_snapshot"}}
    assert pools.pop("extraction_cache") == {"lightfoot_extraction"}
    assert set(map(frozenset, pools.values())) == {frozenset({"lightfoot_store"})}


def test_jobs_sensors_and_schedules(defs):
    assert {j.name for j in defs.jobs} == {"ingestion_job", "deletion_job", "sync_job", "relink_job",
                                           "extraction_batches_job"}
    sensors = {s.name: s for s in defs.sensors}
    assert set(sensors) == {"inbox_sensor", "erasure_sensor", "outside_deletions_sensor", "automation_sensor",
                            "sync_sensor", "pool_limits_sensor", "store_log_sensor", "extraction_batches_sensor"}
    assert all(s.default_status == dg.DefaultSensorStatus.RUNNING for s in sensors.values())
    assert isinstance(sensors["automation_sensor"], dg.AutomationConditionSensorDefinition)
    schedules = {s.name: s for s in defs.schedules}
    assert schedules["ingestion_schedule"].cron_schedule == "15 * * * *"
    assert schedules["retention_schedule"].cron_schedule == "0 3 * * *"
    ingestion = defs.resolve_job_def("ingestion_job")
    selected = {k.to_user_string() for k in ingestion.asset_layer.selected_asset_keys}
    assert selected == PER_BATCH | GRAPH | {"serving_snapshot"}
    # every blocking check runs in each job that can change its answer
    assert {"matches_fresh_rebuild", "entities_no_dangling_references", "extractions_passages_accounted_for"} \
        <= set(ingestion.graph.node_dict)
    deletion = defs.resolve_job_def("deletion_job")
    selected = {k.to_user_string() for k in deletion.asset_layer.selected_asset_keys}
    assert selected == GRAPH | {"tombstones", "erasures", "serving_snapshot"}
    # a deletion adds no passage, so it runs the graph's checks, not passages_accounted_for
    assert {"matches_fresh_rebuild", "entities_no_dangling_references"} <= set(deletion.graph.node_dict)
    assert "extractions_passages_accounted_for" not in set(deletion.graph.node_dict)
    sync = defs.resolve_job_def("sync_job")
    selected = {k.to_user_string() for k in sync.asset_layer.selected_asset_keys}
    assert selected == {"source_files"} | PER_BATCH | GRAPH | {"serving_snapshot", "erasures"}  # sync_erase
    assert {"matches_fresh_rebuild", "entities_no_dangling_references", "extractions_passages_accounted_for"} \
        <= set(sync.graph.node_dict)


def test_each_definition_says_what_it_is_and_its_module_binds_it_under_that_name(defs):
    """Jobs end in _job, sensors in _sensor, schedules in _schedule, and the graph multi-asset's
    step is named for its engine call: a name in the UI is the name of the code that defines it."""
    import importlib
    import pkgutil

    import assets.defs

    modules = [importlib.import_module(f"assets.defs.{m.name}") for m in pkgutil.iter_modules(assets.defs.__path__)]
    bound = {name: value for module in modules for name, value in vars(module).items()}
    kinds = {"_job": defs.jobs, "_sensor": defs.sensors, "_schedule": defs.schedules}
    for suffix, definitions in kinds.items():
        for definition in definitions:
            assert definition.name.endswith(suffix), definition.name
            assert getattr(bound.get(definition.name), "name", None) == definition.name, definition.name
    graph = defs.resolve_asset_graph()
    assert {graph.get(dg.AssetKey(n)).assets_def.node_def.name for n in GRAPH} == {"reconcile_graph"}
    assert bound["reconcile_graph"].node_def.name == "reconcile_graph"


def test_secrets_reach_the_extractor_only_as_environment_variables(monkeypatch):
    from assets.defs.resources import resources  # the resources' definitions alone: the rest loads once a session

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    extractor = resources().resources["extractor"]
    assert isinstance(extractor.api_key, dg.EnvVar) and extractor.api_key.env_var_name == "OPENAI_API_KEY"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert resources().resources["extractor"].api_key is None


@pytest.mark.slow
@pytest.mark.dagster
def test_dg_check_defs_passes_and_prints_no_warning(tmp_path):
    """``dg check defs`` (what README says to run; ``dagster definitions validate`` is superseded by
    it) loads the code location without a warning of any kind: no supersession, deprecation or
    preview warning from a definition, no complaint about the project's configuration."""
    venv = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "PYTHONWARNINGS")}
    env.update(VIRTUAL_ENV=str(venv.parent), PYTHONWARNINGS="default")  # every warning printed, once each
    done = subprocess.run([str(venv / "dg"), "check", "defs"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    assert "All definitions loaded successfully" in said
    assert "warning" not in said.lower(), said[-3000:]


@pytest.mark.slow
def test_the_local_instance_file_loads_with_sqlite_storage_and_one_store_writer(tmp_path):
    """dagster.yaml as Dagster loads it (the PostgreSQL one: tests/infra and test_instance_on_postgres.py)."""
    assert "storage" not in yaml.safe_load((REPO / "dagster.yaml").read_text())  # SQLite under DAGSTER_HOME
    home = tmp_path / "local"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PooledSqliteRunStorage"  # assets/pooled_sqlite.py
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
        instance.add_dynamic_partitions("batches", ["drop-1"])
    assert any(p.suffix == ".db" for p in home.rglob("*")), "the SQLite files live under DAGSTER_HOME"


def test_every_table_declares_its_name_schema_and_description_at_table_level(defs):
    from lightfoot_pipeline.store.tables import spec_for

    graph = defs.resolve_asset_graph()
    own = {"passages": "passages", "extraction_cache": "extraction_cache", "extractions": "extractions",
           "forms": "forms", "name_links": "name_links", "entities": "entities", "synonym_edges": "synonym_edges",
           "facts": "facts", "tombstones": "tombstones", "source_files": "source_files"}
    for name, table in own.items():
        metadata = graph.get(dg.AssetKey(name)).metadata
        spec = spec_for(table)
        assert metadata["dagster/table_name"] == f"lightfoot.{table}", name
        assert [c.name for c in metadata["dagster/column_schema"].columns] == spec.columns, name
        assert all(c.type for c in metadata["dagster/column_schema"].columns), name
        assert metadata["dagster/storage_kind"] == "deltalake", name
        assert spec.description and metadata["table_description"].value == spec.description, name
        further = [k.split("/", 1)[1] for k in metadata if k.startswith("column_schema/")]
        assert {k.split("/", 1)[1] for k in metadata if k.startswith("table_description/")} == set(further), name
        for other in further:
            assert metadata[f"table_description/{other}"].value == spec_for(other).description, (name, other)
        schemas = [metadata["dagster/column_schema"], *(metadata[f"column_schema/{t}"] for t in further)]
        assert all(c.description is None for s in schemas for c in s.columns), f"{name}: a column holds a description"
    entities = graph.get(dg.AssetKey("entities")).metadata
    assert [c.name for c in entities["column_schema/mentions"].columns] == spec_for("mentions").columns
    assert {"column_schema/aliases", "table_description/aliases"} <= set(entities)


def test_name_vectors_declares_the_lancedb_vector_cache_not_a_delta_table(defs):
    from lightfoot_pipeline.models.embedder import HashingEmbedder
    from lightfoot_pipeline.store.store import Store
    from lightfoot_pipeline.store.vectors import VECTOR_CACHE_COLUMNS, name_vector_cache

    metadata = defs.resolve_asset_graph().get(dg.AssetKey("name_vectors")).metadata
    assert metadata["dagster/storage_kind"] == "lancedb"
    assert "dagster/table_name" not in metadata  # one table per model: each materialization names it
    assert not any(k.startswith("column_schema/") for k in metadata), "the aliases table is the entities' to declare"
    columns = metadata["dagster/column_schema"].columns
    assert [c.name for c in columns] == list(VECTOR_CACHE_COLUMNS) and all(c.description for c in columns)
    assert "LanceDB" in metadata["table_description"].value
    cache = name_vector_cache(Store("/nowhere"), HashingEmbedder(32))
    assert cache._schema.names == list(VECTOR_CACHE_COLUMNS)  # the declared columns are the cache's


def test_every_asset_has_owners_and_a_code_version_of_its_own(defs):
    graph = defs.resolve_asset_graph()
    keys = graph.materializable_asset_keys
    for key in keys:
        assert graph.get(key).owners == ["team:lightfoot"], key
    versions = {key.to_user_string(): graph.get(key).code_version for key in keys}
    assert None not in versions.values()
    assert len({versions[n] for n in GRAPH}) == 1, "the graph's five assets are one computation"
    by_function = {n: v for n, v in versions.items() if n not in GRAPH} | {"reconcile_graph": versions["name_vectors"]}
    assert len(set(by_function.values())) == len(by_function), by_function


def test_code_versions_follow_the_source_an_asset_reaches(tmp_path):
    """A digest of the asset function, its module's helpers and the engine modules it reaches
    (by import, a package's re-exports followed); nothing else counts."""
    from assets.code_versions import SourceIndex

    files = {
        "engine/__init__.py": "from engine.sub import helper\n",
        "engine/sub.py": "def helper():\n    from engine.deep import value\n    return value()\n",
        "engine/deep.py": "def value():\n    return 1\n",
        "engine/other.py": "def unrelated():\n    return 2\n",
        "layer/__init__.py": "",
        "layer/defs.py": (
            "import engine\nfrom engine import helper\n\nLIMIT = 3\n\n\n"
            "def _local():\n    return helper() + LIMIT\n\n\n"
            "def one():\n    return _local()\n\n\n"
            "def two():\n    return engine.other.unrelated()\n"
        ),
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    def versions() -> tuple[str, str]:
        index = SourceIndex({"engine": tmp_path, "layer": tmp_path})
        return index.digest("layer.defs", "one"), index.digest("layer.defs", "two")

    def edit(name: str, old: str, new: str) -> None:
        path = tmp_path / name
        path.write_text(path.read_text().replace(old, new))

    index = SourceIndex({"engine": tmp_path, "layer": tmp_path})
    assert index.reached_modules("layer.defs", "one") == {"engine.sub", "engine.deep"}
    assert index.reached_modules("layer.defs", "two") == {"engine.other"}
    assert SourceIndex({"engine": tmp_path, "layer": tmp_path}).digest("layer.defs", "one", {"settings": 1}) \
        != SourceIndex({"engine": tmp_path, "layer": tmp_path}).digest("layer.defs", "one", {"settings": 2})
    first = versions()
    assert first == versions() and first[0] != first[1]  # deterministic, and per function
    steps = [
        ("engine/deep.py", "return 1", "return 10", (True, False)),  # imported inside a function of sub.py
        ("engine/other.py", "return 2", "return 20", (False, True)),
        ("engine/sub.py", "return value()", "return value() + 1", (True, False)),
        ("layer/defs.py", "LIMIT = 3", "LIMIT = 4", (True, False)),  # a module-level value that one's helper reads
        ("layer/defs.py", "return engine.other.unrelated()", "return -engine.other.unrelated()", (False, True)),
    ]
    for name, old, new, changed in steps:
        before = versions()
        edit(name, old, new)
        after = versions()
        assert (before[0] != after[0], before[1] != after[1]) == changed, name


def test_every_sensor_schedule_and_job_says_what_it_does(defs):
    for definition in [*defs.sensors, *defs.schedules, *defs.jobs]:
        assert definition.description and len(definition.description) > 30, definition.name


@pytest.mark.dagster
def test_a_run_carries_its_model_calls_tokens_and_cost_as_tags(lightfoot, twenty, chat_server):
    """What a run paid for model calls is on its run page (its tags), equal to what its extraction
    step reports; and name_vectors reports the LanceDB vector cache as its table."""
    import json

    from assets.resources import ExtractorResource

    answer = {"entities": [{"name": "Oslo", "type": "location", "description": "a city"}], "facts": []}
    chat_server.queue(chat_server.Reply(content=json.dumps(answer), usage=(500, 50)))
    lightfoot.resources["extractor"] = ExtractorResource(mode="openai", base_url=chat_server.base_url,
                                                         model="test-model", api_key="sk-test")
    lightfoot.defs = dg.Definitions(
        assets=lightfoot.defs.assets, asset_checks=lightfoot.defs.asset_checks, jobs=lightfoot.defs.jobs,
        sensors=lightfoot.defs.sensors, schedules=lightfoot.defs.schedules, resources=lightfoot.resources,
    )
    lightfoot.drop_documents("one", twenty[:1], {})
    result = lightfoot.run(lightfoot.tick("inbox_sensor").run_requests[0])
    assert result.success
    tags = lightfoot.instance.get_run_by_id(result.run_id).tags
    (step,) = [m.metadata for m in result.asset_materializations_for_node("extraction_cache")]  # one per batch
    calls = chat_server.count
    assert calls >= 1
    assert tags["lightfoot/model_calls"] == str(calls) == str(step["model_calls"].value)
    assert tags["lightfoot/tokens_in"] == str(500 * calls) == str(step["tokens_in"].value)
    assert tags["lightfoot/tokens_out"] == str(50 * calls) == str(step["tokens_out"].value)
    assert float(tags["lightfoot/cost_usd"]) == pytest.approx(step["cost_usd"].value, abs=1e-6)
    assert tags["lightfoot/cost_of_run"] == result.run_id
    # A re-execution inherits its parent's tags: it counts its own calls, not its parent's again.
    again = lightfoot.run(dg.RunRequest(tags={**tags, "dagster/parent_run_id": result.run_id}),
                          job_name="ingestion_job")
    assert again.success
    retagged = lightfoot.instance.get_run_by_id(again.run_id).tags
    assert (retagged["lightfoot/model_calls"], retagged["lightfoot/cost_of_run"]) == ("0", again.run_id)

    vectors = next(m for m in result.asset_materializations_for_node("reconcile_graph")
                   if m.asset_key == dg.AssetKey("name_vectors")).metadata
    uri = Path(vectors["dagster/uri"].value)
    assert uri.parent == Path(lightfoot.store_uri) / "vectors" and uri.name.startswith("name__hashing")
    assert uri.suffix == ".lance" and uri.is_dir()  # the LanceDB table the names' vectors are in
    assert vectors["dagster/table_name"].value == f"lightfoot.vectors.{uri.stem}"


ASSETS_ROOT = REPO / "assets"


def test_the_dagster_layer_calls_operations_and_opens_no_transaction():
    """Issue 35: each stage is one function of lightfoot_pipeline/operations/ that the command line
    calls too; an asset adds partitions, metadata, checks and automation. lint-imports keeps
    assets/ from importing the tables, transactions and index stages (pyproject.toml); this keeps
    it from opening a transaction on a store it was handed."""
    sources = {p.relative_to(ASSETS_ROOT).as_posix(): p.read_text(encoding="utf-8") for p in ASSETS_ROOT.rglob("*.py")}
    assert [name for name, text in sources.items() if ".transaction(" in text] == []
    assert [name for name, text in sources.items() if "store.tables" in text] == []


def test_the_per_batch_assets_speak_of_batches(defs):
    """Issue 35: the per-batch group was still named ``documents`` and its descriptions said "of a
    document"; the architecture page still said per-document partitions."""
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    for name in PER_BATCH:
        assert "of a document" not in specs[name].description, name
        assert "batch" in specs[name].description, name
    page = (ASSETS_ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    dagster = page[page.index("## The Dagster layer"):page.index("## Invariants")]
    assert "partitioned by document" not in dagster and "per doc id" not in dagster
    assert "a partition per ingestion batch" in dagster
