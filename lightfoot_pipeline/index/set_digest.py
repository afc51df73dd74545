"""Order-independent digests of sets of content-hashed ids, as Polars expressions.

Ids in the index end in hexadecimal hash digits (``chunk-3fa2…``). The digest of a set of ids is
its size and the sums of two 30-bit slices of each id's last 15 hex digits: equal sets give equal
digests whatever their order, and different sets of hash ids collide with negligible probability.
Pure Polars arithmetic, so it is as stable as integer addition across versions.
"""

from __future__ import annotations

import polars as pl

_LOW = (1 << 30) - 1


def set_digest(ids: pl.Expr) -> pl.Expr:
    value = ids.str.slice(-15).str.to_integer(base=16).cast(pl.Int64)
    low = (value & _LOW).sum()
    high = (value // (1 << 30)).sum()
    return pl.format("{}:{}:{}", ids.len(), low, high)
