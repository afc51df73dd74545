"""The index built from the extractions: per-document rows, then the global graph."""

from lightfoot_pipeline.index.documents import TombstoneReport, tombstone_documents, upsert_documents
from lightfoot_pipeline.index.links import LinkRule
from lightfoot_pipeline.index.reconcile import EmbedderRequired, GraphChange, reconcile_graph

__all__ = ["EmbedderRequired", "GraphChange", "LinkRule", "TombstoneReport", "reconcile_graph", "tombstone_documents",
           "upsert_documents"]
