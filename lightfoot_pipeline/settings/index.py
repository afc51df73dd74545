"""The index's parameters: every value of :class:`IndexSettings` is part of what an index *is*.

Two stores built with different settings are different indexes, so the settings that shape the
tables are recorded in the store's manifest and checked when a store is reopened.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

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
