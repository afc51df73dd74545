"""An order-independent fingerprint of the index: per table, a hash of its set of rows.

Each row is encoded canonically (every value length-prefixed, nulls marked, floats by their exact
bits, the bucket column left out since it is a storage detail), hashed with BLAKE2b, and the sorted
row hashes are hashed again. Two stores have equal fingerprints exactly when every index table holds
the same set of rows, however the rows were written, batched or ordered. The encoding uses only
the standard library and NumPy, so a fingerprint recorded today can be recomputed by later versions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import polars as pl

from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import ALIASES, INDEX_TABLES, PASSAGE_SOURCES, TableSpec
from lightfoot_pipeline.store.vectors import VectorCache

# Tables added after fingerprints were first recorded count only when they hold rows, so a store
# that never had any keeps the fingerprint it had (an empty table and no table hold the same rows).
COUNTED_WHEN_FILLED = frozenset({PASSAGE_SOURCES.name})


@dataclass(frozen=True)
class TableDigest:
    rows: int
    digest: str


@dataclass(frozen=True)
class Fingerprint:
    tables: dict[str, TableDigest]

    @property
    def digest(self) -> str:
        outer = hashlib.sha256()
        for name in sorted(self.tables):
            entry = self.tables[name]
            outer.update(f"{name}\x00{entry.rows}\x00{entry.digest}\x00".encode())
        return outer.hexdigest()

    def counts(self) -> dict[str, int]:
        return {name: entry.rows for name, entry in sorted(self.tables.items())}

    def as_dict(self) -> dict:
        return {
            "digest": self.digest,
            "tables": {name: {"rows": e.rows, "digest": e.digest} for name, e in sorted(self.tables.items())},
        }

    def differences(self, other: "Fingerprint") -> list[str]:
        names = sorted(set(self.tables) | set(other.tables))
        return [n for n in names if self.tables.get(n) != other.tables.get(n)]


def _column_tokens(series: pl.Series) -> list[bytes]:
    """Canonical bytes of each value of a column."""
    dtype = series.dtype
    nulls = series.is_null().to_list()
    if dtype == pl.Float64 or dtype == pl.Float32:
        bits = series.cast(pl.Float64).fill_null(0.0).to_numpy().astype(np.float64).view(np.uint64)
        values = [f"f{b:016x}".encode() for b in bits.tolist()]
    elif dtype == pl.String:
        values = [b"s" + str(len(v.encode())).encode() + b":" + v.encode() if v is not None else b"" for v in series.to_list()]
    elif isinstance(dtype, (pl.List, pl.Array)):
        values = []
        for v in series.to_list():
            arr = np.asarray(v if v is not None else [], dtype=np.float32)
            values.append(b"v" + str(arr.size).encode() + b":" + arr.tobytes())
    else:
        values = [f"{dtype}:{v}".encode() for v in series.to_list()]
    return [b"\x00N" if null else value for value, null in zip(values, nulls)]


def digest_frame(frame: pl.DataFrame, columns: list[str]) -> TableDigest:
    if frame.height == 0:
        return TableDigest(0, hashlib.sha256(b"").hexdigest())
    tokens = [_column_tokens(frame.get_column(c)) for c in columns]
    row_hashes = []
    for row in zip(*tokens):
        h = hashlib.blake2b(digest_size=16)
        for value in row:
            h.update(len(value).to_bytes(8, "little"))
            h.update(value)
        row_hashes.append(h.digest())
    row_hashes.sort()
    outer = hashlib.sha256()
    for rh in row_hashes:
        outer.update(rh)
    return TableDigest(frame.height, outer.hexdigest())


def fingerprint_tables(frames: dict[str, pl.DataFrame], specs: list[TableSpec]) -> Fingerprint:
    return Fingerprint({spec.name: digest_frame(frames[spec.name], spec.columns) for spec in specs
                        if frames[spec.name].height or spec.name not in COUNTED_WHEN_FILLED})


def fingerprint(store: Store, manifest: Manifest | None = None, include_vectors: bool = True) -> Fingerprint:
    """The store's fingerprint: every index table and, optionally, the live name vectors."""
    manifest = manifest or store.manifest()
    frames = {spec.name: store.read(spec.name, manifest) for spec in INDEX_TABLES}
    result = fingerprint_tables(frames, list(INDEX_TABLES))
    if include_vectors:
        names = sorted(frames[ALIASES.name].get_column("name").unique().to_list())
        if not names:
            result.tables["name_vectors"] = digest_frame(pl.DataFrame(), [])
            return result
        cache = VectorCache.for_model(store, "name", manifest.config["embedder"], manifest.config["dim"])
        vectors = cache.stored_vectors(names)
        frame = pl.DataFrame({"name": names, "vector": [v.tolist() if v is not None else None for v in vectors]},
                             schema={"name": pl.String, "vector": pl.List(pl.Float32)})
        result.tables["name_vectors"] = digest_frame(frame, ["name", "vector"])
    return result
