"""What the synchronous extractor (openai_extractor.py) and the batch extractor
(batch_extractor.py) share: one model's answers to the extraction prompt, kept in the extraction
cache under a key of the model, the prompt, the schema and the passage's text.

Both give the same rows for the same answer (``name`` is ``openai:<model>`` either way), so that a
store extracted by batches equals one extracted call by call.
"""

from __future__ import annotations

from collections.abc import Sequence

from lightfoot_pipeline.ingest.extraction.cache import ExtractionCache, cache_key_for
from lightfoot_pipeline.ingest.extraction.outcome import OK, ExtractionOutcome
from lightfoot_pipeline.ingest.extraction.parse import MAX_ANSWER_CHARS, ParsedAnswer, parse_answer
from lightfoot_pipeline.ingest.extraction.prompt import ExtractionPrompt
from lightfoot_pipeline.ingest.passages import Passage


class ModelAnswers:
    """A model's answers to ``prompt``: their cache keys, their parse, their cache rows, and the
    outcomes the cache alone gives. ``NOT_ASKED`` is a passage's reason when the cache holds no
    answer for it and the caller gives none."""

    NOT_ASKED = "no answer in the extraction cache: the model was not asked"

    def __init__(self, store, model: str, prompt: ExtractionPrompt | None = None) -> None:
        self.store = store
        self.model = model
        self.name = f"openai:{model}"
        self.prompt = prompt or ExtractionPrompt()
        self.cache = ExtractionCache(store)

    def cache_key(self, passage: Passage) -> str:
        return cache_key_for(self.model, self.prompt.prompt_hash, self.prompt.schema_hash,
                             self.prompt.text_hash(passage))

    def from_cache(self, passages: Sequence[Passage], reasons: dict[str, str] | None = None) -> list[ExtractionOutcome]:
        """One outcome per passage from the cache alone, with no call: the cached answer, or a failure
        with ``reasons[cache key]`` (why no answer was cached), else ``NOT_ASKED``."""
        keys = [self.cache_key(p) for p in passages]
        cached = self.cache.lookup(keys) if passages else {}
        outcomes = []
        for passage, key in zip(passages, keys, strict=True):
            hit = cached.get(key)
            parsed = self._parse(hit["output"], passage, truncated=False) if hit is not None else None
            if parsed is not None and parsed.ok:
                outcomes.append(self._outcome(passage, key, parsed, hit["output"], cached=True))
                continue
            reason = (f"cached answer unusable for this passage: {parsed.reason}" if parsed is not None
                      else (reasons or {}).get(key) or self.NOT_ASKED)
            outcomes.append(ExtractionOutcome.failed(passage, reason, extractor=self.name, cache_key=key))
        return outcomes

    def _parse(self, text: str | None, passage: Passage, truncated: bool) -> ParsedAnswer:
        return parse_answer(
            text, passage.retrieval_text, entity_types=self.prompt.entity_types,
            max_entities=self.prompt.max_entities, max_facts=self.prompt.max_facts,
            description_words=self.prompt.description_words, truncated=truncated,
        )

    def _outcome(self, passage: Passage, key: str, parsed: ParsedAnswer, text: str, **calls) -> ExtractionOutcome:
        return ExtractionOutcome(
            chunk_id=passage.chunk_id, doc_id=passage.doc_id, status=OK, record=parsed.record,
            extractor=self.name, cache_key=key, raw_output=text, **calls,
        )

    def _cache_row(self, passage: Passage, key: str, text: str, tokens_in: int, tokens_out: int) -> dict:
        """The extraction cache's row of a usable answer."""
        return {
            "cache_key": key, "model": self.model, "prompt_hash": self.prompt.prompt_hash,
            "schema_hash": self.prompt.schema_hash, "text_hash": self.prompt.text_hash(passage),
            "output": text[:MAX_ANSWER_CHARS], "tokens_in": tokens_in, "tokens_out": tokens_out,
        }
