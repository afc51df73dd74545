"""The index's parameters, and the environment Lightfoot reads, in one place.

Every value of :class:`IndexSettings` is part of what an index *is*: two stores built with
different settings are different indexes, so the settings that shape the tables are recorded in
the store's manifest and checked when a store is reopened.

Every environment variable the engine and its Dagster layer read is read here, each by one
function below (:data:`VARIABLES` names them all); the README's settings table gives each one's
default and meaning. A value that cannot be used raises :class:`SettingsError`, naming the variable.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping

from lightfoot_pipeline.errors import LightfootError

# Paper §3.2: forms whose names have cosine >= 0.92 are one entity; entities with a member-name pair
# at cosine >= 0.80 get a synonym edge. Name links are stored down to the lower threshold.
ENTITY_THRESHOLD = 0.92
SYNONYM_THRESHOLD = 0.80

GENERIC_TYPE = "entity"
DEFAULT_ENTITY_TYPES = (
    "person",
    "organization",
    "location",
    "event",
    "work",
    "date",
    "number",
    "concept",
    "product",
    GENERIC_TYPE,
)

# Caps on one passage's extraction record, far above what a real one carries (the extraction
# prompt asks for at most 12 entities and 12 facts; the bundled sample's largest recorded record
# has 42 and 57). A record past a cap keeps its first entities or facts and records the drop.
MAX_ENTITIES_PER_PASSAGE = 100
MAX_FACTS_PER_PASSAGE = 100

DEFAULT_STORE = ".lightfoot/store"

# The name links' candidate filter (index/lsh.py): names are compared only when their signs on
# LSH_ROWS seeded random hyperplanes agree in at least one of LSH_BANDS bands. Chosen with
# benchmarks/link_recall.py: at least 99.5% of the exhaustive pairs at 0.80 and 0.92 are found on the
# bundled sample (MiniLM) and on a 30k-passage synthetic corpus, with the fewest candidates.
LSH_BANDS = 200
LSH_ROWS = 16
LSH_SEED = 0


@dataclass(frozen=True)
class Banding:
    """Seeded random-hyperplane LSH: ``bands`` keys of ``rows`` sign bits each, for one seed."""

    bands: int = LSH_BANDS
    rows: int = LSH_ROWS
    seed: int = LSH_SEED

    def __post_init__(self) -> None:
        for name, low, high in (("bands", 1, 4096), ("rows", 1, 62), ("seed", 0, 2**32 - 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ValueError(f"LSH {name} must be a whole number from {low} to {high}, got {value!r}")


@dataclass(frozen=True)
class IndexSettings:
    """Parameters that determine the content of the index tables."""

    entity_threshold: float = ENTITY_THRESHOLD
    synonym_threshold: float = SYNONYM_THRESHOLD
    # Passages longer than this many characters are split at paragraph boundaries.
    max_passage_chars: int = 4000
    # Rows of the blocked similarity products: bounds the memory of link computation to
    # block_rows x block_cols float32 values (64 MiB at the defaults).
    block_rows: int = 2048
    block_cols: int = 8192
    entity_types: tuple[str, ...] = field(default=DEFAULT_ENTITY_TYPES)
    # Applied when an extraction record is validated, so they shape what is stored as the record,
    # like entity_types, rather than what is derived from it; not part of shape_of_index.
    max_entities_per_passage: int = MAX_ENTITIES_PER_PASSAGE
    max_facts_per_passage: int = MAX_FACTS_PER_PASSAGE
    # The name links' candidate filter (see Banding); lsh_bands = 0 compares every pair of names.
    lsh_bands: int = LSH_BANDS
    lsh_rows: int = LSH_ROWS
    lsh_seed: int = LSH_SEED
    # Two names link only when they carry the same numbers (index/numbers.py).
    numbers_must_agree: bool = True

    def __post_init__(self) -> None:
        if self.lsh_bands != 0:
            Banding(self.lsh_bands, self.lsh_rows, self.lsh_seed)  # raises on a value out of range
        if not isinstance(self.numbers_must_agree, bool):
            raise ValueError(f"numbers_must_agree must be true or false, got {self.numbers_must_agree!r}")
        for name in ("max_entities_per_passage", "max_facts_per_passage"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number from 1, got {value!r}")
        if not 0.0 < self.synonym_threshold <= self.entity_threshold <= 1.0:
            raise ValueError(
                "thresholds must satisfy 0 < synonym_threshold <= entity_threshold <= 1, got "
                f"{self.synonym_threshold} and {self.entity_threshold}"
            )

    def shape_of_index(self) -> dict:
        """The settings that change table contents (stored in the manifest)."""
        return {
            "entity_threshold": self.entity_threshold,
            "synonym_threshold": self.synonym_threshold,
            "max_passage_chars": self.max_passage_chars,
            "lsh_bands": self.lsh_bands,
            "lsh_rows": self.lsh_rows,
            "lsh_seed": self.lsh_seed,
            "numbers_must_agree": self.numbers_must_agree,
        }

    @property
    def banding(self) -> Banding | None:
        """The links' candidate filter; None when every pair of names is compared."""
        return Banding(self.lsh_bands, self.lsh_rows, self.lsh_seed) if self.lsh_bands else None

    def as_dict(self) -> dict:
        return asdict(self)


# Chunking of files (lightfoot sync); the README ("Indexing a folder") says why these defaults.
CHUNK_TOKENS = 200
CHUNK_OVERLAP_TOKENS = 30
MAX_PASSAGES_PER_DOCUMENT = 2000
MAX_FILE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ChunkSettings:
    """How files are cut into passages, and the limits past which a file is refused."""

    tokens: int = CHUNK_TOKENS  # a passage's budget, in word and punctuation tokens
    overlap: int = CHUNK_OVERLAP_TOKENS  # tokens of whole sentences repeated from the passage before
    max_passages: int = MAX_PASSAGES_PER_DOCUMENT
    max_file_bytes: int = MAX_FILE_BYTES

    def __post_init__(self) -> None:
        for name in ("tokens", "max_passages", "max_file_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SettingsError(f"chunking: {name} must be a whole number from 1, got {value!r}")
        if not isinstance(self.overlap, int) or not 0 <= self.overlap < self.tokens:
            raise SettingsError(f"chunking: overlap must be a whole number from 0 to below tokens ({self.tokens}), "
                                f"got {self.overlap!r}")

    def label(self) -> str:
        """What decides a file's passages and whether it is refused, recorded with it: a sync with
        other settings reads every file again."""
        return (f"tokens={self.tokens},overlap={self.overlap},max_passages={self.max_passages},"
                f"max_file_bytes={self.max_file_bytes}")


# -- the environment ---------------------------------------------------------------------------

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
RELINK_EXECUTOR_ENV = "LIGHTFOOT_RELINK_EXECUTOR"
SERVE_TOKEN_ENV = "LIGHTFOOT_SERVE_TOKEN"
SERVE_TOKENS_FILE_ENV = "LIGHTFOOT_SERVE_TOKENS_FILE"
SERVE_ANSWERS_ENV = "LIGHTFOOT_SERVE_ANSWERS"
SERVE_BUDGET_ENV = "LIGHTFOOT_SERVE_ANSWER_BUDGET_USD"
# The deep query mode (serving/deep): DeepSettings field, variable, type of its value.
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
}
# Object-store credentials and endpoint, passed to the store's libraries under the same names.
OBJECT_STORE_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP",
)
# Read by the Hugging Face libraries; Lightfoot sets them to 1 where they are unset.
MODEL_HUB_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")

VARIABLES: tuple[str, ...] = (
    STORE_ENV, EMBEDDER_ENV, RERANKER_ENV, EXTRACTOR_ENV, EXTRACTION_SLOTS_ENV, DOCUMENT_INBOX_ENV, ERASURE_INBOX_ENV,
    RETENTION_POLICY_ENV, SYNC_SOURCE_ENV, LINK_PIECE_SIZE_ENV, RELINK_EXECUTOR_ENV,
    *(name for names, _ in LLM_VARIABLES.values() for name in names),
    SERVE_TOKEN_ENV, SERVE_TOKENS_FILE_ENV, SERVE_ANSWERS_ENV, SERVE_BUDGET_ENV,
    *(name for name, _ in DEEP_VARIABLES.values()),
    *OBJECT_STORE_VARIABLES, *MODEL_HUB_VARIABLES,
)
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class SettingsError(LightfootError, ValueError):
    """A setting (an environment variable, an option) whose value cannot be used."""


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
    text = _read(LINK_PIECE_SIZE_ENV)
    size = LINK_PIECE_SIZE if text is None else _number(LINK_PIECE_SIZE_ENV, text, int)
    if size < 1:
        raise SettingsError(f"{LINK_PIECE_SIZE_ENV}={size}: a piece pairs at least one name on one band",
                            hint=f"set {LINK_PIECE_SIZE_ENV} to 1 or more, or unset it ({LINK_PIECE_SIZE:,})")
    return size


def relink_executor() -> str:
    """Where the relink job's steps run: ``$LIGHTFOOT_RELINK_EXECUTOR`` (``multiprocess``, one process
    a step on this machine, or ``k8s``, one Kubernetes Job a step), else ``multiprocess``."""
    value = (_read(RELINK_EXECUTOR_ENV) or "multiprocess").casefold()
    if value not in RELINK_EXECUTORS:
        raise SettingsError(f"{RELINK_EXECUTOR_ENV}={value!r}: expected multiprocess or k8s",
                            hint=f"set {RELINK_EXECUTOR_ENV} to one of those, or unset it (multiprocess)")
    return value


def llm_environment(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """The language model's settings that the environment sets, by LLMSettings field, converted."""
    values: dict[str, object] = {}
    for field_name, (names, kind) in LLM_VARIABLES.items():
        for name in names:
            text = _read(name, environ)
            if text is not None:
                values[field_name] = text if kind is str else _number(name, text, kind)
                break
    return values


def serve_tokens(environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """The query service's token (``$LIGHTFOOT_SERVE_TOKEN``) and tokens file
    (``$LIGHTFOOT_SERVE_TOKENS_FILE``), each None when unset."""
    return _read(SERVE_TOKEN_ENV, environ), _read(SERVE_TOKENS_FILE_ENV, environ)


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
