"""The extraction cache: a model's answer for a passage text, kept so it is paid for once.

Keyed by model + prompt hash + schema hash + passage text hash. It is a journal table (append-only,
read at its latest version, outside the store's commits), so extraction can write to it while it
runs and a crashed run loses no answer it paid for. Erasing documents purges their entries.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Iterable

import polars as pl
import pyarrow as pa

from lightfoot_pipeline.store.tables import TableSpec, register, with_buckets

EXTRACTION_CACHE = register(
    TableSpec(
        "extraction_cache",
        pa.schema([
            pa.field("cache_key", pa.string()),
            pa.field("model", pa.string()),
            pa.field("prompt_hash", pa.string()),
            pa.field("schema_hash", pa.string()),
            pa.field("text_hash", pa.string()),
            pa.field("output", pa.string()),
            pa.field("tokens_in", pa.int64()),
            pa.field("tokens_out", pa.int64()),
            pa.field("created_at", pa.timestamp("us", tz="UTC")),
        ]),
        key=("cache_key",), bucket_by="cache_key", per_document=False, fingerprinted=False,
        description="Model answers by (model, prompt, schema, passage text): each paid for once.",
    )
)


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
        now = dt.datetime.now(dt.timezone.utc)
        frame = pl.DataFrame(
            [{**r, "created_at": r.get("created_at") or now} for r in rows],
            schema=pl.from_arrow(EXTRACTION_CACHE.schema.empty_table()).schema,
        )
        self.store.append_journal(EXTRACTION_CACHE.name, with_buckets(frame, EXTRACTION_CACHE, self.store.n_buckets))

    def purge_except(self, keep_keys: Iterable[str]) -> int:
        """Delete every entry whose key is not in keep_keys (the keys of live passages)."""
        keep = set(keep_keys)
        stored = self.store.read_journal(EXTRACTION_CACHE.name).get_column("cache_key").unique().to_list()
        stale = sorted(k for k in stored if k not in keep)
        return self.store.delete_from_journal(EXTRACTION_CACHE.name, "cache_key", stale)
