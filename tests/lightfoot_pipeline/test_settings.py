"""Settings read in one place: every environment variable is read in settings/environment.py and listed once in
the README."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from lightfoot_pipeline import settings
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.settings import SettingsError, environment

ROOT = Path(__file__).parents[2]
ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \| (.+?) \| (.+?) \|$")


def readme_settings_table() -> list[tuple[str, str, str]]:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    return [match.groups() for line in section.splitlines() if (match := ROW.match(line))]


def environment_reads(path: Path) -> list[int]:
    """Lines of a module that read or write the process environment (os.environ, os.getenv, os.putenv)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv", "putenv", "unsetenv"}:
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            lines += [node.lineno for alias in node.names if alias.name in {"environ", "getenv", "putenv"}]
    return lines


def test_the_readme_lists_every_variable_once_with_its_default_and_meaning():
    rows = readme_settings_table()
    names = [name for name, _, _ in rows]
    assert len(names) == len(set(names)), "a variable is listed twice"
    assert set(settings.VARIABLES) <= set(names), set(settings.VARIABLES) - set(names)
    # The rest are read by Dagster's instance configuration, not by Lightfoot.
    assert all(name.startswith("DAGSTER_") for name in set(names) - set(settings.VARIABLES))
    assert all(default.strip() and meaning.strip() for _, default, meaning in rows)
    assert len(settings.VARIABLES) == len(set(settings.VARIABLES))


def test_only_the_environment_module_of_settings_reads_the_environment():
    modules = [*(ROOT / "lightfoot_pipeline").rglob("*.py"), *(ROOT / "assets").rglob("*.py")]
    readers = {str(p.relative_to(ROOT)): lines for p in modules if (lines := environment_reads(p))}
    assert set(readers) == {"lightfoot_pipeline/settings/environment.py"}, readers


def test_a_variable_not_declared_is_not_read():
    with pytest.raises(KeyError, match="NOT_A_LIGHTFOOT_VARIABLE"):
        environment._read("NOT_A_LIGHTFOOT_VARIABLE", {})


def test_model_settings_take_the_lightfoot_name_first_and_skip_blanks():
    env = {"LIGHTFOOT_LLM_BASE_URL": "  ", "OPENAI_BASE_URL": " http://127.0.0.1:9/v1 ",
           "LIGHTFOOT_LLM_API_KEY": "sk-lightfoot", "OPENAI_API_KEY": "sk-openai", "OPENAI_MODEL": "fallback",
           "LIGHTFOOT_LLM_MAX_RETRIES": "2", "LIGHTFOOT_LLM_TEMPERATURE": "0.5"}
    values = settings.llm_environment(env)
    assert values == {"base_url": "http://127.0.0.1:9/v1", "api_key": "sk-lightfoot", "model": "fallback",
                      "max_retries": 2, "temperature": 0.5}
    assert LLMSettings.from_env(env, model="chosen").model == "chosen"
    assert settings.llm_environment({}) == {}


@pytest.mark.parametrize("name, value, what", [
    ("LIGHTFOOT_LLM_CONCURRENCY", "8.5", "a whole number"),
    ("LIGHTFOOT_LLM_TIMEOUT_S", "soon", "a number"),
])
def test_a_value_that_is_not_a_number_names_its_variable(name, value, what):
    with pytest.raises(SettingsError) as raised:
        settings.llm_environment({name: value})
    assert str(raised.value) == f"{name}={value!r} is not {what}"
    assert raised.value.line().endswith(f"set {name} to {what}, or unset it for the default")
    assert isinstance(raised.value, ValueError)  # callers that catch ValueError still do


def test_serve_answers_is_a_flag(monkeypatch):
    monkeypatch.delenv("LIGHTFOOT_SERVE_ANSWERS", raising=False)
    assert settings.serve_answers() is False
    for value, expected in (("1", True), (" Yes ", True), ("on", True), ("0", False), ("off", False), ("", False)):
        monkeypatch.setenv("LIGHTFOOT_SERVE_ANSWERS", value)
        assert settings.serve_answers() is expected
    monkeypatch.setenv("LIGHTFOOT_SERVE_ANSWERS", "maybe")
    with pytest.raises(SettingsError, match="LIGHTFOOT_SERVE_ANSWERS='maybe'"):
        settings.serve_answers()


def test_serve_budget(monkeypatch):
    monkeypatch.delenv("LIGHTFOOT_SERVE_ANSWER_BUDGET_USD", raising=False)
    assert settings.serve_answer_budget_usd() is None
    monkeypatch.setenv("LIGHTFOOT_SERVE_ANSWER_BUDGET_USD", "0")
    assert settings.serve_answer_budget_usd() == 0.0  # a budget of nothing, not the default


def test_object_store_options_are_the_aws_variables_that_are_set(monkeypatch):
    for name in settings.OBJECT_STORE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "")
    assert settings.object_store_options() == {"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}


def test_a_remote_store_takes_the_aws_variables_and_a_local_one_does_not(monkeypatch, tmp_path):
    from lightfoot_pipeline.store.store import Store

    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert Store("s3://bucket/prefix").storage_options["AWS_REGION"] == "eu-west-1"
    assert Store(str(tmp_path / "s")).storage_options == {}


def test_specs_take_the_argument_then_the_environment(monkeypatch):
    monkeypatch.setenv("LIGHTFOOT_EMBEDDER", "hashing:8")
    monkeypatch.setenv("LIGHTFOOT_RERANKER", "none")
    assert settings.embedder_spec(None) == "hashing:8" and settings.embedder_spec("hashing:16") == "hashing:16"
    assert settings.reranker_spec(None) == "none" and settings.reranker_spec("other") == "other"
    from lightfoot_pipeline.models.embedder import load_embedder

    assert load_embedder(None).model_id == "hashing-3gram-8d"
    monkeypatch.delenv("LIGHTFOOT_EMBEDDER")
    monkeypatch.delenv("LIGHTFOOT_RERANKER")
    assert settings.embedder_spec(None) is None and settings.reranker_spec(None) is None


def test_the_store_root_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LIGHTFOOT_STORE", "s3://bucket/prefix/")
    assert settings.resolve_store_uri() == "s3://bucket/prefix"
    monkeypatch.delenv("LIGHTFOOT_STORE")
    monkeypatch.chdir(tmp_path)
    assert settings.resolve_store_uri() == str(tmp_path / ".lightfoot" / "store")


def test_the_model_hub_stays_offline_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    settings.keep_model_hub_offline()
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "0"


def test_the_piece_and_batch_sizes_refuse_what_they_cannot_use(monkeypatch):
    from lightfoot_pipeline import settings

    assert (settings.deletion_piece(), settings.relink_batch()) == (settings.DELETION_PIECE, settings.RELINK_BATCH)
    for name, read, bad in ((settings.DELETION_PIECE_ENV, settings.deletion_piece, "0"),
                            (settings.RELINK_BATCH_ENV, settings.relink_batch, "-1"),
                            (settings.LINK_PIECE_SIZE_ENV, settings.link_piece_size, "0")):
        monkeypatch.setenv(name, bad)
        with pytest.raises(settings.SettingsError, match=f"{name}={bad}") as refused:
            read()
        assert "or unset it" in refused.value.line()
        monkeypatch.setenv(name, "many")
        with pytest.raises(settings.SettingsError):
            read()
    monkeypatch.setenv(settings.RELINK_BATCH_ENV, "0")  # none: the whole graph in one transaction
    assert settings.relink_batch() == 0
