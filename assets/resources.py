"""Resources: the store, the embedder, the extractor and the inboxes, each configurable per deployment.

External systems sit behind these, each with a model-free stand-in for tests and the bundled
sample: the hashing embedder stands in for the sentence-transformers model, and recorded
extractions (replay) for the language model. Secrets reach a resource only through ``dg.EnvVar``
(see ``defs/resources.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field

from lightfoot_pipeline.ingest.extraction.answers import CachedAnswers, ClaimingExtractor, RecordedOrModelExtractor
from lightfoot_pipeline.ingest.extraction.claims import ExtractionClaims
from lightfoot_pipeline.ingest.extraction.outcome import Extractor
from lightfoot_pipeline.ingest.inbox import (
    DEFAULT_DOCUMENT_INBOX,
    DEFAULT_ERASURE_INBOX,
    Inbox,
    document_inbox,
    erasure_inbox,
)
from lightfoot_pipeline.ingest.landing import Landing
from lightfoot_pipeline.models.embedder import Embedder, load_embedder
from lightfoot_pipeline.settings import (
    IndexSettings,
    embedder_spec,
    retention_policy_path,
    sync_source_uri,
)
from lightfoot_pipeline.store.store import Store

if TYPE_CHECKING:
    from lightfoot_pipeline.ingest.extraction.batch_extractor import BatchExtractor
    from lightfoot_pipeline.ingest.extraction.openai_extractor import OpenAIExtractor
    from lightfoot_pipeline.models.batch_api import BatchAPI

BATCH_MODE = "openai-batch"


class StoreResource(dg.ConfigurableResource):
    """The Lightfoot store: Delta tables and LanceDB vectors under one root (a path or s3:// URI)."""

    uri: str | None = Field(default=None, description="Store root; default $LIGHTFOOT_STORE, else .lightfoot/store.")
    n_buckets: int = Field(default=16, description="Hash buckets of every table (fixed when the store is created).")
    report_fingerprint: bool = Field(
        default=True, description="Compute the store fingerprint for every materialization's metadata."
    )
    compare_with_rebuild: bool = Field(
        default=True, description="Run the blocking comparison with a fresh rebuild after each change (off: the "
        "matches_fresh_rebuild check warns that it did not compare, as its run config's enabled=false does).",
    )

    def open(self) -> Store:
        return Store(self.uri, n_buckets=self.n_buckets)

    def landing(self) -> Landing:
        return Landing(self.open())

    def settings(self) -> IndexSettings:
        return IndexSettings()


@functools.lru_cache(maxsize=4)
def _embedder(spec: str | None) -> Embedder:
    return load_embedder(spec)


class EmbedderResource(dg.ConfigurableResource):
    """The text embedder: a sentence-transformers model, or ``hashing`` for the model-free one."""

    model: str | None = Field(
        default=None,
        description="Model name or local path, or hashing[:DIM]; default $LIGHTFOOT_EMBEDDER, else all-MiniLM-L6-v2.",
    )

    def get(self) -> Embedder:
        """The embedder, loaded once per process."""
        return _embedder(embedder_spec(self.model))


class ExtractorResource(dg.ConfigurableResource):
    """Extraction: recorded output where a document arrived with one, else a language model.

    ``mode``: ``auto`` replays recorded extractions and asks the model for the other passages;
    ``replay`` only replays (a passage with no recording fails with that reason); ``openai``
    always asks the model; ``openai-batch`` replays as ``auto`` does and submits the other passages
    to the provider's Batch API at its batch price (they await it; ``extraction_batches_sensor``
    collects the answers). The model is any OpenAI-compatible endpoint; unset fields fall back to
    the environment (OPENAI_BASE_URL, OPENAI_API_KEY, LIGHTFOOT_LLM_MODEL, …).
    """

    mode: str = Field(default="auto", description="auto | replay | openai | openai-batch")
    base_url: str | None = Field(default=None, description="Endpoint of the OpenAI-compatible API.")
    model: str | None = Field(default=None, description="Model to ask.")
    api_key: str | None = Field(default=None, description="API key (give it as an EnvVar).")

    def get(self, store: Store, settings: IndexSettings, recorded: dict[str, dict | list], run_id: str,
            from_cache: bool = False) -> Extractor:
        """Replays the recorded extractions and asks the model for the other passages; with
        ``from_cache``, reads the model's answers from the extraction cache instead (no call)."""
        self._check_mode()
        model = None if self.mode == "replay" else functools.partial(
            self._cached_answers if from_cache else self.model_extractor, store, settings, run_id)
        return RecordedOrModelExtractor({} if self.mode == "openai" else recorded, model)

    def asks_model(self, doc_id: str, recorded: Collection[str]) -> bool:
        """Whether a document's passages go to the model (not replayed)."""
        self._check_mode()
        return self.mode == "openai" or (self.mode in ("auto", BATCH_MODE) and doc_id not in recorded)

    @property
    def batched(self) -> bool:
        """Whether the model's passages go through the provider's Batch API."""
        return self.mode == BATCH_MODE

    def model_extractor(self, store: Store, settings: IndexSettings, run_id: str) -> OpenAIExtractor | BatchExtractor:
        if self.batched:
            return self.batch_extractor(store, settings, run_id)
        from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor

        return build_openai_extractor(store, settings, llm_settings=self._llm_settings(), run_id=run_id)

    def claiming_extractor(self, store: Store, settings: IndexSettings, run_id: str) -> ClaimingExtractor:
        """The synchronous extractor at this resource's endpoint, asking each text once through the
        claims: what a collection run asks again with when told to ask now."""
        from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor

        return ClaimingExtractor(build_openai_extractor(store, settings, llm_settings=self._llm_settings(),
                                                        run_id=run_id))

    def batch_extractor(self, store: Store, settings: IndexSettings, run_id: str) -> BatchExtractor:
        """The extractor that submits and collects the provider's batches."""
        from lightfoot_pipeline.operations.batch_extraction import build_batch_extractor

        return build_batch_extractor(store, settings, llm_settings=self._llm_settings(), run_id=run_id)

    def batch_api(self) -> BatchAPI | None:
        """The provider's Batch API at this resource's endpoint (where erasure deletes the files of
        extraction batches), or None when no endpoint is configured."""
        from lightfoot_pipeline.models.batch_api import BatchAPI
        from lightfoot_pipeline.models.llm import LLMError

        try:
            settings = self._llm_settings()
            return BatchAPI(settings) if settings.base_url or settings.api_key else None
        except (LLMError, ValueError):
            return None

    def _llm_settings(self):
        from lightfoot_pipeline.models.llm import LLMSettings

        overrides = {k: v for k, v in {"base_url": self.base_url, "model": self.model, "api_key": self.api_key}.items() if v}
        return LLMSettings.from_env(**overrides)

    def _cached_answers(self, store: Store, settings: IndexSettings, run_id: str) -> Extractor:
        return CachedAnswers(self.model_extractor(store, settings, run_id), ExtractionClaims(store, run_id))

    def _check_mode(self) -> None:
        if self.mode not in {"auto", "replay", "openai", BATCH_MODE}:
            raise dg.Failure(f"extractor mode must be auto, replay, openai or {BATCH_MODE}, not {self.mode!r}")


class InboxResource(dg.ConfigurableResource):
    """Where documents and erasure requests are dropped, the retention policy file, and the folder
    of document files the store follows (assets/defs/sync.py)."""

    documents: str | None = Field(
        default=None, description="Document inbox (folder or s3:// prefix); default $LIGHTFOOT_INBOX, else "
        f"{DEFAULT_DOCUMENT_INBOX}, or <store>/inbox/documents for a remote store.",
    )
    erasure_requests: str | None = Field(
        default=None, description="Erasure-request inbox; default $LIGHTFOOT_ERASURE_INBOX, else "
        f"{DEFAULT_ERASURE_INBOX}, or <store>/inbox/erasure for a remote store.",
    )
    retention_policy: str | None = Field(
        default=None, description="Retention policy file (JSON); default $LIGHTFOOT_RETENTION_POLICY, else none."
    )

    sync_source: str | None = Field(
        default=None, description="Folder or s3:// prefix of document files to sync; default $LIGHTFOOT_SYNC_SOURCE."
    )
    sync_erase: bool = Field(default=False, description="Erase removed files' text from history (delete --erase).")

    def sync_source_uri(self) -> str | None:
        return self.sync_source or sync_source_uri()

    def document_inbox(self, store: Store) -> Inbox:
        return document_inbox(store, self.documents)

    def erasure_inbox(self, store: Store) -> Inbox:
        return erasure_inbox(store, self.erasure_requests)

    def policy_path(self) -> str | None:
        return self.retention_policy or retention_policy_path()
