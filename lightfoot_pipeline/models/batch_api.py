"""A provider's Batch API (``/v1/files`` and ``/v1/batches``) through the ``openai`` client.

:class:`BatchAPI` is what batch extraction asks of a provider: upload a request file, create a
batch for it with metadata naming the engine's own batch id, find such a batch or file again
(after a crash between an upload and the record of its batch), follow a batch's state, download
its output and error files within a size bound, cancel it, and delete its files. It knows nothing
of the store; ``ingest/extraction`` and ``operations/batch_extraction.py`` use it.

Every failure of the provider is a :class:`BatchAPIError` with the engine's words, the HTTP
status and the provider's error code, never the provider's message (which may quote a request,
and so a passage). The key stays out of repr and messages, as with :class:`~.llm.LLMClient`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.models.llm import LLMError, LLMSettings

# Batch states, as the provider names them.
OPEN_STATES = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
ENDED_STATES = frozenset({"completed", "failed", "expired", "cancelled"})
GIVEN_UP_STATES = frozenset({"failed", "expired", "cancelled", "cancelling"})
METADATA_KEY = "lightfoot_batch"
COMPLETION_WINDOW = "24h"
DOWNLOAD_CHUNK = 1024 * 1024
# A listing (to find a batch or a file again) reads at most this many pages of 100: a provider that
# keeps answering "more" cannot hold the caller for ever.
MAX_PAGES = 200


class BatchAPIError(LightfootError, RuntimeError):
    """The provider refused or failed a Batch API request (``status``: its HTTP status, if any)."""

    hint = ("check OPENAI_BASE_URL and OPENAI_API_KEY, and that the endpoint offers /v1/files and /v1/batches "
            "(a provider that refuses a file's expiry takes LIGHTFOOT_LLM_BATCH_FILE_TTL_S=0)")

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class ProviderBatch:
    """What the provider says of a batch (ids, state, counts; never its error messages)."""

    id: str
    state: str
    input_file_id: str | None
    output_file_id: str | None = None
    error_file_id: str | None = None
    metadata: dict = field(default_factory=dict)
    error_codes: tuple[str, ...] = ()
    request_counts: dict = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


def _code(value) -> str:
    text = str(value) if value is not None else ""
    return "".join(c for c in text[:40] if c.isalnum() or c in "_-.")


def _batch(raw) -> ProviderBatch:
    errors = getattr(raw, "errors", None)
    codes = tuple(_code(getattr(e, "code", None)) for e in (getattr(errors, "data", None) or []))
    counts = getattr(raw, "request_counts", None)
    return ProviderBatch(
        id=raw.id, state=str(raw.status), input_file_id=raw.input_file_id, output_file_id=raw.output_file_id,
        error_file_id=raw.error_file_id, metadata=dict(raw.metadata or {}), error_codes=codes,
        request_counts={k: int(getattr(counts, k, 0) or 0) for k in ("total", "completed", "failed")} if counts else {},
    )


class BatchAPI:
    """The Batch API of the endpoint that ``settings`` names (or of ``client``, an ``openai.OpenAI``)."""

    def __init__(self, settings: LLMSettings, client=None) -> None:
        self.settings = settings
        if client is None:
            import openai

            if not settings.api_key and not settings.base_url:
                raise LLMError("config", "no endpoint configured: set OPENAI_BASE_URL (and OPENAI_API_KEY if it needs one)")
            client = openai.OpenAI(base_url=settings.base_url, api_key=settings.api_key or "no-key",
                                   timeout=settings.timeout_s, max_retries=settings.max_retries)
        self._client = client

    def __repr__(self) -> str:
        return f"BatchAPI(endpoint={self.settings.endpoint()!r})"

    def _call(self, what: str, fn, *args, **kwargs):
        with self._errors(what):
            return fn(*args, **kwargs)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """The openai client's failures as BatchAPIError: the engine's words, status and code only."""
        import openai

        try:
            yield
        except openai.APIStatusError as err:
            body: dict = err.body if isinstance(err.body, dict) else {}
            nested = body.get("error")
            inner: dict = nested if isinstance(nested, dict) else body
            code = _code(inner.get("code"))
            raise BatchAPIError(f"{what}: the provider answered HTTP {err.status_code}" + (f" ({code})" if code else ""),
                                status=int(err.status_code), code=code or None) from None
        except openai.APIConnectionError:
            raise BatchAPIError(f"{what}: cannot reach {self.settings.endpoint()}") from None
        except openai.APIError as err:
            raise BatchAPIError(f"{what}: the provider's answer could not be read ({type(err).__name__})") from None

    def _expiry(self, name: str = "expires_after") -> dict:
        """The expiry asked of the provider for a file (``expires_after``) or a batch's output and
        error files (``output_expires_after``): what bounds their stay at the provider when nothing
        deletes them (LLMSettings.batch_file_ttl_s; none when it is 0)."""
        ttl = self.settings.batch_file_ttl_s
        return {name: {"anchor": "created_at", "seconds": ttl}} if ttl else {}

    # -- files -------------------------------------------------------------------------------

    def upload(self, path: Path, filename: str) -> str:
        """Upload a request file (purpose ``batch``) under ``filename``; its file id."""
        with Path(path).open("rb") as handle:
            uploaded = self._call("upload a request file", self._client.files.create,
                                  file=(filename, handle, "application/jsonl"), purpose="batch", **self._expiry())
        return uploaded.id

    def find_file(self, filename: str) -> str | None:
        """The id of an uploaded batch file of that name (the newest), if the provider holds one."""
        found = [f for f in self._pages(self._client.files.list, "list files", purpose="batch")
                 if getattr(f, "filename", None) == filename]
        return max(found, key=lambda f: (f.created_at, f.id)).id if found else None

    def file_ids(self) -> set[str]:
        """Every batch file the provider holds for this key."""
        return {f.id for f in self._pages(self._client.files.list, "list files", purpose="batch")}

    def download(self, file_id: str, into: BinaryIO, max_bytes: int) -> int:
        """Copy a file's content into ``into``, at most ``max_bytes`` (BatchAPIError past them); its bytes."""
        written = 0
        with self._errors("download a file"), self._client.files.with_streaming_response.content(file_id) as response:
            for chunk in response.iter_bytes(DOWNLOAD_CHUNK):
                written += len(chunk)
                if written > max_bytes:
                    raise BatchAPIError(f"download a file: larger than the {max_bytes:,} bytes its requests can make")
                into.write(chunk)
        return written

    def delete_file(self, file_id: str) -> bool:
        """Delete a file at the provider; False when it was gone already (404)."""
        try:
            self._call("delete a file", self._client.files.delete, file_id)
        except BatchAPIError as err:
            if err.status == 404:
                return False
            raise
        return True

    # -- batches -----------------------------------------------------------------------------

    def create(self, input_file_id: str, batch: str) -> ProviderBatch:
        """A batch of chat completions for an uploaded file, its metadata naming ``batch``."""
        return _batch(self._call("create a batch", self._client.batches.create, input_file_id=input_file_id,
                                 endpoint="/v1/chat/completions", completion_window=COMPLETION_WINDOW,
                                 metadata={METADATA_KEY: batch}, **self._expiry("output_expires_after")))

    def find(self, batch: str) -> ProviderBatch | None:
        """The provider's batch whose metadata names ``batch`` (the newest), if there is one that
        is running or completed (one that failed, expired or was cancelled is not asked again)."""
        found = [b for b in self._pages(self._client.batches.list, "list batches")
                 if (b.metadata or {}).get(METADATA_KEY) == batch and b.status not in GIVEN_UP_STATES]
        return _batch(max(found, key=lambda b: (b.created_at, b.id))) if found else None

    def retrieve(self, provider_batch_id: str) -> ProviderBatch:
        return _batch(self._call("look at a batch", self._client.batches.retrieve, provider_batch_id))

    def cancel(self, provider_batch_id: str) -> ProviderBatch:
        return _batch(self._call("cancel a batch", self._client.batches.cancel, provider_batch_id))

    def _pages(self, list_fn, what: str, **kwargs) -> Iterator:
        page = self._call(what, list_fn, limit=100, **kwargs)
        yield from page.data
        pages = 1
        while getattr(page, "has_more", False) and page.data:
            if pages >= MAX_PAGES:
                raise BatchAPIError(f"{what}: more than {MAX_PAGES} pages; delete the provider's old batches and files")
            page = self._call(what, list_fn, limit=100, after=page.data[-1].id, **kwargs)
            pages += 1
            yield from page.data
