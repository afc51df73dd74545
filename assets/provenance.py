"""The metadata every materialization reports: rows, table versions, fingerprint, model calls, cost.

With it, the Dagster UI is the index's lineage and provenance view: which store commit an asset
materialization made, which version of each Delta table it left, and what it cost.
"""

from __future__ import annotations

from typing import Sequence

import dagster as dg

from lightfoot_pipeline import pipeline
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.transaction import Transaction
from lightfoot_pipeline.store.tables import spec_for

STORE_POOL = "lightfoot_store"  # one store writer at a time (the lock on object stores)
# Steps that ask the model and write only the extraction cache: LIGHTFOOT_EXTRACTION_SLOTS at once.
EXTRACTION_POOL = "lightfoot_extraction"


def commit_if_changed(tx: Transaction, operation: str, details: dict) -> tuple[Manifest, bool]:
    """Commit when something is staged; otherwise leave the store as it is."""
    if not tx.pending():
        return tx.manifest, False
    return tx.commit(operation, details), True


def table_rows(store: Store, manifest: Manifest, tables: Sequence[str]) -> dict[str, int]:
    return {name: store.read(name, manifest, columns=[spec_for(name).key[0]]).height for name in tables}


def store_metadata(
    store: Store,
    manifest: Manifest,
    tables: Sequence[str],
    *,
    fingerprint: bool,
    changed: bool = True,
    model_calls: int = 0,
    cost_usd: float = 0.0,
    rows: dict[str, int] | None = None,
) -> dict[str, dg.RawMetadataValue]:
    """Metadata for a materialization that left the store at ``manifest``."""
    rows = rows if rows is not None else table_rows(store, manifest, tables)
    metadata: dict[str, dg.RawMetadataValue] = {
        "dagster/row_count": dg.MetadataValue.int(rows[tables[0]]) if tables else dg.MetadataValue.int(0),
        "rows": dg.MetadataValue.json(rows),
        "table_versions": dg.MetadataValue.json({name: manifest.versions.get(name) for name in tables}),
        "store_commit": dg.MetadataValue.int(manifest.seq),
        "store_changed": dg.MetadataValue.bool(changed),
        "store": dg.MetadataValue.path(store.uri),
        "model_calls": dg.MetadataValue.int(model_calls),
        "cost_usd": dg.MetadataValue.float(round(float(cost_usd), 6)),
    }
    if fingerprint and manifest.seq:
        metadata["fingerprint"] = dg.MetadataValue.text(pipeline.fingerprint(store, manifest).digest)
    return metadata
