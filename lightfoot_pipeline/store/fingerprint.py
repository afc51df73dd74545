"""An order-independent fingerprint of the index whose cost follows what changed.

Per index table, the digest of its set of rows (digests.py: the row count and an additive hash of
the rows, which composes over any split of them), plus the digest of the live names with their
stored vectors. Two stores have equal fingerprints exactly when every index table holds the same
rows and every live name the same vector, however the rows were written, batched or ordered.

**Kept per bucket.** Delta data files are immutable and their paths unique, so the digest of a
bucket is a function of the files that make it up at the table's logged version. The store keeps
the digest of every bucket it has computed, keyed by the table and those files, in
``_lightfoot/fingerprint_cache.json`` (and in the Store's memory), and a fingerprint reads only the
buckets whose files it does not find there: after deleting a document, the buckets its rows were
in. The name vectors are kept per aliases bucket (aliases are bucketed by name, so each name's rows
of every type are in one bucket), keyed by that bucket's files and the index's embedder. The cache
is only a cache: a missing, unreadable or altered file is recomputed without a word, and when it
is written, entries for files that the fingerprinted state no longer holds are dropped.
``use_cache=False`` reads every row instead and leaves the cache alone: the proof that trusts
nothing kept. A live name's vector is assumed not to change while the name is live (vectors are
computed once per model and name, and purged only when no live form uses them).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable

import numpy as np
import polars as pl
import pyarrow as pa

from lightfoot_pipeline.store.digests import (
    EMPTY,
    Fingerprint,
    TableDigest,
    combine,
    digest_by_bucket,
    digest_frame,
)
from lightfoot_pipeline.store.filesystem import open_filesystem, read_json, write_json
from lightfoot_pipeline.store.log import Manifest, StoreError
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import ALIASES, BUCKET, INDEX_TABLES, PASSAGE_SOURCES, TableSpec
from lightfoot_pipeline.store.vectors import VectorCache

__all__ = ["CACHE_FILE", "Fingerprint", "TableDigest", "digest_frame", "fingerprint"]

log = logging.getLogger(__name__)

# Tables added after fingerprints were first recorded count only when they hold rows, so a store
# that never had any keeps the fingerprint it had (an empty table and no table hold the same rows).
COUNTED_WHEN_FILLED = frozenset({PASSAGE_SOURCES.name})
NAME_VECTORS = "name_vectors"
CACHE_FILE = ("_lightfoot", "fingerprint_cache.json")
# Names the row encoding and digest; a cache written under another is ignored.
CACHE_FORMAT = "lightfoot fingerprint cache 1: blake2b-256 rows, sum mod 2^256"
ROWS, NAMES = "rows", "names"
READ_BUCKETS = 16  # buckets of a table read and digested at a time

Cache = dict[str, TableDigest]


def fingerprint(store: Store, manifest: Manifest | None = None, include_vectors: bool = True,
                use_cache: bool = True) -> Fingerprint:
    """The store's fingerprint: every index table and, optionally, the live name vectors.

    With ``use_cache`` (the default) only the buckets whose data files the cache does not know
    are read; without it every row is read and the cache is neither read nor written.
    """
    manifest = manifest or store.manifest()
    if not use_cache:
        return _fingerprint_every_row(store, manifest, include_vectors)
    known = _load_cache(store)
    used: Cache = {}
    tables = {spec.name: _table_digest(store, manifest, spec, known, used) for spec in INDEX_TABLES}
    if include_vectors:
        tables[NAME_VECTORS] = _names_digest(store, manifest, known, used)
    else:  # the name entries stay valid: keep them
        used.update({key: entry for key, entry in known.items() if key.startswith(NAMES)})
    store.fingerprint_cache = used
    if used.keys() != known.keys():
        _save_cache(store, used)
    return _counted(tables)


def _counted(tables: dict[str, TableDigest]) -> Fingerprint:
    return Fingerprint({name: entry for name, entry in tables.items() if entry.rows or name not in COUNTED_WHEN_FILLED})


def _fingerprint_every_row(store: Store, manifest: Manifest, include_vectors: bool) -> Fingerprint:
    """Every bucket computed, as with a cache that holds nothing (READ_BUCKETS of a table at a time:
    memory follows a bucket, not the store); no cache is read or written."""
    tables = {spec.name: _table_digest(store, manifest, spec, {}, {}) for spec in INDEX_TABLES}
    if include_vectors:
        tables[NAME_VECTORS] = _names_digest(store, manifest, {}, {})
    return _counted(tables)


def _groups(buckets: list[int]) -> list[list[int]]:
    return [buckets[start : start + READ_BUCKETS] for start in range(0, len(buckets), READ_BUCKETS)]


def _entry_key(kind: str, scope: str, files: list[str]) -> str:
    """The cache key of a bucket: what is digested (``kind`` of ``scope``) and its data files."""
    key = hashlib.sha256(f"{CACHE_FORMAT}\x00{kind}\x00{scope}\x00".encode())
    for path in files:
        key.update(path.encode() + b"\x00")
    return f"{kind}:{key.hexdigest()}"


def _cached_digest(store: Store, manifest: Manifest, table: str, kind: str, scope: str, known: Cache, used: Cache,
                   compute: Callable[[list[int]], dict[int, TableDigest]]) -> TableDigest:
    """A digest summed over the buckets of ``table``: kept ones from ``known``, the others by
    ``compute(buckets) -> {bucket: digest}``; every bucket's entry goes to ``used``."""
    keys = {bucket: _entry_key(kind, scope, files) for bucket, files in store.bucket_files(table, manifest).items()}
    computed: dict[int, TableDigest] = {}
    for group in _groups(sorted(bucket for bucket, key in keys.items() if key not in known)):
        computed.update(compute(group))
    for bucket, key in keys.items():
        used[key] = known[key] if key in known else computed.get(bucket, EMPTY)
    return combine(used[key] for key in keys.values())


def _table_digest(store: Store, manifest: Manifest, spec: TableSpec, known: Cache, used: Cache) -> TableDigest:
    def compute(buckets: list[int]) -> dict[int, TableDigest]:
        return digest_by_bucket(store.read_buckets(spec.name, manifest, buckets), spec.columns, BUCKET)

    return _cached_digest(store, manifest, spec.name, ROWS, spec.name, known, used, compute)


def _names_digest(store: Store, manifest: Manifest, known: Cache, used: Cache) -> TableDigest:
    cache = _name_cache(manifest, store)

    def compute(buckets: list[int]) -> dict[int, TableDigest]:
        aliases = store.read_buckets(ALIASES.name, manifest, buckets)
        return digest_by_bucket(_name_vectors(store, manifest, aliases, cache), ["name", "vector"], BUCKET)

    scope = f"{manifest.config.get('embedder')}\x00{manifest.config.get('dim')}"
    return _cached_digest(store, manifest, ALIASES.name, NAMES, scope, known, used, compute)


def _name_cache(manifest: Manifest, store: Store) -> VectorCache | None:
    """The cache of the index's name vectors (None for a store with no index config yet)."""
    if "embedder" not in manifest.config:
        return None
    return VectorCache.for_model(store, "name", manifest.config["embedder"], int(manifest.config["dim"]))


def _name_vectors(store: Store, manifest: Manifest, aliases: pl.DataFrame, cache: VectorCache | None) -> pl.DataFrame:
    """(name, vector, bucket): each name of the alias rows once, with its stored vector (null if none)."""
    names = aliases.select("name", BUCKET).unique().sort("name")
    if names.height == 0:
        return pl.DataFrame(schema={"name": pl.String, "vector": pl.List(pl.Float32), BUCKET: pl.Int32})
    if cache is None:
        raise StoreError(f"store {store.uri} holds names but records no embedder in its config")
    dim = cache.embedder.dim
    stored = cache.stored_vectors(names.get_column("name").to_list())
    matrix = np.zeros((len(stored), dim), dtype=np.float32)
    for row, vector in enumerate(stored):
        if vector is not None:
            matrix[row] = vector
    absent = pa.array([vector is None for vector in stored])
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), dim, mask=absent)
    return names.with_columns(pl.Series("vector", vectors))


def _check(entries: dict) -> str:
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()


def _cache_location(store: Store) -> tuple:
    fs, root = open_filesystem(store.uri, store.storage_options)
    return fs, "/".join([root, *CACHE_FILE])


def _load_cache(store: Store) -> Cache:
    """The cache of this Store's memory, else of the store's file; empty when neither is usable."""
    if store.fingerprint_cache is not None:
        return dict(store.fingerprint_cache)
    try:
        fs, path = _cache_location(store)
        payload = read_json(fs, path)
        entries = payload["entries"]
        if payload.get("format") != CACHE_FORMAT or payload.get("check") != _check(entries):
            return {}
        cache = {}
        for key, (rows, digest) in entries.items():
            entry = TableDigest(int(rows), str(digest))
            if len(entry.digest) != len(EMPTY.digest) or entry.total < 0 or entry.rows < 0:
                return {}
            cache[str(key)] = entry
        return cache
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # missing or unreadable: recompute
        return {}


def _save_cache(store: Store, cache: Cache) -> None:
    """Write the cache file whole; a store that cannot be written keeps none (it is only a cache)."""
    entries = {key: [entry.rows, entry.digest] for key, entry in sorted(cache.items())}
    try:
        fs, path = _cache_location(store)
        write_json(fs, path, {"format": CACHE_FORMAT, "check": _check(entries), "entries": entries})
    except OSError as err:
        log.info("fingerprint cache of %s not written: %s", store.uri, err)


def counts(store: Store, manifest: Manifest | None = None) -> dict[str, int]:
    """Rows of each index table at ``manifest`` (else the latest commit)."""
    manifest = manifest or store.manifest()
    return {spec.name: store.read(spec.name, manifest, columns=[spec.key[0]]).height for spec in INDEX_TABLES}
