"""Extraction: one model call per passage turns its text into entities and facts.

``outcome`` defines what every extractor returns; ``replay`` serves recorded extractions through
the same interface, so the whole pipeline runs with no model.
"""

from lightfoot_pipeline.ingest.extraction.outcome import (
    ExtractionOutcome,
    Extractor,
    reason_kind,
    record_from_json,
    record_to_json,
)
from lightfoot_pipeline.ingest.extraction.replay import ReplayExtractor

__all__ = ["ExtractionOutcome", "Extractor", "ReplayExtractor", "reason_kind", "record_from_json", "record_to_json"]
