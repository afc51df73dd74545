"""Compaction: every bucket made of several data files rewritten as one, rows unchanged.

A commit appends a batch's rows to the buckets that only gained rows, as one more data file each
(write_plan.py), so a store built or grown batch by batch has buckets of up to MAX_FILES_PER_BUCKET
files, and every lookup of a key opens each of its bucket's files. :func:`compact` rewrites those
buckets, a group of about REWRITE_ROWS rows at a time (Transaction.copy_from, from the store itself
at the commit it read), in one store commit that changes no row: the fingerprint stays as it is.
The files it replaces stay in the tables' history until ``lightfoot vacuum`` removes them
(``lightfoot vacuum --compact`` does both).
"""

from __future__ import annotations

from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import all_specs


def compact(store: Store, min_files: int = 2) -> dict[str, int]:
    """Rewrite every bucket of ``min_files`` data files or more as one file; per table, how many
    buckets were rewritten (nothing is committed when none was)."""
    if min_files < 2:
        raise ValueError("a bucket of one file is compact already: min_files is 2 or more")
    rewritten: dict[str, int] = {}
    with store.transaction() as tx:
        for spec in all_specs():
            if spec.name not in tx.manifest.versions:
                continue
            crowded = sorted(b for b, n in store.files_per_bucket(spec.name, tx.manifest).items() if n >= min_files)
            if crowded:
                tx.copy_from(spec.name, store, tx.manifest, crowded)
                rewritten[spec.name] = len(crowded)
        if rewritten:
            tx.commit("compact", {"buckets_compacted": rewritten})
    return rewritten
