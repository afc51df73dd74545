"""The metadata every materialization reports: rows, table versions, fingerprint, model calls, cost.

With it, the Dagster UI is the index's lineage and provenance view: which store commit an asset
materialization made, which version of each Delta table it left, and what it cost.

A partition is an ingestion batch (assets/partitions.py): a run writes one materialization per
asset, which counts the batch's documents, passages, names, model calls, tokens and cost, and
links to the batch on the project's page (:func:`batch_metadata`). ``table_rows`` is the size of
the asset's whole store table, ``dagster/row_count`` the batch's own rows. Every asset declares its tables (:func:`table_metadata`) and a code version of its
own (assets/code_versions.py), so the UI marks an asset stale when the code that computes it or
the index's settings change.

Metadata, tags, log lines and failure messages hold identifiers, counts, digests, costs and
links, never content: no title, passage text, entity name, fact or evidence quote. Dagster's SQL
event storage cannot remove one partition's events, so whatever enters it stays after an erasure;
the store holds the content, and ``lightfoot explain doc ID`` (or the service's page) reads it.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterable, Mapping

import dagster as dg

from assets.keys import COST_RUN_TAG, COST_USD_TAG, MODEL_CALLS_TAG, TOKENS_IN_TAG, TOKENS_OUT_TAG
from lightfoot_pipeline.operations.batches import StoreState
from lightfoot_pipeline.provenance.batches import batch_link
from lightfoot_pipeline.store.vectors import VECTOR_CACHE_COLUMNS

STORE_POOL = "lightfoot_store"  # one store writer at a time (the lock on object stores)


def metadata_value(value: object) -> dg.MetadataValue:
    """A value as the metadata value of its type: a bool, an int, a float, a string as text,
    anything else (a dict, a list) as JSON."""
    if isinstance(value, bool):
        return dg.MetadataValue.bool(value)
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    if isinstance(value, float):
        return dg.MetadataValue.float(value)
    if isinstance(value, str):
        return dg.MetadataValue.text(value)
    return dg.MetadataValue.json(value)


def report_metadata(report: object, fields: Iterable[str] | None = None, *,
                    names: Mapping[str, str] | None = None) -> dict[str, dg.MetadataValue]:
    """An operation's report (a dataclass) as metadata: each of its ``fields`` (every field, when
    None) under its own name, or the one ``names`` gives it, as a value of its type
    (:func:`metadata_value`). A field that is None is left out."""
    chosen = [f.name for f in dataclasses.fields(report)] if fields is None else list(fields)  # type: ignore[arg-type]
    names = names or {}
    return {names.get(name, name): metadata_value(value) for name in chosen
            if (value := getattr(report, name)) is not None}


def table_metadata(spec, *more) -> dict[str, dg.RawMetadataValue]:
    """The definition metadata that declares an asset's store tables (Delta tables).

    Its own table, the first, under Dagster's table keys: ``dagster/table_name``
    (``lightfoot.<table>``), ``dagster/column_schema`` and ``dagster/storage_kind``, with the
    table's description as ``table_description``; each further table it writes as
    ``column_schema/<table>`` and ``table_description/<table>``. A description is the table's:
    no column carries it. Its location (``dagster/uri``) depends on the store, so each
    materialization reports it.
    """
    metadata: dict[str, dg.RawMetadataValue] = {
        "dagster/table_name": f"lightfoot.{spec.name}",
        "dagster/column_schema": _schema(spec),
        "dagster/storage_kind": "deltalake",
        "table_description": dg.MetadataValue.text(spec.description),
    }
    for table in more:
        metadata[f"column_schema/{table.name}"] = _schema(table)
        metadata[f"table_description/{table.name}"] = dg.MetadataValue.text(table.description)
    return metadata


def vector_cache_metadata(kind: str) -> dict[str, dg.RawMetadataValue]:
    """The definition metadata of a LanceDB vector cache (lightfoot_pipeline/store/vectors.py):
    its columns and description. One table per embedding model (``<kind>__<model>``), so its name
    and location are reported by each materialization, which knows the model."""
    return {
        "dagster/column_schema": dg.TableSchema(columns=[
            dg.TableColumn(name, type_, description=about) for name, (type_, about) in VECTOR_CACHE_COLUMNS.items()
        ]),
        "dagster/storage_kind": "lancedb",
        "table_description": dg.MetadataValue.text(
            f"LanceDB table {kind}__<model> under the store's vectors/ folder: one vector per text and embedding "
            "model, computed once and kept; rows hold a hash of the text, never the text."),
    }


def _schema(table) -> dg.TableSchema:
    return dg.TableSchema(columns=[dg.TableColumn(field.name, str(field.type)) for field in table.schema])


def batch_metadata(batch_id: str, counts: Mapping[str, int] | None = None) -> dict[str, dg.RawMetadataValue]:
    """Where to read a batch, first (the project's page for it, ``LIGHTFOOT_PAGE_URL``, and the
    command that shows it), then its counts (documents added, replaced, kept, deleted by the batch)."""
    metadata: dict[str, dg.RawMetadataValue] = {"batch": dg.MetadataValue.text(batch_id)}
    link = batch_link(batch_id)
    if link:
        metadata["batch_page"] = dg.MetadataValue.url(link)
    # The page's batch view answers the operator only: say how to be one (service/page.py).
    metadata["read_with"] = dg.MetadataValue.text(f"lightfoot explain batch {shlex.quote(batch_id)}; the page's batch "
                                                  "view needs the operator: lightfoot serve --as '*' (loopback) or a "
                                                  "token of the group *")
    metadata.update({f"documents_{name}" if name != "documents" else "documents": dg.MetadataValue.int(int(n))
                     for name, n in (counts or {}).items()})
    return metadata


# Steps that ask the model and write only the extraction cache: LIGHTFOOT_EXTRACTION_SLOTS at once.
EXTRACTION_POOL = "lightfoot_extraction"


def add_run_cost(context: dg.AssetExecutionContext, *, model_calls: int, tokens_in: int, tokens_out: int,
                 cost_usd: float) -> dict[str, str]:
    """Add a step's model calls, tokens and cost to its run's tags, where the run page shows them.

    The tags hold the run's totals: each step that calls the model adds its own to what the run's
    earlier steps recorded (the steps that do so run one after another, in process). A step with
    no call still records zeros, so a run that cost nothing says so. A re-execution starts with
    its parent's tags; ``lightfoot/cost_of_run`` says whose totals they are, so it counts only its
    own calls. Returns the tags set."""
    run_id = context.run.run_id
    run = context.instance.get_run_by_id(run_id)
    before = run.tags if run is not None and run.tags.get(COST_RUN_TAG) == run_id else {}

    def prior(tag: str) -> float:
        try:
            return float(before.get(tag, 0))
        except ValueError:
            return 0.0

    tags = {
        MODEL_CALLS_TAG: str(int(prior(MODEL_CALLS_TAG)) + model_calls),
        TOKENS_IN_TAG: str(int(prior(TOKENS_IN_TAG)) + tokens_in),
        TOKENS_OUT_TAG: str(int(prior(TOKENS_OUT_TAG)) + tokens_out),
        COST_USD_TAG: f"{prior(COST_USD_TAG) + float(cost_usd):.6f}",
        COST_RUN_TAG: run_id,
    }
    context.instance.add_run_tags(run_id, tags)
    return tags


def store_metadata(state: StoreState, store_uri: str, *, model_calls: int = 0,
                   cost_usd: float = 0.0) -> dict[str, dg.RawMetadataValue]:
    """Metadata for a materialization whose step left the store in ``state``."""
    metadata: dict[str, dg.RawMetadataValue] = {
        "rows": dg.MetadataValue.json(state.rows),
        "table_versions": dg.MetadataValue.json(state.versions),
        "store_commit": dg.MetadataValue.int(state.seq),
        "store_changed": dg.MetadataValue.bool(state.changed),
        "store": dg.MetadataValue.path(store_uri),
        "model_calls": dg.MetadataValue.int(model_calls),
        "cost_usd": dg.MetadataValue.float(round(float(cost_usd), 9)),
    }
    if state.tables:
        own = state.tables[0]
        metadata["dagster/uri"] = dg.MetadataValue.path(state.uris[own])
        metadata["table_rows"] = metadata["dagster/row_count"] = dg.MetadataValue.int(state.rows[own])
    if state.fingerprint:
        metadata["store_fingerprint"] = dg.MetadataValue.text(state.fingerprint)
    return metadata
