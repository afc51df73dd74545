"""What an extractor returns for each passage, and how a validated record is stored."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.ingest.records import Entity, Fact, Issue, ValidatedRecord
from lightfoot_pipeline.models.llm import HINTS as ERROR_HINTS

OK = "ok"
FAILED = "failed"


@dataclass
class ExtractionOutcome:
    """One passage's extraction: a validated record, or a failure with its reason."""

    chunk_id: str
    doc_id: str
    status: str  # "ok" or "failed"
    record: ValidatedRecord | None = None
    reason: str = ""
    extractor: str = ""
    cache_key: str = ""
    model_calls: int = 0  # answers asked of a model for this passage: 1, or 0 when replayed or cached
    retries: int = 0  # requests sent again for that call after its first (not further calls)
    cached: bool = False  # the answer came from the extraction cache: paid for by an earlier run
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    raw_output: str | None = field(default=None, repr=False)

    @classmethod
    def failed(cls, passage: Passage, reason: str, **extra) -> ExtractionOutcome:
        return cls(chunk_id=passage.chunk_id, doc_id=passage.doc_id, status=FAILED, reason=reason, **extra)


def reason_kind(reason: str) -> str:
    """What kind of failure a reason names: its text before the first ``": "``.

    Every failure reason starts with the engine's own words ("unusable answer", "model call failed
    after 3 attempt(s)", "no recorded extraction for this passage"); what follows may quote the
    model's answer or the endpoint's reply, and so the passage. A report kept outside the store
    (the orchestrator's event log, which an erasure cannot reach) shows the kind; the full reason
    stays with the passage's extraction in the store. A failed model call keeps its error's kind
    and HTTP status too (``model call failed after 1 attempt(s): server_error (HTTP 503)``)."""
    parts = reason.split(": ")
    kind = parts[0].strip() or "no reason given"
    if len(parts) > 1 and parts[1] in ERROR_HINTS:  # an LLMError: "kind: HTTP 503 from URL: the reply"
        kind += f": {parts[1]}"
        status = re.match(r"HTTP \d{3}\b", parts[2]) if len(parts) > 2 else None
        kind += f" ({status.group(0)})" if status else ""
    return kind


ProgressCallback = Callable[[int, int], None]


class Extractor(Protocol):
    """Turns passages into outcomes: exactly one outcome per passage, in the same order."""

    name: str

    def extract(self, passages: Sequence[Passage], progress: ProgressCallback | None = None) -> list[ExtractionOutcome]:
        ...


def record_to_json(record: ValidatedRecord) -> str:
    return json.dumps(
        {
            "entities": [[e.name, e.type, e.description] for e in record.entities],
            "facts": [[f.subject, f.predicate, f.object, f.evidence, f.evidence_verified] for f in record.facts],
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def record_from_json(text: str) -> ValidatedRecord:
    data = json.loads(text)
    return ValidatedRecord(
        entities=[Entity(name, type_, description) for name, type_, description in data["entities"]],
        facts=[Fact(s, p, o, evidence, verified) for s, p, o, evidence, verified in data["facts"]],
    )


def issues_to_json(issues: list[Issue]) -> str:
    return json.dumps([[i.action, i.item, i.reason, i.detail] for i in issues], ensure_ascii=False)
