"""Lightfoot: a GraphRAG index with exact, model-free document deletion.

This package is the engine: pure functions over Arrow/Polars tables and the store they live in.
It imports nothing from the orchestrator; the Dagster layer lives in the top-level ``assets``
package and calls into here.

The sub-packages are layers, from the top: ``cli``, ``evaluation``, ``pipeline`` (the operations
on a store), ``erase``, ``serving``, ``index``, ``ingest``, ``store``, ``models``, ``settings``.
A module imports only from its own layer and the layers below it.
"""

__version__ = "0.1.0"
