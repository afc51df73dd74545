"""The project's client for OpenAI-compatible chat-completion endpoints.

One class, :class:`LLMClient`, serves every model call the project makes (extraction at index
time, answering at query time). It wraps the ``openai`` package and adds what a long indexing run
needs from it:

- **Retries** with exponential backoff and jitter on 429 (honouring ``Retry-After`` and
  ``retry-after-ms``), on 5xx and on timeouts or dropped connections; never on another 4xx.
  The ``openai`` client's own retries are off (also on a client passed in), so every HTTP request
  is counted: a call is one answer asked for, its ``attempts`` the requests it took, and its
  ``retries`` the requests after the first (a retry, or a resend in a simpler output mode). The
  cost ledger and the ingest report count calls and retries apart.
- **Structured output where the endpoint has it.** With a JSON schema, ``output_mode="auto"``
  asks for ``json_schema`` output, falls back to ``json_object``, then to a plain prompt when the
  endpoint refuses the request format (a 400 or 422), and remembers the mode that worked. A
  fallback is remembered only once a lower mode succeeds, so one bad request does not downgrade
  the client for everyone.
- **A per-call timeout**, and token counts for the cost ledger. An endpoint that reports no
  usage is charged the most the call could have been billed: :func:`prompt_token_bound` for the
  prompt and the request's ``max_tokens`` for the reply.
- **What a call may cost, before it is made** (:meth:`LLMSettings.worst_case_usd`), and whether
  the model may be paid for at all (:meth:`LLMSettings.price_state`): a model with neither a
  configured nor a list price is refused wherever spend is capped, unless the operator allows it.
- **The key stays secret**: it is never in a repr, a log line or an error message.

Settings come from the environment (:meth:`LLMSettings.from_env`): ``OPENAI_BASE_URL``,
``OPENAI_API_KEY`` and the ``LIGHTFOOT_LLM_*`` variables, read by
:func:`lightfoot_pipeline.settings.llm_environment` and listed in the README's settings table.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.models.prices import batch_discount, list_price
from lightfoot_pipeline.settings import llm_environment

log = logging.getLogger(__name__)

# Paper §4: extraction with Llama 3.3 70B at $0.10 / $0.32 per million input / output tokens.
DEFAULT_MODEL = "meta-llama/Llama-3.3-70B-Instruct"
OUTPUT_MODES = ("json_schema", "json_object", "prompt")
# Bounds of a Batch API file's expiry (seconds): past the 24 h batch window and a day to collect it, and
# at most the 30 days providers keep batch files by default.
BATCH_FILE_TTL_RANGE = (2 * 24 * 3600, 30 * 24 * 3600)
_NO_KEY = "no-key"  # sent to endpoints that need no key; the openai client refuses an empty one

# What a request's prompt may hold besides its messages' text, in tokens: the chat template's role
# markers and separators (a few tokens a message in the templates of Llama 3, Qwen and OpenAI's
# chat format) and what a template puts before the first message (Llama 3.1's date lines).
TEMPLATE_TOKENS_PER_MESSAGE = 8
TEMPLATE_TOKENS_PER_REQUEST = 64
# Price states (LLMSettings.price_state).
PRICED, UNPRICED_ALLOWED, REFUSED = "priced", "unpriced-allowed", "refused"
ALLOW_UNPRICED_HINT = ("set LIGHTFOOT_LLM_PRICE_IN and LIGHTFOOT_LLM_PRICE_OUT (USD per million tokens), "
                       "or pass --allow-unpriced (LIGHTFOOT_LLM_ALLOW_UNPRICED=1) to spend without a cap")

RETRYABLE_KINDS = frozenset({"timeout", "rate_limited", "server_error", "unreachable"})
# What to do about a failed call, by its kind (LLMError.hint).
HINTS = {
    "unreachable": "start the endpoint, or point OPENAI_BASE_URL at one that runs",
    "timeout": "raise LIGHTFOOT_LLM_TIMEOUT_S, or try again when the endpoint is less busy",
    "rate_limited": "lower LIGHTFOOT_LLM_CONCURRENCY, or try again later",
    "server_error": "the endpoint failed; try again later",
    "auth": "set OPENAI_API_KEY to a key the endpoint accepts",
    "not_found": "set LIGHTFOOT_LLM_MODEL to a model the endpoint serves",
    "bad_request": "check that LIGHTFOOT_LLM_MODEL names a chat model of this endpoint",
    "bad_response": "try another model (LIGHTFOOT_LLM_MODEL)",
    "config": "the README's settings table lists the model's variables",
}


class LLMError(LightfootError, RuntimeError):
    """A model call that did not produce an answer.

    ``kind`` is one of ``timeout``, ``rate_limited``, ``server_error``, ``unreachable`` (these are
    retried), ``bad_request``, ``auth``, ``not_found``, ``config`` or ``bad_response``.
    """

    def __init__(
        self, kind: str, message: str, *, status: int | None = None, attempts: int = 0,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{kind}: {message}", hint=HINTS.get(kind, ""))
        self.kind = kind
        self.status = status
        self.attempts = attempts
        self.retry_after = retry_after  # seconds the endpoint asked us to wait, if it said

    @property
    def retries(self) -> int:
        """Requests sent again for this call after its first."""
        return max(self.attempts - 1, 0)


class UnpricedModelError(LightfootError, ValueError):
    """Paid calls refused before any is made: the model has no known price, so no budget can
    hold its calls, and the operator has not allowed spending on it without one."""

    hint = ALLOW_UNPRICED_HINT


def prompt_token_bound(messages: list[dict], json_schema: dict | None = None) -> int:
    """The most prompt tokens a request with these messages can be billed for, without a tokenizer.

    Every token of a byte-level BPE tokenizer (GPT-2's, OpenAI's cl100k and o200k, Llama 3's,
    Qwen's) covers at least one byte of the UTF-8 text, and so does every piece of a SentencePiece
    tokenizer with byte fallback, so a text's UTF-8 byte length is a true upper bound on its token
    count. (tiktoken would count exactly, but it fetches its BPE files from the internet at first
    use.) To the messages' bytes come the chat template's tokens (``TEMPLATE_TOKENS_PER_MESSAGE``
    a message, ``TEMPLATE_TOKENS_PER_REQUEST`` a request) and the JSON schema's bytes, which some
    endpoints put into the prompt. The endpoint's reported usage settles the call afterwards.
    """
    content = sum(len(str(m.get("content") or "").encode("utf-8")) + len(str(m.get("role") or "").encode("utf-8"))
                  for m in messages)
    schema = len(json.dumps(json_schema, separators=(",", ":")).encode("utf-8")) if json_schema is not None else 0
    return content + schema + TEMPLATE_TOKENS_PER_MESSAGE * len(messages) + TEMPLATE_TOKENS_PER_REQUEST


@dataclass(frozen=True)
class LLMSettings:
    """Where the model is and how to call it. The key is kept out of repr and comparisons."""

    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False, compare=False)
    model: str = DEFAULT_MODEL
    timeout_s: float = 60.0
    max_retries: int = 4
    concurrency: int = 8
    price_in_per_mtok: float | None = None  # None: the list price of the model (llm_prices.json)
    price_out_per_mtok: float | None = None
    output_mode: str = "auto"
    backoff_s: float = 1.0  # first retry waits about this long, doubling each time
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 120.0  # longest Retry-After honoured
    temperature: float = 0.0
    allow_unpriced: bool = False  # spend on a model without a known price (its calls count as $0)
    batch_discount: float | None = None  # share of the price a Batch API charges; None: the price table's
    # How long the provider keeps a batch's files if Lightfoot never deletes them (a crash, a lost
    # store): asked of it on upload and batch creation; 0 asks nothing (a provider that refuses it).
    batch_file_ttl_s: int = 3 * 24 * 3600

    def __post_init__(self) -> None:
        if self.output_mode not in ("auto", *OUTPUT_MODES):
            raise ValueError(f"output_mode must be auto, {', '.join(OUTPUT_MODES)}; got {self.output_mode!r}")
        if not self.model or not self.model.strip():
            raise ValueError("model must be a non-empty name")
        for name in ("timeout_s", "backoff_max_s", "retry_after_max_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.backoff_s < 0:
            raise ValueError(f"backoff_s must not be negative, got {self.backoff_s}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must not be negative, got {self.max_retries}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        for name in ("price_in_per_mtok", "price_out_per_mtok"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        if self.batch_discount is not None and not 0 <= self.batch_discount <= 1:
            raise ValueError(f"batch_discount must be between 0 and 1, got {self.batch_discount}")
        if self.batch_file_ttl_s and not BATCH_FILE_TTL_RANGE[0] <= self.batch_file_ttl_s <= BATCH_FILE_TTL_RANGE[1]:
            raise ValueError(f"batch_file_ttl_s must be 0 or between {BATCH_FILE_TTL_RANGE[0]:,} (the batch's 24 h "
                             f"window and a day to collect it) and {BATCH_FILE_TTL_RANGE[1]:,} seconds (30 days), "
                             f"got {self.batch_file_ttl_s}")

    @classmethod
    def from_env(cls, environ: dict | None = None, **overrides) -> LLMSettings:
        """Settings from the environment (settings.llm_environment); keyword arguments win over it."""
        return cls(**{**llm_environment(environ), **overrides})

    @classmethod
    def for_extraction(cls) -> LLMSettings:
        """The environment's settings for an extractor: one it cannot use is an LLMError of kind
        ``config`` (a one-line error on the command line)."""
        try:
            return cls.from_env()
        except ValueError as err:
            raise LLMError("config", str(err)) from None

    def prices(self) -> tuple[float, float, str]:
        """USD per million input and output tokens, and where the figures come from."""
        listed = list_price(self.model)
        price_in, price_out = self.price_in_per_mtok, self.price_out_per_mtok
        if price_in is not None and price_out is not None:
            return price_in, price_out, "configured"
        if listed is None:  # one price configured and no list price: the other side would be free
            return price_in or 0.0, price_out or 0.0, "unpriced"
        return (
            listed[0] if price_in is None else price_in,
            listed[1] if price_out is None else price_out,
            "list" if price_in is None and price_out is None else "configured",
        )

    def batch_prices(self) -> tuple[float, float, str]:
        """USD per million input and output tokens of an answer taken through a Batch API: the
        prices of :meth:`prices` times the batch discount, and where they come from (``…+batch``)."""
        price_in, price_out, source = self.prices()
        share = batch_discount() if self.batch_discount is None else self.batch_discount
        return price_in * share, price_out * share, f"{source}+batch"

    def price_state(self) -> str:
        """``priced`` (configured or list prices for both sides), ``unpriced-allowed`` (no known
        price, spent on by the operator's choice) or ``refused``."""
        if self.prices()[2] != "unpriced":
            return PRICED
        return UNPRICED_ALLOWED if self.allow_unpriced else REFUSED

    def price_status(self) -> dict:
        """The price state, the prices and where they come from (for a status page: neither the
        endpoint nor the model)."""
        price_in, price_out, source = self.prices()
        return {"state": self.price_state(), "source": source, "price_in_per_mtok": price_in,
                "price_out_per_mtok": price_out}

    def require_price(self, what: str) -> None:
        """Raise :class:`UnpricedModelError` (one line, no endpoint) when ``what`` may not be paid for."""
        if self.price_state() == REFUSED:
            raise UnpricedModelError(f"{what} refused: the model {self.model!r} has no known price")

    def worst_case_usd(self, messages: list[dict], max_tokens: int, json_schema: dict | None = None) -> float:
        """The most a call can be billed, in USD, by an endpoint that keeps to ``max_tokens``: the
        prompt at :func:`prompt_token_bound` and a reply of ``max_tokens``, at :meth:`prices`."""
        price_in, price_out, _ = self.prices()
        return (prompt_token_bound(messages, json_schema) * price_in + max_tokens * price_out) / 1e6

    def endpoint(self) -> str:
        """The base URL with any credentials in it removed, for messages."""
        return _redact_url(self.base_url) if self.base_url else "the OpenAI API"


@dataclass
class Completion:
    """One answer: its text, what it cost in tokens, and how it was obtained."""

    text: str
    tokens_in: int
    tokens_out: int
    attempts: int
    seconds: float
    finish_reason: str | None
    mode: str = "prompt"  # the output mode that produced it
    usage_reported: bool = True  # False: the endpoint sent no usage; tokens are estimated

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def retries(self) -> int:
        """Requests sent again for this answer after its first (``attempts`` counts them all)."""
        return max(self.attempts - 1, 0)


def _redact_url(url: str) -> str:
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.split('@', 1)[1]}" if rest else url


def retry_after_seconds(headers) -> float | None:
    """The wait a 429 or 503 asks for: ``retry-after-ms``, else ``Retry-After`` (seconds or a date)."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class LLMClient:
    """Chat completions with retries, output-mode fallback, timeouts and token accounting.

    Thread-safe: one client serves a pool of extraction workers.
    """

    _calls_started = 0  # calls to complete() by every client of this process
    _calls_lock = threading.Lock()

    def __init__(self, settings: LLMSettings, client=None, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        self._sleep = sleep
        self._lock = threading.Lock()
        # Index into OUTPUT_MODES of the richest mode that the endpoint is known to accept.
        self._mode_floor = 0 if settings.output_mode == "auto" else OUTPUT_MODES.index(settings.output_mode)
        if client is None:
            import openai

            if not settings.api_key and not settings.base_url:
                raise LLMError("config", "no endpoint configured: set OPENAI_BASE_URL (and OPENAI_API_KEY if it needs one)")
            client = openai.OpenAI(
                base_url=settings.base_url,
                api_key=settings.api_key or _NO_KEY,
                timeout=settings.timeout_s,
                max_retries=0,
            )
        elif hasattr(client, "with_options"):
            client = client.with_options(max_retries=0)  # a retry it made itself would go uncounted
        self._client = client

    def __repr__(self) -> str:
        return f"LLMClient(model={self.settings.model!r}, endpoint={self.settings.endpoint()!r})"

    @classmethod
    def calls_started(cls) -> int:
        """Calls to :meth:`complete` so far by every client of this process; read before and after
        a step, it counts the model calls the step made (the deletion audit checks there are none)."""
        return cls._calls_started

    @property
    def mode(self) -> str:
        """The output mode a call with a JSON schema will try first."""
        return OUTPUT_MODES[self._mode_floor]

    def complete(
        self, messages: list[dict], *, json_schema: dict | None = None, max_tokens: int | None = None
    ) -> Completion:
        """One answer to ``messages``, retried on transient failures; raises :class:`LLMError`."""
        with LLMClient._calls_lock:
            LLMClient._calls_started += 1
        started = time.monotonic()
        attempts = 0
        failures = 0  # transient failures so far (each one waits, then retries)
        fallback_from: int | None = None  # the mode floor before an unconfirmed fallback
        mode_index = self._mode_floor if json_schema is not None else len(OUTPUT_MODES) - 1
        while True:
            mode = OUTPUT_MODES[mode_index]
            attempts += 1
            try:
                response = self._request(messages, mode, json_schema, max_tokens)
            except LLMError as err:
                err.attempts = attempts
                can_fall_back = (
                    err.kind == "bad_request" and self.settings.output_mode == "auto"
                    and json_schema is not None and mode_index < len(OUTPUT_MODES) - 1
                )
                if can_fall_back:
                    log.info("endpoint refused %s output (%s); trying %s", mode, err.status, OUTPUT_MODES[mode_index + 1])
                    if fallback_from is None:
                        fallback_from = mode_index
                    mode_index += 1
                    continue
                if err.kind not in RETRYABLE_KINDS or failures >= self.settings.max_retries:
                    raise
                wait = self._backoff(failures, err)
                failures += 1
                # The kind and status only: the endpoint's reply may quote the prompt, and so a passage,
                # and a log line outlives the erasure of that passage's document.
                log.warning("model call failed (%s%s); retry %d of %d in %.2fs", err.kind,
                            f", HTTP {err.status}" if err.status else "", failures, self.settings.max_retries, wait)
                self._sleep(wait)
                continue
            if fallback_from is not None:
                with self._lock:
                    self._mode_floor = max(self._mode_floor, mode_index)
            return self._completion(response, messages, attempts, time.monotonic() - started, mode,
                                    json_schema if mode != "prompt" else None, max_tokens)

    # -- internals -------------------------------------------------------------------------

    def _backoff(self, failures: int, err: LLMError) -> float:
        asked = err.retry_after
        if asked is not None:
            return min(asked, self.settings.retry_after_max_s)
        ceiling = min(self.settings.backoff_max_s, self.settings.backoff_s * (2 ** failures))
        return ceiling * (0.5 + random.random() / 2)  # jitter keeps parallel workers apart

    def _request(self, messages: list[dict], mode: str, json_schema: dict | None, max_tokens: int | None):
        import openai

        kwargs: dict = {"model": self.settings.model, "messages": messages, "temperature": self.settings.temperature}
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        if json_schema is not None and mode == "json_schema":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": str(json_schema.get("title") or "answer"), "schema": json_schema, "strict": True},
            }
        elif json_schema is not None and mode == "json_object":
            kwargs["response_format"] = {"type": "json_object"}
        try:
            return self._client.chat.completions.create(**kwargs)
        except openai.APITimeoutError:
            raise LLMError("timeout", f"no answer within {self.settings.timeout_s:g}s") from None
        except openai.APIConnectionError as err:
            raise LLMError("unreachable", f"cannot reach {self.settings.endpoint()}: {self._scrub(err)}") from None
        except openai.APIStatusError as err:
            raise self._status_error(err) from None
        except openai.APIError as err:  # a response the client could not read
            raise LLMError("bad_response", self._scrub(err)) from None

    def _status_error(self, err) -> LLMError:
        status = int(err.status_code)
        detail = self._scrub(getattr(err, "message", "") or err)[:300]
        if status == 429:
            kind = "rate_limited"
        elif status >= 500:
            kind = "server_error"
        elif status in (401, 403):
            kind = "auth"
        elif status == 404:
            kind = "not_found"
        else:
            kind = "bad_request"
        error = LLMError(kind, f"HTTP {status} from {self.settings.endpoint()}: {detail}", status=status)
        if status in (429, 503):
            error.retry_after = retry_after_seconds(getattr(err.response, "headers", None))
        return error

    def _scrub(self, value: object) -> str:
        text = str(value)
        key = self.settings.api_key
        if key and len(key) >= 4:
            text = text.replace(key, "***")
        return text

    def _completion(self, response, messages: list[dict], attempts: int, seconds: float, mode: str,
                    json_schema: dict | None, max_tokens: int | None) -> Completion:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise LLMError("bad_response", "the answer has no choices", attempts=attempts)
        choice = choices[0]
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None) or ""
        usage = getattr(response, "usage", None)
        tokens_in = getattr(usage, "prompt_tokens", None) if usage is not None else None
        tokens_out = getattr(usage, "completion_tokens", None) if usage is not None else None
        reported = tokens_in is not None and tokens_out is not None
        if tokens_in is None or tokens_out is None:  # not reported
            # No usage from the endpoint: charge the most the call could have been billed (what a
            # budget held for it), never less; the ledger marks it as estimated.
            tokens_in = prompt_token_bound(messages, json_schema)
            tokens_out = max_tokens if max_tokens is not None else len(text.encode("utf-8")) + 1
        return Completion(
            text=text, tokens_in=int(tokens_in), tokens_out=int(tokens_out), attempts=attempts, seconds=seconds,
            finish_reason=getattr(choice, "finish_reason", None), mode=mode, usage_reported=reported,
        )
