"""What a commit writes of a table: which buckets it rewrites and which it appends rows to.

A commit writes only the buckets a transaction changed. It finds them from the rows the
transaction removed and added (a derived row recomputed to the same values cancels out), so its
cost follows the change, not the buckets read. Of those buckets it rewrites only the ones that
lost or changed a row. A bucket that only gained rows gets them appended as a further data
file, so a batch of new documents, which adds forms, mentions and links to nearly every bucket
and changes none of the rows already there, writes what it adds rather than every bucket it lands
in. Appends are bounded: a bucket already made of MAX_FILES_PER_BUCKET - 1 files is rewritten
whole instead (one file again), so a read of a bucket never opens more than MAX_FILES_PER_BUCKET.

A commit writes its tables in the order :func:`write_order` gives: the first one alone, then the
heavy ones one after another beside the rest at once. The first is the same for every writer that
changes it, so that of two writers racing on the same tables one loses there, before it writes
anything else, and the other wins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import polars as pl

from lightfoot_pipeline.store.tables import BUCKET, INDEX_TABLES, TableSpec, bucket_changes, net_changes, row_hashes

# A bucket made of this many files is rewritten whole rather than appended to once more, so that
# appends never leave a bucket in more files than this (each is opened on every read of it).
MAX_FILES_PER_BUCKET = 8


class WritePlan(NamedTuple):
    """Buckets rewritten, and buckets that get ``added`` appended. ``changes``: the rows the
    transaction removed and added, from which a rewrite of looked-up rows makes each bucket's new
    rows (:func:`rewritten`); None for a table read whole, whose staged rows are rewritten."""

    rewrite: list[int]
    append: list[int]
    added: pl.DataFrame
    changes: tuple[pl.DataFrame, pl.DataFrame] | None = None


def crowded(files_per_bucket: dict[int, int]) -> set[int]:
    """The buckets made of MAX_FILES_PER_BUCKET - 1 files or more: one more append is one too many."""
    return {b for b, n in files_per_bucket.items() if n >= MAX_FILES_PER_BUCKET - 1}


def plan_writes(
    spec: TableSpec, original: pl.DataFrame, staged: pl.DataFrame, touched: set[int] | None,
    changes: tuple[list[pl.DataFrame], list[pl.DataFrame]] | None,
    files_per_bucket: Callable[[], dict[int, int]],
) -> WritePlan | None:
    """The writes of one table; None if nothing changed.

    ``changes`` are the rows the transaction removed and added: what changed is found from them
    alone (tables.net_changes), whatever the number of rows looked up. A table staged whole
    (``changes`` None, ``touched`` None) was read whole, so its rows as read (``original``) and as
    staged are compared (tables.bucket_changes). ``touched`` are the buckets the staged changes may
    have changed. ``files_per_bucket`` gives the committed table's file count per bucket; it is
    asked only when a bucket grew.
    """
    if touched is not None and not touched:
        return None
    net: tuple[pl.DataFrame, pl.DataFrame] | None = None
    if changes is None:
        changed, gained = bucket_changes(original, staged, spec)
        shrunk = changed - set(gained.get_column(BUCKET).unique().to_list())
    else:
        removed, added = (pl.concat(frames) if frames else spec.empty() for frames in changes)
        changed, shrunk, gained = net_changes(removed, added, spec)
        net = (removed, added)
    if not changed:
        return None
    # A bucket that lost a row is rewritten; so is a bucket that only grew but already holds
    # MAX_FILES_PER_BUCKET - 1 files, so that it is one file again.
    grew = changed - shrunk
    if grew:
        full = crowded(files_per_bucket()) & grew
        if full:
            grew -= full
            gained = gained.filter(~pl.col(BUCKET).is_in(sorted(full)))
    return WritePlan(sorted(changed - grew), sorted(grew), gained, net)


def rewritten(committed: pl.DataFrame, removed: pl.DataFrame, added: pl.DataFrame, spec: TableSpec) -> pl.DataFrame:
    """The new rows of some buckets: their ``committed`` rows, less the ``removed`` ones, with the
    ``added`` ones (all three of the same buckets). Rows are told apart by a 64-bit hash of all
    their columns and counted, as in tables.net_changes: a row removed and added again stays, a row
    added twice is there twice."""
    columns = [*spec.columns, BUCKET]
    rows = pl.concat([committed.select(columns), added.select(columns)])
    if removed.height == 0:
        return rows
    hashes = row_hashes(rows, spec)
    dropped = (removed.select(BUCKET).with_columns(_h=row_hashes(removed, spec))
               .group_by("_h").agg(pl.len().cast(pl.Int64).alias("_drop")))
    hit = hashes.is_in(dropped.get_column("_h").implode())
    # Only the rows of removed hashes are counted: each one's place among the rows of its hash, and
    # the first _drop copies go. The others (nearly all of a bucket) stay as they are.
    touched = (rows.filter(hit).with_columns(_h=hashes.filter(hit))
               .with_columns(_i=pl.int_range(pl.len(), dtype=pl.Int64).over("_h"))
               .join(dropped, on="_h", how="left")
               .filter(pl.col("_i") >= pl.col("_drop").fill_null(0))
               .select(columns))
    return pl.concat([rows.filter(~hit), touched])


# The tables in the order that decides which one a commit writes first: the per-document tables
# before the graph ones (a batch changes documents, a deletion its tombstones or documents), then
# any other table by name.
_FIRST_WRITTEN = {spec.name: i for i, spec in enumerate(INDEX_TABLES)}
# A write of more than this many rows waits for the other such writes of its commit: each holds a
# copy of its rows while it is written (at 100k passages a batch rewrites about 550,000 rows of
# aliases and as many of entities; written at once they added 390 MB to the batch's peak).
HEAVY_WRITE_ROWS = 200_000


class WriteOrder(NamedTuple):
    """How a commit writes its changed tables: ``first`` alone (none if nothing changed), then
    ``in_turn`` one after another (the heavy writes) while ``at_once`` are written in parallel."""

    first: str | None
    in_turn: list[str]
    at_once: list[str]


def write_order(rows_written: dict[str, int]) -> WriteOrder:
    """The order a commit writes its changed tables in (``rows_written``: the rows each write
    holds). The first, written alone, is the earliest of them in one fixed order, whatever their
    sizes: two writers that change the same tables then race on the same first write, and the
    loser stops there. (Were it the smallest write, two writers of different sizes could each win
    a different first table, each lose the other's, and both fail.) Of the rest, writes of more
    than HEAVY_WRITE_ROWS rows go one after another, largest first, beside the others, which go at
    once, largest first, so that the longest write does not start last."""
    if not rows_written:
        return WriteOrder(None, [], [])
    first = min(rows_written, key=lambda name: (_FIRST_WRITTEN.get(name, len(_FIRST_WRITTEN)), name))
    rest = sorted((name for name in rows_written if name != first), key=lambda name: (-rows_written[name], name))
    heavy = [name for name in rest if rows_written[name] > HEAVY_WRITE_ROWS]
    return WriteOrder(first, heavy, [name for name in rest if name not in heavy])
