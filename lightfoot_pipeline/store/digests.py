"""Order-independent digests of sets of rows, and the fingerprint they make up.

Each row is encoded canonically (every value length-prefixed, nulls marked, floats by their exact
bits, the bucket column left out since it is a storage detail) and hashed with 256-bit BLAKE2b. A
table's digest is its row count and the sum of its row hashes (read as little-endian integers)
modulo 2^256: an additive multiset hash. Equal multisets of rows give equal digests whatever their
order, and digests compose: the digest of a table is the sum of the digests of any split of its
rows (buckets, files), so a digest kept for an unchanged part need not be computed again.

What it guarantees: two different multisets of rows that nobody chose to collide have equal
digests with probability about 2^-256, as for any 256-bit hash. What it does not: an adversary
who chooses many rows can find two multisets with the same sum far faster than a 256-bit
collision (generalised-birthday and lattice methods), so the digest proves that a store was
built as the code builds it, not that a party who crafts rows cannot forge it; that is out of
scope. The encoding uses only the standard library, NumPy and Arrow compute on bytes, so a
digest recorded today can be recomputed by later versions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

ROW_HASH_BYTES = 32
MODULUS = 1 << (8 * ROW_HASH_BYTES)
NULL_TOKEN = b"\x00N"
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_INTEGERS = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64)


@dataclass(frozen=True)
class TableDigest:
    """A multiset of rows: how many, and the sum of their hashes mod 2^256 (64 hex digits)."""

    rows: int
    digest: str

    @classmethod
    def of_sum(cls, rows: int, total: int) -> TableDigest:
        return cls(rows, f"{total % MODULUS:0{2 * ROW_HASH_BYTES}x}")

    @property
    def total(self) -> int:
        return int(self.digest, 16)

    def __add__(self, other: TableDigest) -> TableDigest:
        """The digest of both multisets together."""
        return TableDigest.of_sum(self.rows + other.rows, self.total + other.total)


EMPTY = TableDigest.of_sum(0, 0)


def combine(parts: Iterable[TableDigest]) -> TableDigest:
    """The digest of the union of the parts' multisets."""
    rows = total = 0
    for part in parts:
        rows += part.rows
        total += part.total
    return TableDigest.of_sum(rows, total)


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

    def differences(self, other: Fingerprint) -> list[str]:
        names = sorted(set(self.tables) | set(other.tables))
        return [n for n in names if self.tables.get(n) != other.tables.get(n)]


def _column_tokens(series: pl.Series) -> list[bytes]:
    """Canonical bytes of each value of a column (the definition; :func:`column_tokens` computes
    the same bytes column-wise)."""
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
    return [NULL_TOKEN if null else value for value, null in zip(values, nulls, strict=True)]


def _fixed(matrix: np.ndarray) -> pa.Array:
    """A (rows, width) uint8 matrix as a binary array of its rows."""
    rows, width = matrix.shape
    data = pa.py_buffer(np.ascontiguousarray(matrix, dtype=np.uint8).tobytes())
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), rows, [None, data]).cast(pa.large_binary())


def _with_nulls(tokens: pa.Array, series: pl.Series) -> pa.Array:
    if not series.null_count():
        return tokens
    mask = pa.array(series.is_null().to_numpy())
    return pc.if_else(mask, pa.scalar(NULL_TOKEN, pa.large_binary()), tokens)


def _text_tokens(series: pl.Series, expr: pl.Expr) -> pa.Array:
    """Tokens that ``expr`` (over the column ``v``) spells as text, nulls marked."""
    text = pl.DataFrame({"v": series}).select(
        pl.when(pl.col("v").is_null()).then(pl.lit(NULL_TOKEN.decode())).otherwise(expr).alias("t"))
    return text.get_column("t").cast(pl.Binary).to_arrow().cast(pa.large_binary())


def column_tokens(series: pl.Series) -> pa.Array:
    """Canonical bytes of each value of a column, as a binary array (the bytes of
    :func:`_column_tokens`, computed column-wise where the type allows)."""
    dtype = series.dtype
    n = series.len()
    if dtype == pl.Float64 or dtype == pl.Float32:
        bits = series.cast(pl.Float64).fill_null(0.0).to_numpy().astype(np.float64).view(np.uint64)
        big = bits.astype(">u8").view(np.uint8).reshape(n, 8)
        out = np.empty((n, 17), dtype=np.uint8)
        out[:, 0] = ord("f")
        out[:, 1::2] = _HEX[big >> 4]
        out[:, 2::2] = _HEX[big & 15]
        return _with_nulls(_fixed(out), series)
    v = pl.col("v")
    if dtype == pl.String:
        return _text_tokens(series, pl.concat_str(pl.lit("s"), v.str.len_bytes().cast(pl.String), pl.lit(":"), v))
    if dtype in _INTEGERS:
        return _text_tokens(series, pl.concat_str(pl.lit(f"{dtype}:"), v.cast(pl.String)))
    if dtype == pl.Boolean:
        return _text_tokens(series, pl.concat_str(pl.lit(f"{dtype}:"), pl.when(v).then(pl.lit("True"))
                                                  .otherwise(pl.lit("False"))))
    if dtype == pl.Date:
        return _text_tokens(series, pl.concat_str(pl.lit(f"{dtype}:"), v.dt.strftime("%Y-%m-%d")))
    if isinstance(dtype, pl.Array) and dtype.inner in (pl.Float32, pl.Float64) and dtype.size:
        lists = series.rechunk().to_arrow()  # the values of null rows are there too, and replaced below
        flat = lists.values.slice(lists.offset * dtype.size, n * dtype.size).to_numpy(zero_copy_only=False)
        matrix = flat.astype(np.float32).reshape(n, dtype.size)
        prefix = np.frombuffer(b"v%d:" % dtype.size, dtype=np.uint8)
        out = np.concatenate([np.broadcast_to(prefix, (n, prefix.size)), matrix.view(np.uint8)], axis=1)
        return _with_nulls(_fixed(out), series)
    return pa.array(_column_tokens(series), type=pa.large_binary())


def row_hashes(frame: pl.DataFrame, columns: list[str]) -> bytes:
    """The 32-byte BLAKE2b hash of each row's encoding, concatenated in row order.

    A row's encoding is, for each column in order, its token's length (8 bytes, little-endian)
    and then the token.
    """
    if frame.height == 0:
        return b""
    parts: list[pa.Array] = []
    for column in columns:
        tokens = column_tokens(frame.get_column(column))
        lengths = pc.binary_length(tokens).to_numpy(zero_copy_only=False).astype("<u8")
        parts += [_fixed(lengths.view(np.uint8).reshape(-1, 8)), tokens]
    encoded = pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.large_binary())).to_pylist()
    blake2b = hashlib.blake2b
    return b"".join([blake2b(row, digest_size=ROW_HASH_BYTES).digest() for row in encoded])


def sum_hashes(hashes: bytes) -> int:
    """The sum of concatenated 32-byte hashes, each read as a little-endian integer, mod 2^256."""
    if not hashes:
        return 0
    # Eight 32-bit limbs per hash, summed in 64 bits (exact below 2^32 rows), then carried.
    limbs = np.frombuffer(hashes, dtype="<u4").reshape(-1, 8).sum(axis=0, dtype=np.uint64)
    return sum(int(limb) << (32 * i) for i, limb in enumerate(limbs.tolist())) % MODULUS


def digest_frame(frame: pl.DataFrame, columns: list[str]) -> TableDigest:
    """The digest of a frame's rows over ``columns``."""
    return TableDigest.of_sum(frame.height, sum_hashes(row_hashes(frame, columns)))


def digest_by_bucket(frame: pl.DataFrame, columns: list[str], bucket: str) -> dict[int, TableDigest]:
    """The digest of each bucket's rows (``bucket`` names the bucket column)."""
    if frame.height == 0:
        return {}
    order = np.argsort(frame.get_column(bucket).to_numpy(), kind="stable")
    hashes = np.frombuffer(row_hashes(frame, columns), dtype=np.uint8).reshape(-1, ROW_HASH_BYTES)[order]
    buckets = frame.get_column(bucket).to_numpy()[order]
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    ends = np.r_[starts[1:], len(buckets)]
    return {int(buckets[s]): TableDigest.of_sum(int(e - s), sum_hashes(hashes[s:e].tobytes()))
            for s, e in zip(starts.tolist(), ends.tolist(), strict=True)}
