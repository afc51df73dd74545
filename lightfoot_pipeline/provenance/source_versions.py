"""The code version of a function: a digest of the source it reaches.

:meth:`SourceIndex.digest` is a SHA-256 over the source of a function (its decorator included),
of every function, class and module-level assignment of the same module it names (followed
through the names those name in turn), and of the whole source of every module of the indexed
packages that those name, and of every such module that those import, anywhere in them (an
import inside a function included): the static import closure. A name imported from a package
that re-exports it is followed to the module that defines it, so a package's re-exports do not
pull in all of it. Everything is read from the source files with ``ast``, in a fixed order, never
from objects in memory: the same files give the same versions in every process. A module counts
whole (comments and docstrings too): it errs towards a new version. Missed: code reached other
than by an import statement (``importlib`` by a string), third-party libraries and data files.

What is derived can so say which code derived it: the Dagster layer gives each asset the version
of the function that computes it (assets/code_versions.py), so that the UI marks it stale when
that code changes, and only it.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

DIGEST_CHARS = 16


@dataclass
class _Module:
    name: str
    path: Path
    is_package: bool
    source: str
    tree: ast.Module
    top: dict[str, ast.stmt] = field(default_factory=dict)  # top-level definitions and assignments by name
    imported: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local name: (module, name or None)


class SourceIndex:
    """The source of the packages under ``roots`` (package name: the folder that holds it),
    read once per module."""

    def __init__(self, roots: Mapping[str, Path]) -> None:
        self.roots = dict(roots)
        self._modules: dict[str, _Module | None] = {}
        self._imported: dict[str, frozenset[str]] = {}

    def module(self, name: str) -> _Module | None:
        """The module ``name`` when it is one of the roots' modules, else None."""
        if name not in self._modules:
            self._modules[name] = self._read(name)
        return self._modules[name]

    def _read(self, name: str) -> _Module | None:
        parts = name.split(".")
        root = self.roots.get(parts[0])
        if root is None:
            return None
        base = root.joinpath(*parts)
        for path, is_package in ((base / "__init__.py", True), (base.with_suffix(".py"), False)):
            if path.is_file():
                source = path.read_text(encoding="utf-8")
                tree = ast.parse(source, filename=str(path))
                module = _Module(name, path, is_package, source, tree)
                for stmt in tree.body:
                    for local in _bound_names(stmt):
                        module.top.setdefault(local, stmt)
                    for local, target in _imports(stmt, module):
                        module.imported[local] = target
                return module
        return None

    def defining_module(self, module: str, name: str, seen: frozenset[str] = frozenset()) -> str | None:
        """The module that ``name`` of ``module`` comes from: a submodule of that name, the module
        a re-export imports it from (followed), or ``module`` itself; None outside the roots."""
        if self.module(f"{module}.{name}") is not None:
            return f"{module}.{name}"
        found = self.module(module)
        if found is None or module in seen:
            return None if found is None else module
        target = found.imported.get(name)
        if target is not None and name not in _defined_here(found):
            source, original = target
            if original is None:
                return source if self.module(source) is not None else module
            return self.defining_module(source, original, seen | {module}) or module
        return module

    def import_closure(self, modules: Iterable[str]) -> set[str]:
        """The modules, and every root module that they import anywhere in them, transitively."""
        out: set[str] = set()
        todo = [m for m in modules if self.module(m) is not None]
        while todo:
            name = todo.pop()
            if name in out:
                continue
            out.add(name)
            todo.extend(target for target in self.imported_modules(name) if target not in out)
        return out

    def imported_modules(self, name: str) -> frozenset[str]:
        """The root modules that module ``name`` imports anywhere in it (an import inside a function
        included), each followed to the module that defines the name; walked once per module."""
        if name not in self._imported:
            module = self.module(name)
            assert module is not None
            targets = set()
            for node in ast.walk(module.tree):
                for _, (source, original) in _imports(node, module):
                    target = source if original is None else self.defining_module(source, original)
                    if target is not None and self.module(target) is not None:
                        targets.add(target)
            self._imported[name] = frozenset(targets)
        return self._imported[name]

    def function_sources(self, module_name: str, function: str) -> tuple[dict[str, str], set[str]]:
        """The source of ``function`` of ``module_name`` and of the same module's definitions it
        names (transitively), by ``module:name``; and the other root modules that they name."""
        module = self.module(module_name)
        if module is None or not isinstance(module.top.get(function), ast.FunctionDef | ast.AsyncFunctionDef
                                                                        | ast.ClassDef):
            raise LookupError(f"{module_name} has no function or class {function!r} at its top level")
        sources: dict[str, str] = {}
        reached: set[str] = set()
        todo = [function]
        while todo:
            local = todo.pop()
            stmt = module.top.get(local)
            label = f"{module_name}:{local}"
            if stmt is None or label in sources:
                continue
            sources[label] = ast.get_source_segment(module.source, stmt) or ast.dump(stmt)
            nodes = list(ast.walk(stmt))
            through: set[int] = set()  # names whose attribute was followed to the module defining it
            for node in nodes:
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                    package = self._module_named(module, node.value.id)
                    if package is not None:
                        reached.add(self.defining_module(package, node.attr) or package)
                        through.add(id(node.value))
            for node in nodes:
                for _, (source, original) in _imports(node, module):  # imports inside the function
                    target = source if original is None else self.defining_module(source, original)
                    if target is not None:
                        reached.add(target)
                if not isinstance(node, ast.Name) or id(node) in through:
                    continue
                if node.id in module.imported and node.id not in _defined_here(module):
                    source, original = module.imported[node.id]
                    target = source if original is None else self.defining_module(source, original)
                    if target is not None and self.module(target) is not None:
                        reached.add(target)
                elif node.id in module.top:
                    todo.append(node.id)
        reached.discard(module_name)
        return sources, reached

    def _module_named(self, module: _Module, local: str) -> str | None:
        """The root module that the name ``local`` of ``module`` is bound to by an import, if any."""
        target = module.imported.get(local)
        if target is None or local in _defined_here(module):
            return None
        source, original = target
        name = source if original is None else f"{source}.{original}"
        return name if self.module(name) is not None else None

    def digest(self, module_name: str, function: str, extra: object = None) -> str:
        """The code version of ``function`` of ``module_name`` (see the module docstring)."""
        sources, reached = self.function_sources(module_name, function)
        closure = self.import_closure(reached) - {module_name}
        h = hashlib.sha256()
        for label in sorted(sources):
            h.update(f"{label}\0{sources[label]}\0".encode())
        for name in sorted(closure):
            module = self.module(name)
            assert module is not None
            h.update(f"{name}\0{module.source}\0".encode())
        h.update(json.dumps(extra, sort_keys=True, default=str).encode())
        return h.hexdigest()[:DIGEST_CHARS]

    def reached_modules(self, module_name: str, function: str) -> set[str]:
        """The root modules whose whole source counts in the function's version."""
        return self.import_closure(self.function_sources(module_name, function)[1]) - {module_name}


def _bound_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(stmt, ast.AnnAssign | ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def _defined_here(module: _Module) -> set[str]:
    return {name for name, stmt in module.top.items() if not isinstance(stmt, ast.Import | ast.ImportFrom)}


def _imports(node: ast.AST, module: _Module) -> list[tuple[str, tuple[str, str | None]]]:
    """(local name, (module, imported name or None for a module)) for an import statement."""
    if isinstance(node, ast.Import):
        out = []
        for alias in node.names:
            if alias.asname:
                out.append((alias.asname, (alias.name, None)))
            else:
                out.append((alias.name.split(".")[0], (alias.name, None)))
        return out
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = module.name.split(".")
            package = parts if module.is_package else parts[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, *([node.module] if node.module else [])])
        return [(alias.asname or alias.name, (base, alias.name)) for alias in node.names if alias.name != "*"]
    return []
