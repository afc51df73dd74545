"""The store's tables: one per concept, each with its schema, key and bucket column.

Index tables hold the index's content and make up its fingerprint: after deleting documents B
from an index of A ∪ B, every index table equals the same table of a fresh index of A.
Operational tables (the extraction cache, the cost ledger, the deletion log) record history and
are not part of the fingerprint; erasure purges the parts of them that hold deleted text.

Every table is partitioned by ``bucket``, a stable hash of one column modulo the store's bucket
count, so that a change reads and rewrites a few partitions instead of a whole table or one file
per document. The column is the one a change looks rows up by: ``doc_id`` for documents,
passages, extractions and ``document_keys`` (each document's names and facts); the name for
forms and the fact for fact assertions, so that the graph stage reads a name's passages from one
bucket and a document's forms are found through its keys; the key for the graph tables. A link
is found from either of its names: ``name_links`` is bucketed by ``name_a`` and its mirror
``name_links_reverse`` by ``name_b``.

The store log records this layout (``LAYOUT_VERSION`` and the bucket count) with every commit;
``lightfoot migrate`` rewrites a store of an earlier layout.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

BUCKET = "bucket"
# How rows are bucketed and stored (see the module docstring); 1 was every per-document table by
# doc_id, 2 kept each name's band keys whole (``name_keys``, 1,600 bytes a name at the default banding).
LAYOUT_VERSION = 3
# Tables of earlier layouts that this one no longer has; a migration deletes them.
RETIRED_TABLES = ("name_keys",)


@dataclass(frozen=True)
class TableSpec:
    name: str
    schema: pa.Schema  # without the bucket column
    key: tuple[str, ...]
    bucket_by: str
    per_document: bool
    fingerprinted: bool = True
    description: str = ""
    # Counts of the rows that match a predicate, kept in the store log beside the row count by
    # every commit that writes the table (transaction.py), so that a question such as "is an
    # erasure owed?" is answered without reading the table: (name, predicate over its columns).
    tallies: tuple[tuple[str, Callable[[], pl.Expr]], ...] = ()

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.schema.append(pa.field(BUCKET, pa.int32(), nullable=False))

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    def empty(self) -> pl.DataFrame:
        """No rows, the table's columns and types (bucket included)."""
        return pl.DataFrame(schema=_polars_schema(self.arrow_schema))


_POLARS_TYPES = {
    pa.string(): pl.String, pa.int64(): pl.Int64, pa.int32(): pl.Int32, pa.float64(): pl.Float64,
    pa.bool_(): pl.Boolean, pa.date32(): pl.Date, pa.binary(): pl.Binary,
    pa.timestamp("us", tz="UTC"): pl.Datetime("us", "UTC"),
}


def arrow_frame(table: pa.Table) -> pl.DataFrame:
    """An Arrow table as a Polars DataFrame (``pl.from_arrow``, which gives a Series only for an Arrow array)."""
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame), "an Arrow table converts to a DataFrame"
    return frame


@functools.cache
def _polars_schema(schema: pa.Schema) -> dict:
    """The Polars types of an Arrow schema (direct, so that no conversion machinery loads)."""
    return {f.name: _POLARS_TYPES.get(f.type) or arrow_frame(pa.schema([f]).empty_table()).dtypes[0]
            for f in schema}


def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(name, kind) for name, kind in fields])


S, I, F, B = pa.string(), pa.int64(), pa.float64(), pa.bool_()

DOCUMENTS = TableSpec(
    "documents",
    _schema(("doc_id", S), ("title", S), ("source", S), ("content_hash", S), ("n_passages", I),
            ("retention_until", pa.date32())),
    key=("doc_id",), bucket_by="doc_id", per_document=True,
    description="Live documents with their retention metadata.",
)
DOCUMENT_READERS = TableSpec(
    "document_readers",
    _schema(("doc_id", S), ("readers", S)),
    key=("doc_id",), bucket_by="doc_id", per_document=True,
    description="Who may read each live document: its reader groups, sorted and comma-joined ('' for nobody; "
                "ingest/readers.py).",
)
PASSAGES = TableSpec(
    "passages",
    _schema(("chunk_id", S), ("doc_id", S), ("ordinal", I), ("title", S), ("text", S), ("text_hash", S)),
    key=("chunk_id",), bucket_by="doc_id", per_document=True,
    description="Chunks of live documents; each gets one extraction call.",
)
PASSAGE_SOURCES = TableSpec(
    "passage_sources",
    _schema(("chunk_id", S), ("doc_id", S), ("page", I), ("section", S), ("char_start", I), ("char_end", I)),
    key=("chunk_id",), bucket_by="doc_id", per_document=True,
    description="Where a passage of a file stands in it: page, heading path, character offsets.",
)
EXTRACTIONS = TableSpec(
    "extractions",
    _schema(("chunk_id", S), ("doc_id", S), ("status", S), ("reason", S), ("extractor", S), ("cache_key", S),
            ("n_entities", I), ("n_facts", I), ("n_repaired", I), ("n_dropped", I), ("n_flagged", I),
            ("issues", S), ("record", S), ("raw_output", S)),
    key=("chunk_id",), bucket_by="doc_id", per_document=True,
    description="The validated extraction of every live passage, or why it failed.",
)
FORMS = TableSpec(
    "forms",
    _schema(("chunk_id", S), ("doc_id", S), ("name", S), ("type", S), ("surface", S)),
    key=("chunk_id", "name", "type"), bucket_by="name", per_document=True,
    description="Every normalised entity name and fact subject and object, per passage.",
)
FACT_SOURCES = TableSpec(
    "fact_sources",
    _schema(("fact_id", S), ("chunk_id", S), ("doc_id", S), ("subject", S), ("subject_type", S),
            ("predicate", S), ("object", S), ("object_type", S), ("evidence", S), ("evidence_verified", B)),
    key=("fact_id", "chunk_id"), bucket_by="fact_id", per_document=True,
    description="Which passage asserted which fact, with its evidence quote.",
)
NAME_LINKS = TableSpec(
    "name_links",
    _schema(("type", S), ("name_a", S), ("name_b", S), ("similarity", F)),
    key=("type", "name_a", "name_b"), bucket_by="name_a", per_document=False,
    description="Pairs of live names of one type with cosine >= the synonym threshold (name_a < name_b).",
)
NAME_LINKS_REVERSE = TableSpec(
    "name_links_reverse",
    NAME_LINKS.schema,
    key=("type", "name_a", "name_b"), bucket_by="name_b", per_document=False, fingerprinted=False,
    description="The rows of name_links again, bucketed by name_b: the links of a name are in its two buckets.",
)
ALIASES = TableSpec(
    "aliases",
    _schema(("name", S), ("type", S), ("entity_id", S), ("surface", S), ("n_chunks", I), ("chunk_digest", S)),
    key=("name", "type"), bucket_by="name", per_document=False,
    description="Every live name, the entity it belongs to and its provenance.",
)
ENTITIES = TableSpec(
    "entities",
    _schema(("entity_id", S), ("type", S), ("canonical_name", S), ("display_name", S), ("n_aliases", I),
            ("n_chunks", I)),
    key=("entity_id",), bucket_by="entity_id", per_document=False,
    description="Connected components of names linked at the entity threshold.",
)
MENTIONS = TableSpec(
    "mentions",
    _schema(("entity_id", S), ("chunk_id", S), ("doc_id", S)),
    key=("entity_id", "chunk_id"), bucket_by="entity_id", per_document=False,
    description="Which passages mention which entity.",
)
SYNONYM_EDGES = TableSpec(
    "synonym_edges",
    _schema(("entity_a", S), ("entity_b", S), ("similarity", F)),
    key=("entity_a", "entity_b"), bucket_by="entity_a", per_document=False,
    description="Same-type entity pairs with a member-name pair at cosine >= the synonym threshold.",
)
FACTS = TableSpec(
    "facts",
    _schema(("fact_id", S), ("subject", S), ("subject_type", S), ("predicate", S), ("object", S),
            ("object_type", S), ("n_sources", I), ("source_digest", S)),
    key=("fact_id",), bucket_by="fact_id", per_document=False,
    description="(subject, predicate, object) facts that at least one live passage asserts.",
)


def erasure_owed() -> pl.Expr:
    """A tombstone whose deletion asked for an erasure that has not been done."""
    return pl.col("erase") & pl.col("erased_at").is_null()


TOMBSTONES = TableSpec(
    "tombstones",
    _schema(("doc_id", S), ("requested_at", pa.timestamp("us", tz="UTC")), ("reason", S), ("erase", B),
            ("erased_at", pa.timestamp("us", tz="UTC"))),
    key=("doc_id", "requested_at"), bucket_by="doc_id", per_document=True, fingerprinted=False,
    description="The deletion log: which documents were deleted, when, why, and whether erased.",
    tallies=(("erasures_owed", erasure_owed),),
)

NAME_SKETCHES = TableSpec(
    "name_sketches",
    _schema(("type", S), ("name", S), ("group_hash", pa.int64()), ("sketch", pa.binary())),
    key=("type", "name"), bucket_by="name", per_document=False, fingerprinted=False,
    description="The LSH band keys of every live name in two parts: the high bits its number group sets, and its "
                "sketch, the sign bits of every band (index/name_sketches.py); from its vector and name alone.",
)
DOCUMENT_KEYS = TableSpec(
    "document_keys",
    _schema(("doc_id", S), ("kind", S), ("type", S), ("key", S)),
    key=("doc_id", "kind", "type", "key"), bucket_by="doc_id", per_document=False, fingerprinted=False,
    description="The names (kind 'name') and facts (kind 'fact') of each document's forms and fact assertions.",
)

GRAPH_QUEUE = TableSpec(
    "graph_queue",
    _schema(("kind", S), ("type", S), ("key", S)),
    key=("kind", "type", "key"), bucket_by="key", per_document=False, fingerprinted=False,
    description="Names and facts whose passages changed since the graph stage last ran (emptied by it).",
)

INDEX_TABLES: tuple[TableSpec, ...] = (
    DOCUMENTS, DOCUMENT_READERS, PASSAGES, PASSAGE_SOURCES, EXTRACTIONS, FORMS, FACT_SOURCES,
    NAME_LINKS, ALIASES, ENTITIES, MENTIONS, SYNONYM_EDGES, FACTS,
)
PER_DOCUMENT_TABLES: tuple[TableSpec, ...] = tuple(t for t in INDEX_TABLES if t.per_document)
GRAPH_TABLES: tuple[TableSpec, ...] = tuple(t for t in INDEX_TABLES if not t.per_document)

# Operational tables of the stages above the store. Journal tables (appended outside the store log,
# store/journals.py): the extraction cache and its claims (ingest/extraction/cache.py, claims.py) and
# the cost ledger (store/ledger.py). ``source_files`` (ingest/sources.py) is committed with the index.
TS_UTC = pa.timestamp("us", tz="UTC")
EXTRACTION_CACHE = TableSpec(
    "extraction_cache",
    _schema(("cache_key", S), ("model", S), ("prompt_hash", S), ("schema_hash", S), ("text_hash", S),
            ("output", S), ("tokens_in", I), ("tokens_out", I), ("created_at", TS_UTC)),
    key=("cache_key",), bucket_by="cache_key", per_document=False, fingerprinted=False,
    description="Model answers by (model, prompt, schema, passage text): each paid for once.",
)
EXTRACTION_CLAIMS = TableSpec(
    "extraction_claims",
    _schema(("cache_key", S), ("seq", I), ("event", S), ("claimant", S), ("reason", S), ("at", TS_UTC),
            ("expires_at", TS_UTC)),
    key=("cache_key", "seq"), bucket_by="cache_key", per_document=False, fingerprinted=False,
    description="Which run asks the model for which passage text, and why a release came without an answer.",
)
LLM_LEDGER = TableSpec(
    "llm_ledger",
    _schema(("call_id", S), ("run_id", S),
            ("purpose", S),  # "extract", "answer", …
            ("model", S), ("doc_id", S), ("chunk_id", S), ("cache_key", S),
            ("status", S),  # "ok", "unusable" (answer could not be parsed), "error"
            ("error_kind", S),  # LLMError.kind for status "error"
            ("attempts", I), ("tokens_in", I), ("tokens_out", I),
            ("usage_reported", B),  # False: the endpoint sent no usage; estimated
            ("price_in_per_mtok", F), ("price_out_per_mtok", F),
            ("price_source", S),  # "configured", "list" or "unpriced"
            ("cost_usd", F), ("seconds", F), ("created_at", TS_UTC)),
    key=("call_id",), bucket_by="call_id", per_document=False, fingerprinted=False,
    description="Every model call: run, passage, tokens, prices and cost (ids and numbers only).",
)
SOURCE_FILES = TableSpec(
    "source_files",
    _schema(("doc_id", S), ("source", S), ("size", I), ("mtime_ns", I), ("sha256", S), ("sidecar_sha256", S),
            ("chunking", S), ("media_type", S), ("status", S), ("reason", S), ("n_passages", I)),
    key=("doc_id",), bucket_by="doc_id", per_document=True, fingerprinted=False,
    description="The files of synced sources: what was seen of each, and whether it was indexed or why not.",
)
BATCH_DOCUMENTS = TableSpec(
    "batch_documents",
    _schema(("batch", S), ("doc_id", S), ("action", S), ("seq", I), ("run_id", S), ("at", TS_UTC)),
    key=("batch", "doc_id", "action", "seq"), bucket_by="doc_id", per_document=True, fingerprinted=False,
    description="Which ingestion batch added, replaced, kept or deleted which document, in which store commit and "
                "run (ids only; store/batches.py).",
)
# Extraction through a provider's Batch API or an offline batch runner (journals;
# ingest/extraction/batch_record.py): each request file's batch, its events, and the passages it asks for.
EXTRACTION_BATCHES = TableSpec(
    "extraction_batches",
    _schema(("batch", S), ("seq", I),
            ("event", S),  # planned, submitted, state, collected, files_deleted, cancelled, refused, exported
            ("mode", S),  # "provider" or "offline"
            ("state", S),  # the provider's status of the batch (validating, in_progress, completed, …)
            ("provider_batch_id", S), ("input_file_id", S), ("output_file_id", S), ("error_file_id", S),
            ("requests", I), ("answered", I), ("failed", I),
            ("reason", S),  # the engine's words and counts, never the provider's text
            ("run_id", S), ("at", TS_UTC)),
    key=("batch", "seq"), bucket_by="batch", per_document=False, fingerprinted=False,
    description="Each extraction batch's events: planned, its files uploaded and batch created, the provider's "
                "states, collected, its files deleted at the provider (ids, counts and reasons only).",
)
EXTRACTION_BATCH_REQUESTS = TableSpec(
    "extraction_batch_requests",
    _schema(("batch", S), ("cache_key", S), ("chunk_id", S), ("doc_id", S)),
    key=("batch", "cache_key", "chunk_id"), bucket_by="doc_id", per_document=False, fingerprinted=False,
    description="Which passages (by chunk and cache key, the request's custom_id) each extraction batch asks for.",
)
OPERATIONAL_TABLES: tuple[TableSpec, ...] = (
    NAME_LINKS_REVERSE, NAME_SKETCHES, DOCUMENT_KEYS, TOMBSTONES, GRAPH_QUEUE,
    EXTRACTION_CACHE, EXTRACTION_CLAIMS, LLM_LEDGER, SOURCE_FILES, BATCH_DOCUMENTS,
    EXTRACTION_BATCHES, EXTRACTION_BATCH_REQUESTS,
)

# Every table a store can hold, whatever has been imported: vacuum, recovery and migration go
# through all of them.
_ALL_TABLES: dict[str, TableSpec] = {t.name: t for t in (*INDEX_TABLES, *OPERATIONAL_TABLES)}


def spec_for(name: str) -> TableSpec:
    """The table of that name (KeyError, naming the known tables, for any other)."""
    try:
        return _ALL_TABLES[name]
    except KeyError:
        raise KeyError(f"no table named {name!r}; known: {sorted(_ALL_TABLES)}") from None


def all_specs() -> list[TableSpec]:
    """Every table a store can hold: the index tables, then the operational ones."""
    return list(_ALL_TABLES.values())


def bucket_of(value: str, n_buckets: int) -> int:
    """The stable bucket of a key value (CRC-32, identical on every platform and version)."""
    return zlib.crc32(value.encode("utf-8")) % n_buckets


def bucket_groups(buckets: Sequence[int], rows_per_bucket: float, rows: int) -> list[list[int]]:
    """``buckets`` in consecutive groups of about ``rows`` rows each (``rows_per_bucket``: a
    bucket's rows on average), at least one bucket a group: how a rewrite, a copy or a scan of many
    buckets holds a group at a time, never the table."""
    size = max(1, int(rows // max(rows_per_bucket, 1.0)))
    return [list(buckets[start:start + size]) for start in range(0, len(buckets), size)]


def with_buckets(frame: pl.DataFrame, spec: TableSpec, n_buckets: int) -> pl.DataFrame:
    """The rows in the spec's column order, with their bucket column."""
    buckets = pl.Series(
        BUCKET, [bucket_of(v, n_buckets) for v in frame.get_column(spec.bucket_by).to_list()], dtype=pl.Int32
    )
    return frame.select(spec.columns).with_columns(buckets)


def conform(frame: pl.DataFrame, spec: TableSpec) -> pa.Table:
    """Rows as an Arrow table of exactly the spec's schema (bucket included)."""
    return frame.select([*spec.columns, BUCKET]).to_arrow().cast(spec.arrow_schema)


def row_hashes(frame: pl.DataFrame, spec: TableSpec) -> pl.Series:
    """A 64-bit hash of each row's columns (bucket included): how two versions' rows are told apart."""
    return frame.select([*spec.columns, BUCKET]).hash_rows(seed=7)


def bucket_changes(old: pl.DataFrame, new: pl.DataFrame, spec: TableSpec) -> tuple[set[int], pl.DataFrame]:
    """Buckets whose rows differ between two versions of a table, and the rows added to those of
    them that only grew: every row they had is still there, so a commit can append the added rows
    instead of rewriting the bucket (a batch of new documents adds forms, mentions and links to
    nearly every bucket and changes none of the rows already there).

    Rows are compared by a 64-bit hash of all their columns, buckets by the count and sums of
    their rows' hashes. A grown bucket's row count must be its old count plus the added rows, so
    a row repeated in the new version makes the bucket a rewrite, never an append that loses it.
    """
    def hashed(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.select(BUCKET).with_columns(_h=row_hashes(frame, spec))

    def summary(rows: pl.DataFrame) -> pl.DataFrame:
        return rows.group_by(BUCKET).agg(
            pl.len().alias("n"),
            (pl.col("_h") % (1 << 32)).cast(pl.Int64).sum().alias("lo"),
            (pl.col("_h") // (1 << 32)).cast(pl.Int64).sum().alias("hi"),
        )

    old_rows, new_rows = hashed(old), hashed(new).with_row_index("_row")
    joined = summary(old_rows).join(summary(new_rows.drop("_row")), on=BUCKET, how="full", coalesce=True,
                                    suffix="_new")
    differs = joined.filter(
        (pl.col("n") != pl.col("n_new")).fill_null(True)
        | (pl.col("lo") != pl.col("lo_new")).fill_null(True)
        | (pl.col("hi") != pl.col("hi_new")).fill_null(True)
    )
    changed = set(differs.get_column(BUCKET).to_list())
    if not changed:
        return changed, new.clear()
    scope = sorted(changed)
    old_rows, new_rows = old_rows.filter(pl.col(BUCKET).is_in(scope)), new_rows.filter(pl.col(BUCKET).is_in(scope))
    # A row's bucket follows from its columns, so equal hashes are in the same bucket.
    shrunk = old_rows.join(new_rows, on="_h", how="anti").get_column(BUCKET).unique().to_list()
    added = new_rows.filter(~pl.col(BUCKET).is_in(shrunk)).join(old_rows.select("_h"), on="_h", how="anti")
    counts = (
        differs.filter(~pl.col(BUCKET).is_in(shrunk))
        .join(added.group_by(BUCKET).agg(pl.len().alias("n_added")), on=BUCKET, how="left")
        .filter((pl.col("n_added") > 0) & (pl.col("n_new") == pl.col("n").fill_null(0) + pl.col("n_added")))
    )
    grown = counts.get_column(BUCKET).to_list()
    rows = added.filter(pl.col(BUCKET).is_in(grown)).get_column("_row")
    return changed, new.select(pl.all().gather(rows))


def net_changes(removed: pl.DataFrame, added: pl.DataFrame, spec: TableSpec) -> tuple[set[int], set[int], pl.DataFrame]:
    """What a transaction's removals and additions amount to, from those rows alone: the buckets
    whose rows changed, those of them that lost a row, and the rows added to the others.

    A row removed and added again (a derived row recomputed to the same values) cancels out, as
    do a row added and removed again; rows are told apart by a 64-bit hash of all their columns,
    as in :func:`bucket_changes`, and counted, so a row added twice is added twice. A row with
    some copies removed and more added makes its bucket one that lost a row (it is rewritten).
    """
    added_hashes = row_hashes(added, spec)

    def counted(frame: pl.DataFrame, hashes: pl.Series, what: str) -> pl.DataFrame:
        return (frame.select(BUCKET).with_columns(_h=hashes)
                .group_by("_h").agg(pl.first(BUCKET), pl.len().cast(pl.Int64).alias(what)))

    net = (
        counted(added, added_hashes, "n_added")
        .join(counted(removed, row_hashes(removed, spec), "n_removed"), on="_h", how="full",
              coalesce=True)
        .with_columns(pl.coalesce(BUCKET, f"{BUCKET}_right").alias(BUCKET),
                      pl.col("n_added").fill_null(0), pl.col("n_removed").fill_null(0))
        .filter(pl.col("n_added") != pl.col("n_removed"))
    )
    changed = set(net.get_column(BUCKET).to_list())
    shrunk = set(net.filter(pl.col("n_removed") > 0).get_column(BUCKET).to_list())
    gained = net.filter(~pl.col(BUCKET).is_in(sorted(shrunk))).get_column("_h")
    return changed, shrunk, added.filter(added_hashes.is_in(gained.implode()))


def worth_a_presence_check(n_read: int, n_buckets: int) -> bool:
    """Whether a lookup that would read ``n_read`` buckets first reads the looked-up column whole,
    to read only the buckets of the values the table holds (a batch of new documents then reads
    none of theirs). A column read costs about what reading every bucket of it does, so it pays
    only for a lookup of a quarter of the buckets or more: a batch, never one document."""
    return n_read > max(8, n_buckets // 4)


# A lookup of many values reads one bucket in PROBE_EVERY of theirs first; if the table holds looked-up
# values in PROBE_HELD_SHARE of those or more, it reads them all instead of the looked-up column.
PROBE_EVERY = 16
PROBE_HELD_SHARE = 0.75


def probe_of(unread: set[int]) -> list[int]:
    """The buckets read first of a lookup worth a presence check (about one in PROBE_EVERY)."""
    return sorted(unread)[::PROBE_EVERY]


def held_nearly_everywhere(buckets_with_values: int, probe: list[int]) -> bool:
    """Whether the looked-up values are in so many of the probed buckets that they are in nearly
    every bucket: reading the looked-up column whole would then leave almost every bucket to read."""
    return buckets_with_values >= PROBE_HELD_SHARE * len(probe)
