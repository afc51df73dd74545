"""Provenance a person can read: what a document contributed and what its deletion would remove,
and an entity's names, passages, documents, synonyms and facts; both read the committed store and
never change it.
"""

from lightfoot_pipeline.provenance.documents import (
    DeletionPreview,
    DocumentExplanation,
    explain_document,
    preview_deletion,
    table_differences,
)
from lightfoot_pipeline.provenance.entities import EntityExplanation, explain_entity, find_entities
from lightfoot_pipeline.provenance.errors import ExplainError

__all__ = [
    "DeletionPreview", "DocumentExplanation", "EntityExplanation", "ExplainError", "explain_document",
    "explain_entity", "find_entities", "preview_deletion", "table_differences",
]
