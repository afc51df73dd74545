"""The replay extractor: recorded extraction output served as if a model had produced it.

Records are keyed by document id (the recording's unit; a MuSiQue paragraph is one document and
one passage). A record may carry ``chunk_ordinal`` for documents of several passages; a document
of several passages with one record without it applies the record to its first passage only.
A passage with no record fails with that reason, like a model that gave no answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lightfoot_pipeline.ingest.extraction.outcome import OK, ExtractionOutcome, ProgressCallback
from lightfoot_pipeline.ingest.passages import Passage, text_hash
from lightfoot_pipeline.ingest.records import validate_record
from lightfoot_pipeline.settings import MAX_ENTITIES_PER_PASSAGE, MAX_FACTS_PER_PASSAGE


class ReplayExtractor:
    def __init__(self, records: Mapping[str, dict | list[dict]], entity_types: tuple[str, ...] | None = None,
                 max_entities: int = MAX_ENTITIES_PER_PASSAGE, max_facts: int = MAX_FACTS_PER_PASSAGE) -> None:
        self.caps = {"max_entities": max_entities, "max_facts": max_facts}
        self._records: dict[tuple[str, int], dict] = {}
        for doc_id, value in records.items():
            for record in value if isinstance(value, list) else [value]:
                ordinal = int(record.get("chunk_ordinal", 0)) if isinstance(record, dict) else 0
                self._records[(doc_id, ordinal)] = record
        self.entity_types = entity_types
        models = sorted({str(r.get("model")) for r in self._records.values() if isinstance(r, dict) and r.get("model")})
        self.name = "replay:" + (",".join(models) if models else "recorded")

    def extract(self, passages: Sequence[Passage], progress: ProgressCallback | None = None) -> list[ExtractionOutcome]:
        outcomes = []
        for done, passage in enumerate(passages, start=1):
            record = self._records.get((passage.doc_id, passage.ordinal))
            if record is None:
                outcomes.append(
                    ExtractionOutcome.failed(passage, "no recorded extraction for this passage", extractor=self.name)
                )
            else:
                validated = validate_record(record, passage.retrieval_text, entity_types=self.entity_types, **self.caps)
                outcomes.append(
                    ExtractionOutcome(
                        chunk_id=passage.chunk_id,
                        doc_id=passage.doc_id,
                        status=OK,
                        record=validated,
                        extractor=self.name,
                        cache_key=f"{self.name}:{text_hash(passage.text)[:32]}",
                    )
                )
            if progress is not None:
                progress(done, len(passages))
        return outcomes
