"""The metadata every materialization reports: rows, table versions, fingerprint, model calls, cost.

With it, the Dagster UI is the index's lineage and provenance view: which store commit an asset
materialization made, which version of each Delta table it left, and what it cost.

A run over a range of document partitions records one materialization per document. What is
true of one document (its passages, extraction, model calls, tokens and cost) goes on that
document's partition only (:func:`add_document_metadata`); what the run did as a whole goes on
every partition under ``run_``-prefixed keys, so that summing a key over partitions never counts
a run twice. Every asset declares its tables' column schema and a code version (the engine's
version and the index's settings), so the UI marks an asset stale when either changes.

Metadata, tags, log lines and failure messages hold identifiers, counts, digests, costs and
links, never content: no title, passage text, entity name, fact or evidence quote. Dagster's SQL
event storage cannot remove one partition's events, so whatever enters it stays after an erasure;
the store holds the content, and ``lightfoot explain doc ID`` (or the service's page) reads it.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import dagster as dg

import lightfoot_pipeline
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.fingerprint import fingerprint as store_fingerprint
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import TableSpec, spec_for
from lightfoot_pipeline.store.transaction import Transaction

STORE_POOL = "lightfoot_store"  # one store writer at a time (the lock on object stores)
# What every asset's output is a function of: the engine and the index's settings.
CODE_VERSION = "{}-{}".format(lightfoot_pipeline.__version__, hashlib.sha256(
    json.dumps(IndexSettings().shape_of_index(), sort_keys=True, default=str).encode()).hexdigest()[:12])


def explain_hint(doc_id: str) -> str:
    """The command that shows a document's content and what it contributed (read from the store,
    so an erased document's content is gone from it too)."""
    return f"lightfoot explain doc {shlex.quote(doc_id)}"


def column_schema(spec: TableSpec, *more: TableSpec) -> dict[str, dg.TableSchema]:
    """The definition metadata that declares the columns of an asset's store tables: its first
    table's as ``dagster/column_schema``, each further table's as ``column_schema/<table>``."""
    def schema(table: TableSpec) -> dg.TableSchema:
        return dg.TableSchema(columns=[dg.TableColumn(field.name, str(field.type), description=table.description
                                                      if i == 0 else None) for i, field in enumerate(table.schema)])

    return {"dagster/column_schema": schema(spec), **{f"column_schema/{t.name}": schema(t) for t in more}}


def add_document_metadata(context: dg.AssetExecutionContext, per_document: Mapping[str, Mapping[str, object]],
                          asset_key: dg.AssetKey | None = None) -> None:
    """Metadata on each document's own partition (``dagster/row_count`` among it).

    Dagster checks each partition key against the run's range by listing every key of the
    partitions definition; with a document partition per document, that listing is read once for
    the run's documents here rather than once per document (which made a 1,000-document run over
    100,000 partitions spend minutes listing keys).
    """
    with _partition_keys_listed_once(context.instance):
        for doc_id, metadata in sorted(per_document.items()):
            context.add_asset_metadata(dict(metadata), asset_key=asset_key, partition_key=doc_id)


@contextmanager
def _partition_keys_listed_once(instance: dg.DagsterInstance) -> Iterator[None]:
    """Within the block, each dynamic partitions definition's keys are read from the instance once."""
    listed: dict[str, Sequence[str]] = {}
    read = instance.get_dynamic_partitions

    def once(partitions_def_name: str) -> Sequence[str]:
        if partitions_def_name not in listed:
            listed[partitions_def_name] = read(partitions_def_name)
        return listed[partitions_def_name]

    instance.get_dynamic_partitions = once  # type: ignore[method-assign]
    try:
        yield
    finally:
        del instance.get_dynamic_partitions

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
    per_document: bool = False,
) -> dict[str, dg.RawMetadataValue]:
    """Metadata for a materialization that left the store at ``manifest``.

    ``per_document``: for a range of document partitions, where the row count, model calls and
    cost of each document go on its own partition; the run's are kept under ``run_`` keys.
    """
    rows = rows if rows is not None else table_rows(store, manifest, tables)
    run = "run_" if per_document else ""
    metadata: dict[str, dg.RawMetadataValue] = {
        "rows": dg.MetadataValue.json(rows),
        "table_versions": dg.MetadataValue.json({name: manifest.versions.get(name) for name in tables}),
        "store_commit": dg.MetadataValue.int(manifest.seq),
        "store_changed": dg.MetadataValue.bool(changed),
        "store": dg.MetadataValue.path(store.uri),
        f"{run}model_calls": dg.MetadataValue.int(model_calls),
        f"{run}cost_usd": dg.MetadataValue.float(round(float(cost_usd), 9)),
    }
    if tables:
        metadata["dagster/uri"] = dg.MetadataValue.path(store.table_uri(tables[0]))
        metadata["table_rows" if per_document else "dagster/row_count"] = dg.MetadataValue.int(rows[tables[0]])
    if fingerprint and manifest.seq:
        metadata["store_fingerprint"] = dg.MetadataValue.text(store_fingerprint(store, manifest).digest)
    return metadata
