"""No module imports another module's private names; a collaborator gets a public name instead.

Attribute access to another object's private members (``store._options()``) is ruff's SLF001,
run by scripts/test.sh; this test covers ``from module import _name``, which ruff lets pass within
one top-level package.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECKED = ("lightfoot_pipeline", "assets", "benchmarks", "scripts")


def private_imports(source: str) -> list[str]:
    """``line: from module import _name`` for each private name the source imports."""
    return [f"{node.lineno}: from {node.module} import {alias.name}"
            for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)
            for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]


def test_no_module_imports_another_modules_private_names():
    found = [f"{path.relative_to(REPO)}:{line}" for root in CHECKED for path in sorted((REPO / root).rglob("*.py"))
             if "__pycache__" not in path.parts for line in private_imports(path.read_text(encoding="utf-8"))]
    assert not found, "private names imported across modules:\n" + "\n".join(found)


def test_the_check_sees_a_private_import_and_lets_dunders_pass():
    source = "from lightfoot_pipeline.store.store import Store, _lock\nfrom x import __version__\n"
    assert private_imports(source) == ["1: from lightfoot_pipeline.store.store import _lock"]
