"""What a commit writes of a table: which buckets it rewrites and which it appends rows to.

A commit writes only the buckets a transaction changed, and of those it rewrites only the ones
that lost or changed a row. A bucket that only gained rows gets them appended as a further data
file, so a batch of new documents, which adds forms, mentions and links to nearly every bucket
and changes none of the rows already there, writes what it adds rather than every bucket it lands
in. Appends are bounded: a bucket already made of MAX_FILES_PER_BUCKET - 1 files is rewritten
whole instead (one file again), so a read of a bucket never opens more than MAX_FILES_PER_BUCKET.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import polars as pl

from lightfoot_pipeline.store.tables import BUCKET, TableSpec, bucket_changes

# A bucket made of this many files is rewritten whole rather than appended to once more, so that
# appends never leave a bucket in more files than this (each is opened on every read of it).
MAX_FILES_PER_BUCKET = 8


class WritePlan(NamedTuple):
    """Buckets rewritten with their staged rows, and buckets that get ``added`` appended."""

    rewrite: list[int]
    append: list[int]
    added: pl.DataFrame


def plan_writes(
    spec: TableSpec, original: pl.DataFrame, staged: pl.DataFrame, touched: set[int] | None,
    loaded: set[int] | None, files_per_bucket: Callable[[], dict[int, int]],
) -> WritePlan | None:
    """The writes of one table, from its rows as read and as staged; None if nothing changed.

    ``touched`` are the buckets the staged changes may have changed (None: any), ``loaded`` the
    buckets read (None: all). A touched bucket that was never read is appended to: its staged
    rows are exactly the added ones. A read bucket is compared (tables.bucket_changes).
    ``files_per_bucket`` gives the committed table's file count per bucket; it is asked only when
    a read bucket grew.
    """
    if touched is not None and not touched:
        return None
    if touched is None or loaded is None:
        scope, append = None if touched is None else sorted(touched), []
    else:
        scope = sorted(touched & loaded)
        append = sorted(touched - loaded)
        if append:
            present = set(staged.filter(pl.col(BUCKET).is_in(append)).get_column(BUCKET).unique().to_list())
            append = [b for b in append if b in present]
    added = staged.filter(pl.col(BUCKET).is_in(append)) if append else spec.empty()
    if scope is None:
        changed, grown = bucket_changes(original, staged, spec)
    elif scope:
        in_scope = pl.col(BUCKET).is_in(scope)
        changed, grown = bucket_changes(original.filter(in_scope), staged.filter(in_scope), spec)
    else:
        changed, grown = set(), spec.empty()
    if grown.height:
        crowded = [b for b, n in files_per_bucket().items() if n >= MAX_FILES_PER_BUCKET - 1]
        grown = grown.filter(~pl.col(BUCKET).is_in(crowded))
    if grown.height:
        grew = set(grown.get_column(BUCKET).unique().to_list())
        changed -= grew
        append = sorted(set(append) | grew)
        added = pl.concat([added, grown.select(added.columns)])
    if not changed and not append:
        return None
    return WritePlan(sorted(changed), append, added)
