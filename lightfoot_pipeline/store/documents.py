"""The documents a store holds: the ``doc_id`` column of its documents table."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENTS


def live_doc_ids(store: Store, manifest: Manifest | None = None, among: Iterable[str] | None = None) -> set[str]:
    """The ids of the documents in the store as of ``manifest`` (the committed state by default),
    or those of them that are ``among`` the ids given."""
    frame = store.read(DOCUMENTS.name, manifest, columns=["doc_id"])
    if among is not None:
        frame = frame.filter(pl.col("doc_id").is_in(list(among)))
    return set(frame.get_column("doc_id").to_list())
