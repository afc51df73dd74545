"""Recovery: a writer first brings every table back to the version the store log names; and the
creation of a table, which recovery's conditional versions start from.

A commit writes its tables, then the store-log row that names their new versions (transaction.py).
A crash between the two leaves tables ahead of the log; readers never see that (they read the
logged versions), and the next writer undoes it here before it stages anything.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from lightfoot_pipeline.store.filesystem import open_filesystem
from lightfoot_pipeline.store.log import (
    EXACT_VERSION,
    TABLE_CONFIGURATION,
    ConcurrentCommitError,
    Manifest,
    conflicts_as,
)


def recover(store) -> tuple[Manifest, dict[str, int]]:
    """The store's state, and each existing table's version once it holds exactly the logged
    content (a table ahead of the log, left by a crash between the two steps of a commit, is
    restored to the logged version first).

    A transaction writes each table on top of that version (see the module docstring). The
    undoing commits are exact-version too: if another writer moves a table meanwhile, this
    raises ConcurrentCommitError rather than mixing the two writers' files.

    A table is opened only when its Delta log holds a commit past the logged version (or the
    store log names no version of it): Delta versions are consecutive, so the absence of the
    next commit file is proof that the table stands at the logged version. Opening a table
    replays its log (its list of data files), which a large store pays per table and per
    transaction; the tables the transaction goes on to use are opened when it uses them.
    """
    manifest = store.manifest()
    heads: dict[str, int] = {}
    fs, root = open_filesystem(store.uri, store.storage_options)
    for spec_name, uri in store.table_locations():
        logged = manifest.versions.get(spec_name)
        if not _has_commit(fs, root + uri.removeprefix(store.uri), 0 if logged is None else logged + 1):
            if logged is not None:
                heads[spec_name] = logged
            continue
        table = store.open_table(uri)
        if table is None:
            continue
        with conflicts_as(ConcurrentCommitError, f"recovering {spec_name}"):
            if logged is None:
                if table.to_pyarrow_dataset().count_rows() > 0:
                    table.delete(commit_properties=EXACT_VERSION)
            elif table.version() > logged:
                table.restore(logged, commit_properties=EXACT_VERSION)
        heads[spec_name] = table.version()
        if table.version() == logged:
            store.keep_open_table(spec_name, table)
    return manifest, heads


def _has_commit(fs: pafs.FileSystem, table_path: str, version: int) -> bool:
    """Whether the log of the Delta table at ``table_path`` (in ``fs``) holds the commit of
    ``version``: one metadata request."""
    info = fs.get_file_info(f"{table_path}/_delta_log/{version:020d}.json")
    return info.type != pafs.FileType.NotFound


def create_table(store, uri: str, schema: pa.Schema, partition_by: list[str] | None, what: str,
                 name: str | None = None, description: str | None = None) -> DeltaTable:
    """A new empty table at version 0, or ConcurrentCommitError if another writer created it."""
    try:
        table = DeltaTable.create(
            uri, schema, mode="error", partition_by=partition_by, configuration=TABLE_CONFIGURATION,
            storage_options=store.connection_options(), commit_properties=EXACT_VERSION, name=name,
            description=description,
        )
    except (CommitFailedError, DeltaError) as err:
        if isinstance(err, CommitFailedError) or store.open_table(uri) is not None:
            raise ConcurrentCommitError(f"another writer created {what} first") from err
        raise
    if table.version() != 0:
        raise ConcurrentCommitError(f"another writer created {what} first")
    return table
