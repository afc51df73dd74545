"""Lightfoot: a GraphRAG index with exact, model-free document deletion.

This package is the engine: pure functions over Arrow/Polars tables and the store they live in.
It imports nothing from the orchestrator; the Dagster layer lives in the top-level ``assets``
package and calls into here.
"""

__version__ = "0.1.0"
