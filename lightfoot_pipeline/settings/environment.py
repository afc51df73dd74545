"""The environment Lightfoot reads, in one place.

Every environment variable the engine and its Dagster layer read is read here, each by one
function below (:data:`VARIABLES` names them all); the README's settings table gives each one's
default and meaning. A value that cannot be used raises :class:`SettingsError`, naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from lightfoot_pipeline.settings.errors import SettingsError

DEFAULT_STORE = ".lightfoot/store"
# `lightfoot serve --poll`: seconds between a service's reads of the snapshot pointer and the store log
DEFAULT_POLL_S = 2.0

STORE_ENV = "LIGHTFOOT_STORE"
EMBEDDER_ENV = "LIGHTFOOT_EMBEDDER"
RERANKER_ENV = "LIGHTFOOT_RERANKER"
EXTRACTOR_ENV = "LIGHTFOOT_EXTRACTOR"
EXTRACTION_SLOTS_ENV = "LIGHTFOOT_EXTRACTION_SLOTS"
DOCUMENT_INBOX_ENV = "LIGHTFOOT_INBOX"
ERASURE_INBOX_ENV = "LIGHTFOOT_ERASURE_INBOX"
RETENTION_POLICY_ENV = "LIGHTFOOT_RETENTION_POLICY"
SYNC_SOURCE_ENV = "LIGHTFOOT_SYNC_SOURCE"
LINK_PIECE_SIZE_ENV = "LIGHTFOOT_LINK_PIECE_SIZE"
DELETION_PIECE_ENV = "LIGHTFOOT_DELETION_PIECE"
RELINK_BATCH_ENV = "LIGHTFOOT_RELINK_BATCH"
RELINK_EXECUTOR_ENV = "LIGHTFOOT_RELINK_EXECUTOR"
INT8_KERNEL_ENV = "LIGHTFOOT_INT8_KERNEL"  # the fact seeding's int8 product (retrieval/seeding.py)
SERVE_TOKEN_ENV = "LIGHTFOOT_SERVE_TOKEN"
SERVE_TOKENS_FILE_ENV = "LIGHTFOOT_SERVE_TOKENS_FILE"
SERVE_TOKEN_GROUPS_ENV = "LIGHTFOOT_SERVE_TOKEN_GROUPS"  # the reader groups of LIGHTFOOT_SERVE_TOKEN
SERVE_ANSWERS_ENV = "LIGHTFOOT_SERVE_ANSWERS"
SERVE_BUDGET_ENV = "LIGHTFOOT_SERVE_ANSWER_BUDGET_USD"
MCP_TOKEN_ENV = "LIGHTFOOT_MCP_TOKEN"  # whom `lightfoot mcp` (stdio) answers as: a token of the service's
PAGE_URL_ENV = "LIGHTFOOT_PAGE_URL"
DAGSTER_URL_ENV = "LIGHTFOOT_DAGSTER_URL"
DEFAULT_READERS_ENV = "LIGHTFOOT_DEFAULT_READERS"
# The deep query mode (retrieval/deep): DeepSettings field, variable, type of its value.
DEEP_VARIABLES: dict[str, tuple[str, type]] = {
    "max_steps": ("LIGHTFOOT_DEEP_MAX_STEPS", int),
    "passages": ("LIGHTFOOT_DEEP_PASSAGES", int),
    "question_budget_usd": ("LIGHTFOOT_DEEP_QUESTION_BUDGET_USD", float),
}
# The language model's settings (LLMSettings fields): the variables that set each, the first one
# set wins, and the type of its value.
LLM_VARIABLES: dict[str, tuple[tuple[str, ...], type]] = {
    "base_url": (("LIGHTFOOT_LLM_BASE_URL", "OPENAI_BASE_URL"), str),
    "api_key": (("LIGHTFOOT_LLM_API_KEY", "OPENAI_API_KEY"), str),
    "model": (("LIGHTFOOT_LLM_MODEL", "OPENAI_MODEL"), str),
    "timeout_s": (("LIGHTFOOT_LLM_TIMEOUT_S",), float),
    "max_retries": (("LIGHTFOOT_LLM_MAX_RETRIES",), int),
    "concurrency": (("LIGHTFOOT_LLM_CONCURRENCY",), int),
    "price_in_per_mtok": (("LIGHTFOOT_LLM_PRICE_IN",), float),
    "price_out_per_mtok": (("LIGHTFOOT_LLM_PRICE_OUT",), float),
    "output_mode": (("LIGHTFOOT_LLM_OUTPUT_MODE",), str),
    "backoff_s": (("LIGHTFOOT_LLM_BACKOFF_S",), float),
    "backoff_max_s": (("LIGHTFOOT_LLM_BACKOFF_MAX_S",), float),
    "temperature": (("LIGHTFOOT_LLM_TEMPERATURE",), float),
    "allow_unpriced": (("LIGHTFOOT_LLM_ALLOW_UNPRICED",), bool),
    "batch_discount": (("LIGHTFOOT_LLM_BATCH_DISCOUNT",), float),
    "batch_file_ttl_s": (("LIGHTFOOT_LLM_BATCH_FILE_TTL_S",), int),
}
# Object-store credentials and endpoint, passed to the store's libraries under the same names.
OBJECT_STORE_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP",
)
# Read by the Hugging Face libraries; Lightfoot sets them to 1 where they are unset.
MODEL_HUB_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")

VARIABLES: tuple[str, ...] = (
    STORE_ENV, EMBEDDER_ENV, RERANKER_ENV, EXTRACTOR_ENV, DEFAULT_READERS_ENV, EXTRACTION_SLOTS_ENV, DOCUMENT_INBOX_ENV, ERASURE_INBOX_ENV,
    RETENTION_POLICY_ENV, SYNC_SOURCE_ENV, LINK_PIECE_SIZE_ENV, DELETION_PIECE_ENV, RELINK_BATCH_ENV, RELINK_EXECUTOR_ENV,
    INT8_KERNEL_ENV,
    *(name for names, _ in LLM_VARIABLES.values() for name in names),
    SERVE_TOKEN_ENV, SERVE_TOKENS_FILE_ENV, SERVE_TOKEN_GROUPS_ENV, SERVE_ANSWERS_ENV, SERVE_BUDGET_ENV, MCP_TOKEN_ENV, PAGE_URL_ENV,
    DAGSTER_URL_ENV, *(name for name, _ in DEEP_VARIABLES.values()),
    *OBJECT_STORE_VARIABLES, *MODEL_HUB_VARIABLES,
)
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _read(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """A variable's value without surrounding blanks; None when it is unset or blank."""
    if name not in VARIABLES:
        raise KeyError(f"{name} is not one of the variables settings.VARIABLES lists")
    value = (os.environ if environ is None else environ).get(name)
    return value.strip() if value is not None and value.strip() else None


def _number(name: str, text: str, kind: type):
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise SettingsError(f"{name}={text!r} is not {what}",
                            hint=f"set {name} to {what}, or unset it for the default") from None


def _flag(name: str, text: str) -> bool:
    value = text.casefold()
    if value not in _TRUE + _FALSE:
        raise SettingsError(f"{name}={text!r}: expected 1/true/yes/on or 0/false/no/off",
                            hint=f"set {name} to one of those, or unset it")
    return value in _TRUE


def is_set(name: str) -> bool:
    """Whether a variable has a value (the Dagster layer passes a secret on as an EnvVar only then)."""
    return _read(name) is not None


def resolve_store_uri(uri: str | None = None) -> str:
    """The store root: the argument, else ``$LIGHTFOOT_STORE``, else ``.lightfoot/store`` here."""
    chosen = uri or _read(STORE_ENV) or DEFAULT_STORE
    if "://" in chosen:
        return chosen.rstrip("/")
    return str(Path(chosen).expanduser().resolve())


def embedder_spec(spec: str | None = None) -> str | None:
    """The embedder asked for: the argument, else ``$LIGHTFOOT_EMBEDDER``; None for the default."""
    return spec or _read(EMBEDDER_ENV)


def reranker_spec(spec: str | None = None) -> str | None:
    """The cross-encoder asked for: the argument, else ``$LIGHTFOOT_RERANKER``; None for the default."""
    return spec or _read(RERANKER_ENV)


def extractor_mode() -> str:
    """How the Dagster extractions asset extracts: ``$LIGHTFOOT_EXTRACTOR``, else ``auto``."""
    return _read(EXTRACTOR_ENV) or "auto"


def extraction_slots() -> int:
    """Steps that may ask the model at once across all runs (the ``lightfoot_extraction`` pool):
    ``$LIGHTFOOT_EXTRACTION_SLOTS``, else 8."""
    text = _read(EXTRACTION_SLOTS_ENV)
    slots = 8 if text is None else _number(EXTRACTION_SLOTS_ENV, text, int)
    if slots < 1:
        raise SettingsError(f"{EXTRACTION_SLOTS_ENV}={slots}: the pool needs at least one slot",
                            hint=f"set {EXTRACTION_SLOTS_ENV} to 1 or more, or unset it (8)")
    return slots


def document_inbox_uri() -> str | None:
    """Where documents are dropped for the Dagster sensor: ``$LIGHTFOOT_INBOX``, if set."""
    return _read(DOCUMENT_INBOX_ENV)


def erasure_inbox_uri() -> str | None:
    """Where erasure requests are dropped: ``$LIGHTFOOT_ERASURE_INBOX``, if set."""
    return _read(ERASURE_INBOX_ENV)


def retention_policy_path() -> str | None:
    """The retention policy file: ``$LIGHTFOOT_RETENTION_POLICY``, if set."""
    return _read(RETENTION_POLICY_ENV)


def sync_source_uri() -> str | None:
    """The folder or prefix the Dagster sensor keeps the store in sync with: ``$LIGHTFOOT_SYNC_SOURCE``, if set."""
    return _read(SYNC_SOURCE_ENV)


# Names x bands that one step of a spread link computation pairs (index/link_pieces.py): a type of
# 100,000 names on all 200 bands, about 10 s of pairing on one core (benchmarks/relink.py).
LINK_PIECE_SIZE = 20_000_000
RELINK_EXECUTORS = ("multiprocess", "k8s")


def link_piece_size() -> int:
    """Names x bands per step of the relink job and ``lightfoot migrate --pieces``:
    ``$LIGHTFOOT_LINK_PIECE_SIZE``, else 20,000,000."""
    return _count(LINK_PIECE_SIZE_ENV, LINK_PIECE_SIZE, 1, "a piece pairs at least one name on one band")


# Documents one commit of a deletion tombstones: a larger deletion is committed in pieces of this
# many, each what a fresh build of the documents left then gives, so that what a deletion holds is
# bounded by a piece, not the request. A piece reads nearly every bucket whatever its size, so a
# smaller one costs time for little memory (at 300k passages, pieces of 10,000 took 2.1 times one
# piece of 27,099, for 0.89 times its peak).
DELETION_PIECE = 50_000


def deletion_piece() -> int:
    """Documents per commit of a deletion (``lightfoot delete``, a sync's removals, the demo's):
    ``$LIGHTFOOT_DELETION_PIECE``, else 50,000."""
    return _count(DELETION_PIECE_ENV, DELETION_PIECE, 1, "a piece deletes at least one document")


# Documents per commit when the relink job's commit step derives the graph in a store of its own
# (operations/relink.py): a store of more documents is derived that many at a time, so the step holds
# a batch's rows, not the store's; 0 derives it in one transaction, as ``lightfoot migrate`` does.
RELINK_BATCH = 50_000


def relink_batch() -> int:
    """Documents per commit of the relink job's derivation: ``$LIGHTFOOT_RELINK_BATCH``, else
    50,000 (0: the whole graph in one transaction)."""
    return _count(RELINK_BATCH_ENV, RELINK_BATCH, 0, "a batch is 0 (none) or more documents")


def _count(name: str, default: int, least: int, meaning: str) -> int:
    """A whole number of at least ``least`` from the environment variable ``name``, else ``default``."""
    text = _read(name)
    size = default if text is None else _number(name, text, int)
    if size < least:
        raise SettingsError(f"{name}={size}: {meaning}", hint=f"set {name} to {least} or more, or unset it ({default:,})")
    return size


def relink_executor() -> str:
    """Where the relink job's steps run: ``$LIGHTFOOT_RELINK_EXECUTOR`` (``multiprocess``, one process
    a step on this machine, or ``k8s``, one Kubernetes Job a step), else ``multiprocess``."""
    value = (_read(RELINK_EXECUTOR_ENV) or "multiprocess").casefold()
    if value not in RELINK_EXECUTORS:
        raise SettingsError(f"{RELINK_EXECUTOR_ENV}={value!r}: expected multiprocess or k8s",
                            hint=f"set {RELINK_EXECUTOR_ENV} to one of those, or unset it (multiprocess)")
    return value


def int8_kernel_name() -> str | None:
    """The fact seeding's int8 product kernel as ``$LIGHTFOOT_INT8_KERNEL`` names it (blank: None,
    the faster one measured; retrieval/seeding.py checks the name)."""
    value = (_read(INT8_KERNEL_ENV) or "").strip()
    return value or None


def llm_environment(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """The language model's settings that the environment sets, by LLMSettings field, converted."""
    values: dict[str, object] = {}
    for field_name, (names, kind) in LLM_VARIABLES.items():
        for name in names:
            text = _read(name, environ)
            if text is not None:
                if kind is bool:
                    values[field_name] = _flag(name, text)
                else:
                    values[field_name] = text if kind is str else _number(name, text, kind)
                break
    return values


def default_readers(environ: Mapping[str, str] | None = None) -> str:
    """Who may read a document that names no readers: ``$LIGHTFOOT_DEFAULT_READERS``, ``public``
    (everyone, the default) or ``nobody`` (only principals of the operator group ``*``)."""
    value = (_read(DEFAULT_READERS_ENV, environ) or "public").casefold()
    if value not in ("public", "nobody"):
        raise SettingsError(f"{DEFAULT_READERS_ENV}={value!r}: expected public or nobody",
                            hint=f"set {DEFAULT_READERS_ENV} to public or nobody, or unset it (public)")
    return value


def serve_tokens(environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """The query service's token (``$LIGHTFOOT_SERVE_TOKEN``) and tokens file
    (``$LIGHTFOOT_SERVE_TOKENS_FILE``), each None when unset."""
    return _read(SERVE_TOKEN_ENV, environ), _read(SERVE_TOKENS_FILE_ENV, environ)


def mcp_token(environ: Mapping[str, str] | None = None) -> str | None:
    """The token ``lightfoot mcp`` answers as (``$LIGHTFOOT_MCP_TOKEN``), None when unset: checked
    against the query service's tokens (``serve_tokens``) for the principal it names."""
    return _read(MCP_TOKEN_ENV, environ)


def serve_token_groups(environ: Mapping[str, str] | None = None) -> str | None:
    """The reader groups of the query service's token (``$LIGHTFOOT_SERVE_TOKEN_GROUPS``: comma-
    separated group names, ``*`` for every document), None when unset: the public documents only."""
    return _read(SERVE_TOKEN_GROUPS_ENV, environ)


def serve_answers() -> bool:
    """Whether the query service answers with the model: ``$LIGHTFOOT_SERVE_ANSWERS``, else no."""
    value = (_read(SERVE_ANSWERS_ENV) or "0").casefold()
    if value not in _TRUE + _FALSE:
        raise SettingsError(f"{SERVE_ANSWERS_ENV}={value!r}: expected 1/true/yes/on or 0/false/no/off",
                            hint=f"set {SERVE_ANSWERS_ENV} to one of those, or unset it (answers off)")
    return value in _TRUE


def serve_answer_budget_usd() -> float | None:
    """The query service's answer budget in USD: ``$LIGHTFOOT_SERVE_ANSWER_BUDGET_USD``, if set."""
    text = _read(SERVE_BUDGET_ENV)
    return None if text is None else _number(SERVE_BUDGET_ENV, text, float)


def _base_url(name: str) -> str | None:
    """An http(s) base URL from ``name`` without its trailing slash, if set; SettingsError for a
    value that is not one (a query or fragment would not survive a path added to it)."""
    text = _read(name)
    if text is None:
        return None
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise SettingsError(f"{name}={text!r} is not an http:// or https:// base URL",
                            hint=f"set {name} to a URL such as https://host[:port][/path], or unset it")
    return text.rstrip("/")


def page_url() -> str | None:
    """Where people reach the query service's page (its external base URL): ``$LIGHTFOOT_PAGE_URL``,
    if set; links to a batch or a document on the page start with it."""
    return _base_url(PAGE_URL_ENV)


def dagster_url() -> str | None:
    """The Dagster web server's base URL: ``$LIGHTFOOT_DAGSTER_URL``, if set; the page links a
    Dagster run id to ``<url>/runs/<run id>``."""
    return _base_url(DAGSTER_URL_ENV)


def deep_environment(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """The deep query mode's settings that the environment sets, by DeepSettings field, converted."""
    values: dict[str, object] = {}
    for field_name, (name, kind) in DEEP_VARIABLES.items():
        text = _read(name, environ)
        if text is not None:
            values[field_name] = _number(name, text, kind)
    return values


def object_store_options() -> dict[str, str]:
    """Object-store credentials and endpoint from the standard AWS variables that are set."""
    return {name: value for name in OBJECT_STORE_VARIABLES if (value := _read(name)) is not None}


def keep_model_hub_offline() -> None:
    """Load models from local files only, unless ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` says otherwise."""
    for name in MODEL_HUB_VARIABLES:
        os.environ.setdefault(name, "1")
