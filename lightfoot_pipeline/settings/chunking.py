"""How files are cut into passages (``lightfoot sync``), and the limits past which a file is refused."""

from __future__ import annotations

from dataclasses import dataclass

from lightfoot_pipeline.settings.errors import SettingsError

# Chunking of files (lightfoot sync); the README ("Indexing a folder") says why these defaults.
CHUNK_TOKENS = 200
CHUNK_OVERLAP_TOKENS = 30
MAX_PASSAGES_PER_DOCUMENT = 2000
MAX_FILE_BYTES = 64 * 1024 * 1024
# The most a limit may allow: a file is read whole into memory, so a larger limit is a mistake.
MAX_FILE_BYTES_CEILING = 1024 * 1024 * 1024
MAX_PASSAGES_CEILING = 1_000_000


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
        if self.max_file_bytes > MAX_FILE_BYTES_CEILING:
            raise SettingsError(f"chunking: max_file_bytes is {self.max_file_bytes:,}, over the ceiling of "
                                f"{MAX_FILE_BYTES_CEILING:,} (1 GiB): a file is read whole into memory")
        if self.max_passages > MAX_PASSAGES_CEILING:
            raise SettingsError(f"chunking: max_passages is {self.max_passages:,}, over the ceiling of "
                                f"{MAX_PASSAGES_CEILING:,}")
        if not isinstance(self.overlap, int) or not 0 <= self.overlap < self.tokens:
            raise SettingsError(f"chunking: overlap must be a whole number from 0 to below tokens ({self.tokens}), "
                                f"got {self.overlap!r}")

    def label(self) -> str:
        """What decides a file's passages and whether it is refused, recorded with it: a sync with
        other settings reads every file again."""
        return (f"tokens={self.tokens},overlap={self.overlap},max_passages={self.max_passages},"
                f"max_file_bytes={self.max_file_bytes}")
