"""What a commit writes of a table: which buckets it rewrites and which it appends rows to.

A commit writes only the buckets a transaction changed. It finds them from the rows the
transaction removed and added (a derived row recomputed to the same values cancels out), so its
cost follows the change, not the buckets read. Of those buckets it rewrites only the ones that
lost or changed a row. A bucket that only gained rows gets them appended as a further data
file, so a batch of new documents, which adds forms, mentions and links to nearly every bucket
and changes none of the rows already there, writes what it adds rather than every bucket it lands
in. Appends are bounded: a bucket already made of MAX_FILES_PER_BUCKET - 1 files is rewritten
whole instead (one file again), so a read of a bucket never opens more than MAX_FILES_PER_BUCKET.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import polars as pl

from lightfoot_pipeline.store.tables import BUCKET, TableSpec, bucket_changes, net_changes

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
    loaded: set[int] | None, changes: tuple[list[pl.DataFrame], list[pl.DataFrame]] | None,
    files_per_bucket: Callable[[], dict[int, int]],
) -> WritePlan | None:
    """The writes of one table; None if nothing changed.

    ``changes`` are the rows the transaction removed and added: what changed is found from them
    alone (tables.net_changes), whatever the size of the buckets read. Without them (a table staged
    whole), the rows as read (``original``) and as staged are compared: ``touched`` are the buckets
    the staged changes may have changed (None: any), ``loaded`` the buckets read (None: all); a
    touched bucket that was never read is appended to, its staged rows being exactly the added
    ones, and a read bucket is compared (tables.bucket_changes). ``files_per_bucket`` gives the
    committed table's file count per bucket; it is asked only when a bucket grew.
    """
    if touched is not None and not touched:
        return None
    if changes is not None and touched is not None:
        return _plan_from_changes(spec, loaded, changes, files_per_bucket)
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


def _plan_from_changes(
    spec: TableSpec, loaded: set[int] | None,
    changes: tuple[list[pl.DataFrame], list[pl.DataFrame]], files_per_bucket: Callable[[], dict[int, int]],
) -> WritePlan | None:
    """plan_writes from the removed and added rows. A bucket that lost a row was read (a removal
    reaches only rows read), so it can be rewritten from its staged rows; a crowded bucket that only
    grew is rewritten too when it was read, which the commit sees to (it reads crowded buckets first)."""
    removed, added = (pl.concat(frames) if frames else spec.empty() for frames in changes)
    changed, shrunk, gained = net_changes(removed, added, spec)
    if not changed:
        return None
    grew = changed - shrunk
    if grew:
        crowded = {b for b, n in files_per_bucket().items() if n >= MAX_FILES_PER_BUCKET - 1}
        crowded &= grew if loaded is None else grew & loaded
        if crowded:
            grew -= crowded
            gained = gained.filter(~pl.col(BUCKET).is_in(sorted(crowded)))
    return WritePlan(sorted(changed - grew), sorted(grew), gained)
