"""The index's parameters, in one place.

Every value here is part of what an index *is*: two stores built with different settings are
different indexes, so the settings that shape the tables are recorded in the store's manifest and
checked when a store is reopened.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

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
STORE_ENV = "LIGHTFOOT_STORE"


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

    def __post_init__(self) -> None:
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
        }

    def as_dict(self) -> dict:
        return asdict(self)


def resolve_store_uri(uri: str | None = None) -> str:
    """The store root: the argument, else ``$LIGHTFOOT_STORE``, else ``.lightfoot/store`` here."""
    chosen = uri or os.environ.get(STORE_ENV) or DEFAULT_STORE
    if "://" in chosen:
        return chosen.rstrip("/")
    return str(Path(chosen).expanduser().resolve())
