"""Resources: the store, the embedder, the extractor and the inboxes, each configurable per deployment.

External systems sit behind these, each with a model-free stand-in for tests and the bundled
sample: the hashing embedder stands in for the sentence-transformers model, and recorded
extractions (replay) for the language model. Secrets reach a resource only through ``dg.EnvVar``
(see ``defs/resources.py``).
"""

from __future__ import annotations

import functools

import dagster as dg
from pydantic import Field

from lightfoot_pipeline.ingest.inbox import (
    DEFAULT_DOCUMENT_INBOX,
    DEFAULT_ERASURE_INBOX,
    Inbox,
    document_inbox,
    erasure_inbox,
)
from lightfoot_pipeline.models.embedder import Embedder, load_embedder
from lightfoot_pipeline.operations.extractors import ExtractionChoice, ModelEndpoint
from lightfoot_pipeline.settings import (
    IndexSettings,
    SettingsError,
    embedder_spec,
    retention_policy_path,
    sync_source_uri,
)
from lightfoot_pipeline.store.store import Store


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
    """Extraction: recorded output where a document arrived with one, else a language model at any
    OpenAI-compatible endpoint (lightfoot_pipeline/operations/extractors.py says what each mode
    does). ``openai-batch`` submits the model's passages to the provider's Batch API, and
    ``extraction_batches_sensor`` collects the answers. Unset fields fall back to the environment
    (OPENAI_BASE_URL, OPENAI_API_KEY, LIGHTFOOT_LLM_MODEL, …).
    """

    mode: str = Field(default="auto", description="auto | replay | openai | openai-batch")
    base_url: str | None = Field(default=None, description="Endpoint of the OpenAI-compatible API.")
    model: str | None = Field(default=None, description="Model to ask.")
    api_key: str | None = Field(default=None, description="API key (give it as an EnvVar).")

    def endpoint(self) -> ModelEndpoint:
        """The model's endpoint, whatever the mode (erasure deletes extraction batches' files there)."""
        return ModelEndpoint(self.base_url, self.model, self.api_key)

    def choice(self) -> ExtractionChoice:
        """The extractor this resource configures; a mode it does not know fails the step."""
        try:
            return ExtractionChoice(self.mode, self.endpoint())
        except SettingsError as err:
            raise dg.Failure(str(err)) from None


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
