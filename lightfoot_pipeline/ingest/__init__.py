"""What comes in: documents and questions, inboxes and deletion requests, passages, and one
validated extraction per passage."""

from lightfoot_pipeline.ingest.dataset import (
    DatasetError,
    Document,
    Question,
    bundled_sample_dir,
    load_corpus,
    load_questions,
    load_recorded_extractions,
)
from lightfoot_pipeline.ingest.landing import DeletionRequest, Landing
from lightfoot_pipeline.ingest.passages import Passage, split_passages
from lightfoot_pipeline.ingest.records import ValidatedRecord, validate_record
from lightfoot_pipeline.ingest.retention import RetentionPolicy, due_documents, load_policy

__all__ = [
    "DatasetError", "DeletionRequest", "Document", "Landing", "Passage", "Question", "RetentionPolicy",
    "ValidatedRecord", "bundled_sample_dir", "due_documents", "load_corpus", "load_policy", "load_questions",
    "load_recorded_extractions", "split_passages", "validate_record",
]
