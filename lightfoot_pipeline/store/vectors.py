"""Vector caches in LanceDB: a vector is computed once per (model, text) and kept.

Each cache is a LanceDB table named after its kind and model (``name__<model>``), with rows
``(key, vector)`` where ``key`` is a hash of the text. The text itself is never stored here: the
index tables hold it, and erasing a document purges its keys. Deletes name keys only, so no text
reaches LanceDB's transaction files either.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
import time
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from lightfoot_pipeline.models.embedder import Embedder, embedding_chunks
from lightfoot_pipeline.store.store import Store

log = logging.getLogger(__name__)

EMBED_CHUNK = 512  # texts embedded between two progress reports, for an embedder without chunks of its own
KEY_CHUNK = 100_000  # rows whose texts keys_of holds as Python strings at once
# Keys named in one predicate: a purge's delete, or a lookup by key. Each delete scans the cache
# table's keys, and a larger predicate holds more while it is matched (benchmarks/vector_purge.py:
# on a cache of 1M vectors of 384 floats, 100,000 stale keys took 9.4 s at 1,000 a delete, 3.8 s at
# 10,000, 6.1 s at 50,000; the peak grew by 264, 331 and 566 MB).
KEYS_PER_PREDICATE = 10_000
EmbedProgress = Callable[[int, int], None]  # (done, total) of one pass of texts to embed; 0 starts a pass


def lance_table_names(db) -> list[str]:
    """Every table of a LanceDB connection, following pagination."""
    names: list[str] = []
    token = None
    while True:
        response = db.list_tables(page_token=token)
        names.extend(response.tables)
        token = response.page_token
        if not token:
            return names


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _slug(model_id: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", model_id.casefold()).strip("_")


# A cache table's columns: (type, what it holds).
VECTOR_CACHE_COLUMNS = {
    "key": ("string", "the first 32 hex digits of the text's SHA-256 (the text is never stored here)"),
    "vector": ("fixed_size_list<float32>", "the model's embedding of the text, as many floats as the model's dimension"),
}


def cache_table_name(kind: str, model_id: str) -> str:
    """The LanceDB table of one kind of text's vectors for one model: ``<kind>__<model>``."""
    return f"{kind}__{_slug(model_id)}"


def vector_cache_uri(store: Store, kind: str, model_id: str) -> str:
    """Where that table lives: ``<store>/vectors/<kind>__<model>.lance``."""
    return store.path("vectors", f"{cache_table_name(kind, model_id)}.lance")


class VectorCache:
    def __init__(self, store, kind: str, embedder: Embedder, progress: EmbedProgress | None = None) -> None:
        """``progress`` hears how each pass of :meth:`vectors` that embeds texts proceeds."""
        self.store = store
        self.kind = kind
        self.embedder = embedder
        self.table_name = cache_table_name(kind, embedder.model_id)
        self.computed = 0
        self._keys_at: tuple[tuple[int, int], pa.ChunkedArray] | None = None  # the key column, at one table version
        self.key_reads = 0  # times the whole key column was read (it grows with the cache)
        self.progress = progress

    @classmethod
    def for_model(cls, store, kind: str, model_id: str, dim: int) -> VectorCache:
        """A cache to read or purge without loading the model (embedding through it fails)."""
        return cls(store, kind, UnloadedEmbedder(model_id, dim))

    def stored_vectors(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        """Cached vectors of texts, None where a text has none; never embeds."""
        found = self._stored({text_key(t) for t in texts})
        return [found.get(text_key(t)) for t in texts]

    @property
    def _schema(self) -> pa.Schema:
        return pa.schema([pa.field("key", pa.string()), pa.field("vector", pa.list_(pa.float32(), self.embedder.dim))])

    def _table(self, create: bool):
        db = self.store.lance()
        if self.table_name in lance_table_names(db):
            return db.open_table(self.table_name)
        if not create:
            return None
        try:
            table = db.create_table(self.table_name, schema=self._schema)
        except ValueError:
            # Another writer created it since the listing (on object stores nothing serialises them).
            if self.table_name in lance_table_names(db):
                return db.open_table(self.table_name)
            raise
        self._restore_replaced(table)
        return table

    def _restore_replaced(self, table) -> None:
        """Undo a creation that replaced another writer's table.

        On an object store two writers can both find no table and both create it. LanceDB then
        commits the later creation as a new, empty version on top of the earlier writer's, whose
        vectors (already verified by that writer) would be gone from the latest version. A
        creation that did not land as version 1 therefore adds back the rows of the version it
        replaced.
        """
        created = table.version
        if created <= 1:
            return
        previous = self.store.lance().open_table(self.table_name)
        previous.checkout(created - 1)
        replaced = previous.to_arrow()
        if replaced.num_rows:
            log.info("vector cache %s: creation replaced %d vectors of another writer; restoring them",
                     self.table_name, replaced.num_rows)
            table.add(replaced.select(["key", "vector"]).cast(self._schema))

    def _key_column(self, table) -> pa.ChunkedArray:
        """The table's keys in row order, read once per table version."""
        version = self._version(table)
        if self._keys_at is None or self._keys_at[0] != version:
            self.key_reads += 1
            self._keys_at = (version, key_column(table))
        return self._keys_at[1]

    def _stored(self, keys: set[str]) -> dict[str, np.ndarray]:
        """The stored vectors of keys: the key column is scanned, and only the rows of the keys
        found are read."""
        table = self._table(create=False)
        if table is None or not keys:
            return {}
        stored_keys = self._key_column(table)
        offsets = pc.indices_nonzero(pc.is_in(stored_keys, value_set=pa.array(sorted(keys), pa.string())))
        if len(offsets) == 0:
            return {}
        data = table.take_offsets(offsets.to_pylist()).select(["key", "vector"]).to_arrow()
        got = data.column("key").to_pylist()
        if sorted(got) != sorted(stored_keys.take(offsets).to_pylist()):  # the table changed between the two reads
            data = self._rows_by_key(table, sorted(keys))
            got = data.column("key").to_pylist()
        flat = data.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        matrix = flat.reshape(len(got), self.embedder.dim).astype(np.float32)
        return {k: matrix[j] for j, k in enumerate(got) if k in keys}

    def _rows_by_key(self, table, keys: list[str]) -> pa.Table:
        """The rows of some keys, found by a predicate on the key column, a bounded number of keys
        to a query: the lookup of a table that changed under its offsets reads those rows, not the
        table (a million passages' cache of names holds about 7 GB of vectors). ``keys``: at least one."""
        return pa.concat_tables([
            table.search().where(f"key IN ({quoted_keys(keys[start:start + KEYS_PER_PREDICATE])})")
            .select(["key", "vector"]).limit(None).to_arrow()
            for start in range(0, len(keys), KEYS_PER_PREDICATE)
        ])

    def _add(self, batch: pa.Table, attempts: int = 5) -> None:
        """Append vectors, surviving a concurrent writer: on object stores two writers can race to
        create the table (the later creation replaces the earlier one) or commit at once (LanceDB
        refuses one). The batch is added until every one of its keys is in the table."""
        wanted = pa.array(sorted(set(batch.column("key").to_pylist())), pa.string())
        for attempt in range(attempts):
            try:
                table = self._table(create=True)
                known = self._keys_at if self._keys_at is not None and self._keys_at[0] == self._version(table) else None
                table.add(batch)
            except (RuntimeError, OSError) as err:
                if attempt == attempts - 1:
                    raise
                log.info("vector cache %s: append conflicted (%s); retrying", self.table_name, err)
            else:
                if self._appended_alone(table, known, batch):
                    return
                present = self._key_column(table)
                if len(pc.unique(present.filter(pc.is_in(present, value_set=wanted)))) == len(wanted):
                    return
            time.sleep(0.05 * (2 ** attempt))
        raise RuntimeError(f"vector cache {self.table_name}: vectors could not be stored after {attempts} attempts")

    @staticmethod
    def _version(table) -> tuple[int, int]:
        return table.version, table.count_rows()  # a table dropped and made again restarts its versions

    def _appended_alone(self, table, known: tuple[tuple[int, int], pa.ChunkedArray] | None, batch: pa.Table) -> bool:
        """Whether the table's only commit since the key column ``known`` is this append: then its
        keys are those keys and the batch's, and the column is not read again (it grows with the
        cache, an append with the change)."""
        if known is None:
            return False
        (version, count), keys = known
        now = self._version(table)
        if now != (version + 1, count + batch.num_rows):
            return False
        self._keys_at = (now, pa.chunked_array([*keys.chunks, *batch.column("key").chunks], pa.string()))
        return True

    def vectors(self, texts: Sequence[str], progress: EmbedProgress | None = None) -> np.ndarray:
        """(len(texts), dim) vectors: cached ones read, missing ones embedded and stored.

        ``progress(done, total)`` (else the cache's own) hears ``(0, total)`` before the missing
        texts are embedded and then after every chunk of them (``embedding_chunks``: a text's
        vector does not depend on its batch, so the chunks do not change the vectors)."""
        progress = progress or self.progress
        keys = [text_key(t) for t in texts]
        found = self._stored(set(keys))
        missing: dict[str, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in found and key not in missing:
                missing[key] = text
        if missing:
            pending = list(missing.values())
            computed = np.zeros((len(pending), self.embedder.dim), dtype=np.float32)
            if progress is not None:
                progress(0, len(pending))
            done = 0
            for rows in embedding_chunks(self.embedder, pending, EMBED_CHUNK):
                computed[rows] = self.embedder.embed([pending[i] for i in rows])
                done += len(rows)
                if progress is not None:
                    progress(done, len(pending))
            self.computed += len(missing)
            batch = pa.table(
                {
                    "key": list(missing.keys()),
                    "vector": pa.FixedSizeListArray.from_arrays(
                        pa.array(computed.reshape(-1), pa.float32()), self.embedder.dim
                    ),
                },
                schema=self._schema,
            )
            self._add(batch)
            found.update(zip(missing.keys(), computed, strict=True))
        out = np.zeros((len(texts), self.embedder.dim), dtype=np.float32)
        for i, key in enumerate(keys):
            out[i] = found[key]
        return out

def key_column(table) -> pa.ChunkedArray:
    """A cache table's keys in row order, and nothing of its vectors."""
    return table.search().select(["key"]).limit(None).to_arrow().column("key")


def quoted_keys(keys: Sequence[str]) -> str:
    """Keys as the list of a predicate's ``IN``. Keys are hex digests; one that is not (no writer
    here makes one) is quoted all the same, never spliced into the predicate."""
    return ", ".join("'" + key.replace("'", "''") + "'" for key in keys)


def keys_of(frame: pl.DataFrame, text: Callable[..., str]) -> pa.Array:
    """The cache keys of a frame's rows, a row's text being ``text(*row)``: the rows are hashed
    KEY_CHUNK at a time, so that no more than a chunk of them is ever held as Python strings (the
    texts of a store of a million passages would be gigabytes of them)."""
    chunks = [pa.array([text_key(text(*row)) for row in frame.slice(start, KEY_CHUNK).iter_rows()], pa.string())
              for start in range(0, frame.height, KEY_CHUNK)]
    return pa.concat_arrays(chunks) if chunks else pa.array([], pa.string())


def purge_vector_caches(store, keep_keys_by_kind: Mapping[str, pa.Array]) -> dict[str, int]:
    """Delete, from every cache table of every model, the vectors whose keys no live text has
    (``keep_keys_by_kind``: the live texts' keys by kind, from :func:`keys_of`).

    Works from the tables present in LanceDB (``<kind>__<model>``), so caches of a model the
    store no longer records are purged too. A kind with no live keys is emptied. Only the key
    column is read and the stale keys are deleted by key, KEYS_PER_PREDICATE at a time: a
    purge holds keys, never vectors (the caches of a million passages hold tens of GB of them).
    """
    db = store.lance()
    purged: dict[str, int] = {}
    for name in lance_table_names(db):
        keep = keep_keys_by_kind.get(name.split("__", 1)[0], pa.array([], pa.string()))
        table = db.open_table(name)
        stored = key_column(table)
        stale = pc.unique(stored.filter(pc.invert(pc.is_in(stored, value_set=keep))))
        purged[name] = len(stale)
        if len(stale) and not len(keep):
            table.delete("true")
            continue
        for start in range(0, len(stale), KEYS_PER_PREDICATE):
            table.delete(f"key IN ({quoted_keys(stale.slice(start, KEYS_PER_PREDICATE).to_pylist())})")
    return purged


class UnloadedEmbedder:
    """An embedder known by its model id and dimension alone: the vectors it cached can be read and
    purged, but a text without a cached vector fails (RuntimeError)."""

    def __init__(self, model_id: str, dim: int) -> None:
        self.model_id = model_id
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise RuntimeError(f"{len(texts)} texts have no cached vector, and embedder {self.model_id!r} "
                           "is not loaded here")

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


def cleanup_vector_history(store) -> None:
    """Drop every old LanceDB version and unreferenced file (after an erase)."""
    db = store.lance()
    for name in lance_table_names(db):
        with warnings.catch_warnings():
            # LanceDB warns that a zero age removes every version but the latest. That is the point
            # here: old versions hold the erased rows. Appends that race with it are retried until
            # their keys are present (VectorCache._add).
            warnings.filterwarnings("ignore", message=r"optimize\(cleanup_older_than=0\)", category=UserWarning)
            db.open_table(name).optimize(cleanup_older_than=dt.timedelta(0), delete_unverified=True)


def name_vector_cache(store: Store, embedder: Embedder, progress: EmbedProgress | None = None) -> VectorCache:
    """The cache of name vectors; ``progress`` hears how embedding the names it lacks proceeds."""
    return VectorCache(store, "name", embedder, progress)
