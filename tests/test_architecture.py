"""docs/architecture.md describes the code as it is: every package, every layer, every table."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
PROSE = re.sub(r"^```.*?^```", "", DOC, flags=re.M | re.S)  # without its fenced blocks
CODE_SPANS = set(re.findall(r"`([^`\n]+)`", PROSE))


def packages(root: str) -> list[str]:
    """Every package under ``root``, as its path below the engine or the Dagster layer."""
    base = REPO / root
    return sorted(str(p.parent.relative_to(base)) for p in base.rglob("__init__.py")
                  if p.parent != base and "__pycache__" not in p.parts)


def named(path: str, root: str) -> bool:
    """A package is described when the page names it as ``path/`` or with its root."""
    return bool({f"{path}/", f"{root}/{path}/", f"{root}/{path}"} & CODE_SPANS)


def test_every_engine_package_is_described():
    missing = [p for p in packages("lightfoot_pipeline") if not named(p, "lightfoot_pipeline")]
    assert not missing, f"docs/architecture.md does not describe these packages: {missing}"


def test_every_dagster_module_is_described():
    modules = sorted(str(p.relative_to(REPO)) for p in (REPO / "assets").rglob("*.py")
                     if p.name != "__init__.py" and "__pycache__" not in p.parts)
    missing = [m for m in modules if m not in CODE_SPANS]
    assert not missing, f"docs/architecture.md does not describe these Dagster modules: {missing}"


def test_every_layer_of_the_contract_is_in_the_layers_table():
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    layers = [name.strip() for line in contract["layers"] for name in line.split("|")]
    table = DOC.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `([^`]+?)/?(?:\.py)?` \|", table, flags=re.M))
    assert set(layers) <= rows, f"layers missing from the table: {sorted(set(layers) - rows)}"
    # and in the contract's order, top to bottom
    assert [r for r in re.findall(r"^\| `([^`]+?)/?(?:\.py)?` \|", table, flags=re.M) if r in layers] == layers


def test_every_table_of_the_registry_is_in_the_tables_table():
    from lightfoot_pipeline.store.tables import all_specs

    table = DOC.split("## The store's tables", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M))
    names = {spec.name for spec in all_specs()}
    assert names == rows, f"not described: {sorted(names - rows)}; described but not a table: {sorted(rows - names)}"


def test_every_test_file_the_invariants_name_exists():
    table = DOC.split("## Invariants and the tests that guard them", 1)[1]
    for path in re.findall(r"`(tests/[^`:]+\.py)", table):
        assert (REPO / path).is_file(), f"docs/architecture.md names {path}, which does not exist"
    for path, name in re.findall(r"`(tests/[^`:]+\.py)::([a-z_0-9]+)`", table):
        assert f"def {name}(" in (REPO / path).read_text(encoding="utf-8"), f"{path} has no test {name}"
    for name in re.findall(r"`(test_[a-z_]+\.py)::([a-z_0-9]+)`", table):
        found = list(REPO.glob(f"tests/**/{name[0]}"))
        assert found and any(f"def {name[1]}(" in p.read_text(encoding="utf-8") for p in found), name
