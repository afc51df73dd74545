"""The extractor a deployment chose: recorded extractions replayed, a language model at an
OpenAI-compatible endpoint, or that model through the provider's Batch API.

:class:`ExtractionChoice` is what the Dagster layer's extractor resource and the command line
build their extractors from: a mode and a :class:`ModelEndpoint`. The modes:

- ``auto``: a document that came with a recorded extraction is replayed, every other passage asks
  the model;
- ``replay``: only replays (a passage with no recording fails with that reason; no call);
- ``openai``: every passage asks the model;
- ``openai-batch``: replays as ``auto`` does and submits the other passages to the provider's
  Batch API at its batch price (they await it until a collection takes the answers).

The endpoint's base URL, model and key, each when given, win over the environment's
(OPENAI_BASE_URL, LIGHTFOOT_LLM_MODEL, OPENAI_API_KEY, models/llm.py).
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lightfoot_pipeline.ingest.extraction.answers import CachedAnswers, ClaimingExtractor, RecordedOrModelExtractor
from lightfoot_pipeline.ingest.extraction.claims import ExtractionClaims
from lightfoot_pipeline.ingest.extraction.outcome import Extractor
from lightfoot_pipeline.models.llm import LLMError, LLMSettings
from lightfoot_pipeline.settings import IndexSettings, SettingsError
from lightfoot_pipeline.store.store import Store

if TYPE_CHECKING:
    from lightfoot_pipeline.ingest.extraction.batch_extractor import BatchExtractor
    from lightfoot_pipeline.ingest.extraction.openai_extractor import OpenAIExtractor
    from lightfoot_pipeline.models.batch_api import BatchAPI

BATCH_MODE = "openai-batch"
MODES = ("auto", "replay", "openai", BATCH_MODE)


@dataclass(frozen=True)
class ModelEndpoint:
    """An OpenAI-compatible endpoint: its base URL, model and key, each when given winning over
    the environment's."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None

    def llm_settings(self) -> LLMSettings:
        """The endpoint's settings: those given here over the environment's. Settings that cannot
        be used are an LLMError of kind ``config``."""
        given = {"base_url": self.base_url, "model": self.model, "api_key": self.api_key}
        try:
            return LLMSettings.from_env(**{k: v for k, v in given.items() if v})
        except ValueError as err:
            raise LLMError("config", str(err)) from None

    def batch_api(self) -> BatchAPI | None:
        """The provider's Batch API at this endpoint (where erasure deletes the files of extraction
        batches, whatever the extraction mode), or None when no endpoint is configured or its
        settings cannot be used."""
        from lightfoot_pipeline.models.batch_api import BatchAPI

        try:
            settings = self.llm_settings()
        except LLMError:
            return None
        return BatchAPI(settings) if settings.base_url or settings.api_key else None


@dataclass(frozen=True)
class ExtractionChoice:
    """A mode (see the module docstring) and the endpoint the model is asked at."""

    mode: str = "auto"
    endpoint: ModelEndpoint = ModelEndpoint()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SettingsError(f"extractor mode must be auto, replay, openai or {BATCH_MODE}, not {self.mode!r}",
                                hint="set LIGHTFOOT_EXTRACTOR (or the extractor resource's mode) to one of those")

    @property
    def batched(self) -> bool:
        """Whether the model's passages go through the provider's Batch API."""
        return self.mode == BATCH_MODE

    def asks_model(self, doc_id: str, recorded: Collection[str]) -> bool:
        """Whether a document's passages go to the model (``recorded``: the documents that came
        with a recorded extraction, which the other modes than ``openai`` replay)."""
        return self.mode == "openai" or (self.mode in ("auto", BATCH_MODE) and doc_id not in recorded)

    def extractor(self, store: Store, settings: IndexSettings, recorded: dict[str, dict | list], run_id: str,
                  from_cache: bool = False) -> Extractor:
        """Replays the recorded extractions and asks the model for the other passages (none in
        ``replay`` mode, all in ``openai``); with ``from_cache``, reads the model's answers from
        the extraction cache instead, with no call."""
        model = None if self.mode == "replay" else functools.partial(
            self._cached_answers if from_cache else self.model_extractor, store, settings, run_id)
        return RecordedOrModelExtractor({} if self.mode == "openai" else recorded, model)

    def model_extractor(self, store: Store, settings: IndexSettings, run_id: str | None) -> OpenAIExtractor | BatchExtractor:
        """The model's extractor: through the Batch API in ``openai-batch`` mode, else synchronous."""
        if self.batched:
            return self.batch_extractor(store, settings, run_id)
        from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor

        return build_openai_extractor(store, settings, llm_settings=self.endpoint.llm_settings(), run_id=run_id)

    def claiming_extractor(self, store: Store, settings: IndexSettings, run_id: str) -> ClaimingExtractor:
        """The synchronous extractor at this endpoint, asking each text once through the claims:
        what a collection asks again with when told to ask now."""
        from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor

        return ClaimingExtractor(build_openai_extractor(store, settings, llm_settings=self.endpoint.llm_settings(),
                                                        run_id=run_id))

    def batch_extractor(self, store: Store, settings: IndexSettings, run_id: str | None) -> BatchExtractor:
        """The extractor that submits and collects the provider's batches."""
        from lightfoot_pipeline.operations.batch_extraction import build_batch_extractor

        return build_batch_extractor(store, settings, llm_settings=self.endpoint.llm_settings(), run_id=run_id)

    def _cached_answers(self, store: Store, settings: IndexSettings, run_id: str) -> Extractor:
        return CachedAnswers(self.model_extractor(store, settings, run_id), ExtractionClaims(store, run_id))
