"""Provenance a person can read: what a document contributed and what its deletion would remove,
and an entity's names, passages, documents, synonyms and facts; both read the committed store and
never change it.

Each public name but :class:`ExplainError` loads its module when first used (the modules import
``ExplainError`` from here).
"""

from __future__ import annotations

import importlib

from lightfoot_pipeline.errors import LightfootError


class ExplainError(LightfootError, LookupError):
    """What was asked about is not in the store (the message says what is, or how to find it)."""


_EXPORTS = {
    "DeletionPreview": "documents", "DocumentExplanation": "documents", "explain_document": "documents",
    "preview_deletion": "documents", "table_differences": "documents",
    "EntityExplanation": "entities", "explain_entity": "entities", "find_entities": "entities",
}
__all__ = sorted(["ExplainError", *_EXPORTS])


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
