"""Lightfoot: a GraphRAG index with exact, model-free document deletion.

This package is the engine: pure functions over Arrow/Polars tables and the store they live in.
It imports nothing from the orchestrator; the Dagster layer (the top-level ``assets`` package)
calls into here. Its sub-packages are layers, ordered by the import contract in pyproject.toml.

The names below are the engine's entry points (with ``operations``, the sub-package of what moves
a store from one state to the next: ingest, delete, erase, rebuild); each loads its module when
first used, so that importing any one module of the engine does not import all of it.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "LightfootError": "lightfoot_pipeline.errors",
    "Store": "lightfoot_pipeline.store",
    "export_snapshot": "lightfoot_pipeline.snapshot", "load_snapshot": "lightfoot_pipeline.snapshot",
    "Retriever": "lightfoot_pipeline.retrieval",
    "load_embedder": "lightfoot_pipeline.models",
}
__all__ = sorted(["__version__", *_EXPORTS])


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
