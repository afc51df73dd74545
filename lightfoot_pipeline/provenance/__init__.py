"""Provenance a person can read: what a document contributed and what its deletion would remove,
an entity's names, passages, documents, synonyms and facts, a fact's sources, and what an ingestion
batch did to each of its documents, with the batches and runs behind every source; all read the
committed store and never change it.
"""

from lightfoot_pipeline.provenance.batches import (
    BatchExplanation,
    batch_link,
    document_batches,
    document_link,
    explain_batch,
    run_link,
    source_batches,
)
from lightfoot_pipeline.provenance.documents import (
    DeletionPreview,
    DocumentExplanation,
    explain_document,
    preview_deletion,
    table_differences,
)
from lightfoot_pipeline.provenance.entities import (
    EntityExplanation,
    FactExplanation,
    explain_entity,
    explain_fact,
    find_entities,
)
from lightfoot_pipeline.provenance.errors import ExplainError

__all__ = [
    "BatchExplanation", "DeletionPreview", "DocumentExplanation", "EntityExplanation", "ExplainError",
    "FactExplanation", "batch_link", "document_batches", "document_link", "explain_batch", "explain_document",
    "explain_entity", "explain_fact", "find_entities", "preview_deletion", "run_link", "source_batches",
    "table_differences",
]
