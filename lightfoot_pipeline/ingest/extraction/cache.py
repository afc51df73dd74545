"""The extraction cache: a model's answer for a passage text, kept so it is paid for once.

Keyed by model + prompt hash + schema hash + passage text hash. It is a journal table (append-only,
read at its latest version, outside the store's commits), so extraction writes each answer to it
as it arrives and a crashed run loses no answer it has taken (see openai_extractor.py). Those
appends leave small files; :meth:`ExtractionCache.compact` rewrites them into one per bucket.
Erasing documents purges their entries, and the claims on them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable

import polars as pl
from deltalake.exceptions import CommitFailedError

from lightfoot_pipeline.ingest.extraction.claims import EXTRACTION_CLAIMS
from lightfoot_pipeline.store.log import ConcurrentCommitError
from lightfoot_pipeline.store.tables import EXTRACTION_CACHE, with_buckets

# A purge that meets a compaction of the journal (the only other rewrite of it) reads again and
# tries again, this many times.
PURGE_TRIES = 5


def cache_key_for(model: str, prompt_hash: str, schema_hash: str, text_hash: str) -> str:
    digest = hashlib.sha256(f"{model}\x00{prompt_hash}\x00{schema_hash}\x00{text_hash}".encode()).hexdigest()
    return f"x-{digest[:40]}"


class ExtractionCache:
    def __init__(self, store) -> None:
        self.store = store

    def lookup(self, keys: Iterable[str]) -> dict[str, dict]:
        wanted = sorted(set(keys))
        if not wanted:
            return {}
        rows = self.store.read_journal(EXTRACTION_CACHE.name).filter(pl.col("cache_key").is_in(wanted))
        # Two writers may have cached the same key; the earliest answer wins, deterministically.
        rows = rows.sort(["cache_key", "created_at", "output"]).unique("cache_key", keep="first")
        return {r["cache_key"]: r for r in rows.iter_rows(named=True)}

    def put(self, rows: list[dict]) -> None:
        if not rows:
            return
        now = dt.datetime.now(dt.UTC)
        frame = pl.DataFrame(
            [{**r, "created_at": r.get("created_at") or now} for r in rows],
            schema=pl.from_arrow(EXTRACTION_CACHE.schema.empty_table()).schema,
        )
        self.store.append_journal(EXTRACTION_CACHE.name, with_buckets(frame, EXTRACTION_CACHE, self.store.n_buckets))

    def compact(self) -> int:
        """Rewrite the small files that appends left into a few larger ones; the files compacted."""
        return self.store.compact_journal(EXTRACTION_CACHE.name)

    def purge_except(self, keep_keys: Iterable[str]) -> int:
        """Delete every entry whose key is not in keep_keys (the keys of live passages), and the
        claims on those keys (see claims.py); the cache entries deleted."""
        keep = set(keep_keys)
        purged = self._purge(EXTRACTION_CACHE.name, keep)
        self._purge(EXTRACTION_CLAIMS.name, keep)
        return purged

    def _purge(self, journal: str, keep: set[str]) -> int:
        for attempt in range(PURGE_TRIES):
            stored = self.store.read_journal(journal, ["cache_key"]).get_column("cache_key").unique().to_list()
            stale = sorted(k for k in stored if k not in keep)
            if not stale:
                return 0
            try:
                return self.store.delete_from_journal(journal, "cache_key", stale)
            except CommitFailedError:
                # Another writer (a compaction, a claim) changed the files this deletion read;
                # entries it already deleted stay deleted, so the next try deletes what is left.
                if attempt == PURGE_TRIES - 1:
                    raise ConcurrentCommitError(
                        f"the journal {journal} kept being rewritten while purging it ({PURGE_TRIES} tries); "
                        "run the erasure again"
                    ) from None
        return 0
