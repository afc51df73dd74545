"""The per-document stage: documents, passages, extractions, forms and fact assertions.

Each function rewrites the rows of a set of documents in the per-document tables of a
transaction and leaves every other document's rows as they are. It reads only the buckets that
hold those documents' rows: their own for documents, passages and extractions, those of their
names and facts (listed in ``document_keys``) for forms and fact assertions. Re-running a
function on the same input stages the same rows, so nothing is written: the stage is idempotent.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.index.forms import fact_sources_frame, forms_frame, forms_of
from lightfoot_pipeline.ingest.chunking import SECTION_SEPARATOR
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.extraction.outcome import (
    OK,
    ExtractionOutcome,
    issues_to_json,
    record_from_json,
    record_to_json,
)
from lightfoot_pipeline.ingest.passages import Passage, split_passages, text_hash
from lightfoot_pipeline.ingest.readers import default_groups, readers_text
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.batches import ADDED, DELETED, READERS, REPLACED, UNCHANGED, log_documents
from lightfoot_pipeline.store.tables import (
    DOCUMENT_KEYS,
    DOCUMENT_READERS,
    DOCUMENTS,
    EXTRACTIONS,
    FACT_SOURCES,
    FORMS,
    GRAPH_QUEUE,
    PASSAGE_SOURCES,
    PASSAGES,
    PER_DOCUMENT_TABLES,
    SOURCE_FILES,
    TOMBSTONES,
    TableSpec,
    with_buckets,
)
from lightfoot_pipeline.store.transaction import Transaction

# The status of a sync source's file whose document was deleted: no sync brings it back, whatever
# the file becomes, until it is readmitted (``lightfoot sync --readmit``).
EXCLUDED = "excluded"


def _document_rows(tx: Transaction, spec: TableSpec, doc_ids: list[str]) -> pl.DataFrame:
    """The staged rows of documents in a per-document table, reading only theirs.

    Forms and fact assertions are bucketed by name and by fact: the documents' keys say which.
    """
    if spec.bucket_by == "doc_id":
        return tx.rows(spec.name, "doc_id", doc_ids)
    kind = "name" if spec is FORMS else "fact"
    keys = tx.rows(DOCUMENT_KEYS.name, "doc_id", doc_ids).filter(pl.col("kind") == kind)
    rows = tx.rows(spec.name, spec.bucket_by, keys.get_column("key").unique().to_list())
    return rows.filter(pl.col("doc_id").is_in(doc_ids))


def _doc_rows(doc_ids: list[str]) -> pl.Expr:
    return pl.col("doc_id").is_in(doc_ids)


def _replace_rows(tx: Transaction, spec: TableSpec, doc_ids: Iterable[str], rows: pl.DataFrame) -> None:
    """Stage ``rows`` as the whole content of ``doc_ids`` in a per-document table."""
    ids = sorted(set(doc_ids))
    old = _document_rows(tx, spec, ids)
    fresh = with_buckets(rows, spec, tx.n_buckets) if rows.height else None
    if spec in (FORMS, FACT_SOURCES):
        old = old.select(spec.columns)
        new = fresh.select(spec.columns) if fresh is not None else old.clear()
        _enqueue(tx, spec, pl.concat([old.join(new, on=spec.columns, how="anti", nulls_equal=True),
                                      new.join(old, on=spec.columns, how="anti", nulls_equal=True)]))
    tx.update(spec.name, remove=_doc_rows(ids), add=fresh)
    if spec in (FORMS, FACT_SOURCES):
        _replace_keys(tx, spec, ids, rows)


def _replace_keys(tx: Transaction, spec: TableSpec, doc_ids: list[str], rows: pl.DataFrame) -> None:
    """Stage the documents' keys of one kind (names of forms, or facts) from their new rows."""
    if spec is FORMS:
        kind, keys = "name", rows.select("doc_id", "type", pl.col("name").alias("key"))
    else:
        kind, keys = "fact", rows.select("doc_id", pl.lit("").alias("type"), pl.col("fact_id").alias("key"))
    keys = keys.unique().select("doc_id", pl.lit(kind).alias("kind"), "type", "key")
    tx.rows(DOCUMENT_KEYS.name, "doc_id", doc_ids)
    tx.update(DOCUMENT_KEYS.name, remove=_doc_rows(doc_ids) & (pl.col("kind") == kind),
              add=with_buckets(keys, DOCUMENT_KEYS, tx.n_buckets) if keys.height else None)


def _enqueue(tx: Transaction, spec: TableSpec, changed: pl.DataFrame) -> None:
    """Queue the names (for forms) or facts (for fact assertions) whose passages changed."""
    if changed.height == 0:
        return
    if spec is FORMS:
        items = changed.select(pl.lit("name").alias("kind"), "type", pl.col("name").alias("key"))
    else:
        items = changed.select(pl.lit("fact").alias("kind"), pl.lit("").alias("type"), pl.col("fact_id").alias("key"))
    items = items.unique()
    queued = tx.rows(GRAPH_QUEUE.name, "key", items.get_column("key").to_list())
    items = items.join(queued.select(GRAPH_QUEUE.columns), on=GRAPH_QUEUE.columns, how="anti")
    if items.height:
        tx.update(GRAPH_QUEUE.name, add=with_buckets(items, GRAPH_QUEUE, tx.n_buckets))


def document_passages(documents: Sequence[Document], settings: IndexSettings) -> list[Passage]:
    return [p for d in documents for p in split_passages(d, settings.max_passage_chars)]


@dataclass
class DocumentChanges:
    """What staging a set of documents does to the documents table, by doc_id, and the readers
    each document gets (``readers``: doc_id → readers text, ingest/readers.py)."""

    new: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # stored before with other text or metadata
    readers_changed: list[str] = field(default_factory=list)  # stored as given but for its readers
    unchanged: list[str] = field(default_factory=list)
    readers: dict[str, str] = field(default_factory=dict)


def document_changes(tx: Transaction, documents: Sequence[Document],
                     environ: Mapping[str, str] | None = None) -> DocumentChanges:
    """Which documents are new, which replace a stored document of the same id, which differ from
    the stored one only in their readers, which are the same.

    A document's readers are those it names; one that names none keeps the readers stored for it,
    and a new one (or one stored before readers were kept) gets the default (``environ``'s
    ``$LIGHTFOOT_DEFAULT_READERS``), so that an input silent about readers never widens them."""
    ids = [d.doc_id for d in documents]
    stored = {
        row["doc_id"]: row
        for row in tx.rows(DOCUMENTS.name, "doc_id", ids)
        .select("doc_id", "title", "source", "content_hash", "retention_until")
        .iter_rows(named=True)
    }
    stored_readers = dict(tx.rows(DOCUMENT_READERS.name, "doc_id", ids).select("doc_id", "readers").iter_rows())
    default = readers_text(default_groups(environ))
    changes = DocumentChanges()
    for d in documents:
        row = stored.get(d.doc_id)
        before = stored_readers.get(d.doc_id) if row is not None else None
        readers = readers_text(d.readers) if d.readers is not None else before if before is not None else default
        changes.readers[d.doc_id] = readers
        if row is None:
            changes.new.append(d.doc_id)
        elif (row["title"], row["source"], row["content_hash"], row["retention_until"]) != (
            d.title, d.source, _content_hash(d), d.retention_until
        ):
            changes.replaced.append(d.doc_id)
        elif readers != before:
            changes.readers_changed.append(d.doc_id)
        else:
            changes.unchanged.append(d.doc_id)
    return changes


def _content_hash(document: Document) -> str:
    return text_hash(f"{document.title}\x00{document.text}")


def upsert_documents(tx: Transaction, documents: Sequence[Document], settings: IndexSettings) -> list[Passage]:
    """Stage documents, their readers and their passages; drop derived rows of passages that no
    longer exist. What changed (:func:`document_changes`) is logged in the current batch.

    A document whose text and metadata are as stored but whose readers differ (``readers_changed``)
    gets its readers row rewritten and nothing else: its passages stage as they are, so no
    extraction, form or graph-queue row of it changes."""
    passages = document_passages(documents, settings)
    by_doc: dict[str, int] = {}
    for p in passages:
        by_doc[p.doc_id] = by_doc.get(p.doc_id, 0) + 1
    doc_rows = pl.DataFrame(
        [
            {
                "doc_id": d.doc_id,
                "title": d.title,
                "source": d.source,
                "content_hash": _content_hash(d),
                "n_passages": by_doc.get(d.doc_id, 0),
                "retention_until": d.retention_until,
            }
            for d in documents
        ],
        schema={"doc_id": pl.String, "title": pl.String, "source": pl.String, "content_hash": pl.String,
                "n_passages": pl.Int64, "retention_until": pl.Date},
    )
    passage_rows = pl.DataFrame(
        [
            {"chunk_id": p.chunk_id, "doc_id": p.doc_id, "ordinal": p.ordinal, "title": p.title, "text": p.text,
             "text_hash": text_hash(p.text)}
            for p in passages
        ],
        schema={"chunk_id": pl.String, "doc_id": pl.String, "ordinal": pl.Int64, "title": pl.String,
                "text": pl.String, "text_hash": pl.String},
    )
    source_rows = pl.DataFrame(
        [
            {"chunk_id": p.chunk_id, "doc_id": p.doc_id, "page": p.page,
             "section": SECTION_SEPARATOR.join(p.section) or None, "char_start": p.char_start, "char_end": p.char_end}
            for p in passages if p.has_location
        ],
        schema={"chunk_id": pl.String, "doc_id": pl.String, "page": pl.Int64, "section": pl.String,
                "char_start": pl.Int64, "char_end": pl.Int64},
    )
    doc_ids = [d.doc_id for d in documents]
    changes = document_changes(tx, documents)
    reader_rows = pl.DataFrame({"doc_id": list(changes.readers), "readers": list(changes.readers.values())},
                               schema={"doc_id": pl.String, "readers": pl.String})
    log_documents(tx, {ADDED: changes.new, REPLACED: changes.replaced, READERS: changes.readers_changed,
                       UNCHANGED: changes.unchanged})
    _replace_rows(tx, DOCUMENTS, doc_ids, doc_rows)
    _replace_rows(tx, DOCUMENT_READERS, doc_ids, reader_rows)
    _replace_rows(tx, PASSAGES, doc_ids, passage_rows)
    _replace_rows(tx, PASSAGE_SOURCES, doc_ids, source_rows)
    live_chunks = passage_rows.get_column("chunk_id").to_list()
    ids = sorted(set(doc_ids))
    stale = _doc_rows(ids) & ~pl.col("chunk_id").is_in(live_chunks)
    for spec in (EXTRACTIONS, FORMS, FACT_SOURCES):
        rows = _document_rows(tx, spec, ids).filter(stale)
        if rows.height:
            if spec is not EXTRACTIONS:
                _enqueue(tx, spec, rows)
                _drop_keys(tx, spec, rows)
            tx.update(spec.name, remove=stale)
    return passages


def _drop_keys(tx: Transaction, spec: TableSpec, removed: pl.DataFrame) -> None:
    """Drop the documents' keys that none of their remaining rows (after removing ``removed``) uses."""
    ids = removed.get_column("doc_id").unique().to_list()
    column = "name" if spec is FORMS else "fact_id"
    rest = _document_rows(tx, spec, ids).join(removed.select(spec.columns), on=spec.columns, how="anti",
                                               nulls_equal=True)
    _replace_keys(tx, spec, ids, rest.select("doc_id", column, *(["type"] if spec is FORMS else [])))


def record_extractions(tx: Transaction, outcomes: Sequence[ExtractionOutcome]) -> None:
    """Stage one extraction row per outcome, replacing earlier rows of the same passages."""
    if not outcomes:
        return
    rows = []
    for o in outcomes:
        record = o.record
        issues = record.issues if record is not None else []
        rows.append(
            {
                "chunk_id": o.chunk_id,
                "doc_id": o.doc_id,
                "status": o.status,
                "reason": o.reason,
                "extractor": o.extractor,
                "cache_key": o.cache_key,
                "n_entities": len(record.entities) if record else 0,
                "n_facts": len(record.facts) if record else 0,
                "n_repaired": sum(1 for i in issues if i.action == "repaired"),
                "n_dropped": sum(1 for i in issues if i.action == "dropped"),
                "n_flagged": sum(1 for i in issues if i.action == "flagged"),
                "issues": issues_to_json(issues),
                "record": record_to_json(record) if record is not None and o.status == OK else None,
                # The model's raw answer is kept only when it could not be used, for diagnosis.
                "raw_output": o.raw_output if o.status != OK else None,
            }
        )
    frame = pl.DataFrame(rows, schema=EXTRACTIONS.empty().select(EXTRACTIONS.columns).schema)
    chunk_ids = frame.get_column("chunk_id").to_list()
    tx.rows(EXTRACTIONS.name, "doc_id", frame.get_column("doc_id").to_list())
    tx.update(EXTRACTIONS.name, remove=pl.col("chunk_id").is_in(chunk_ids),
              add=with_buckets(frame, EXTRACTIONS, tx.n_buckets))


def derive_forms(tx: Transaction, doc_ids: Iterable[str]) -> tuple[int, int]:
    """Stage forms and fact assertions of the documents from their stored extractions."""
    ids = sorted(set(doc_ids))
    forms, facts = forms_from_extractions(tx.rows(EXTRACTIONS.name, "doc_id", ids))
    _replace_rows(tx, FORMS, ids, forms)
    _replace_rows(tx, FACT_SOURCES, ids, facts)
    return forms.height, facts.height


def forms_from_extractions(extractions: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The forms and fact assertions of extraction rows (chunk_id, doc_id, status, record): of the
    successful ones, each passage's by :func:`forms_of`."""
    form_rows: list[dict] = []
    fact_rows: list[dict] = []
    for row in extractions.filter(pl.col("status") == OK).select("chunk_id", "doc_id", "record").iter_rows(named=True):
        forms, facts = forms_of(row["chunk_id"], row["doc_id"], record_from_json(row["record"]))
        form_rows.extend(forms)
        fact_rows.extend(facts)
    return forms_frame(form_rows), fact_sources_frame(fact_rows)


@dataclass
class TombstoneReport:
    deleted: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    chunk_ids: list[str] = field(default_factory=list)
    cache_keys: list[str] = field(default_factory=list)


def tombstone_documents(
    tx: Transaction, doc_ids: Iterable[str], *, reason: str = "", erase: bool = False,
    now: dt.datetime | None = None,
) -> TombstoneReport:
    """Remove documents' rows from every per-document table and log the deletion. A deleted
    document's file at a sync source is marked excluded there (a sync that removes or replaces
    the file's record stages that after this)."""
    ids = sorted(set(doc_ids))
    live = set(tx.rows(DOCUMENTS.name, "doc_id", ids).get_column("doc_id").to_list())
    report = TombstoneReport(deleted=[d for d in ids if d in live], not_found=[d for d in ids if d not in live])
    if not report.deleted:
        return report
    extractions = tx.rows(EXTRACTIONS.name, "doc_id", report.deleted)
    report.chunk_ids = sorted(tx.rows(PASSAGES.name, "doc_id", report.deleted).get_column("chunk_id").to_list())
    report.cache_keys = sorted(k for k in extractions.get_column("cache_key").to_list() if k)
    for spec in PER_DOCUMENT_TABLES:
        rows = _document_rows(tx, spec, report.deleted)
        if spec in (FORMS, FACT_SOURCES):
            _enqueue(tx, spec, rows)
        tx.update(spec.name, remove=_doc_rows(report.deleted))
    tx.update(DOCUMENT_KEYS.name, remove=_doc_rows(report.deleted))
    when = now or dt.datetime.now(dt.UTC)
    log = pl.DataFrame(
        {
            "doc_id": report.deleted,
            "requested_at": [when] * len(report.deleted),
            "reason": [reason] * len(report.deleted),
            "erase": [erase] * len(report.deleted),
            "erased_at": [None] * len(report.deleted),
        },
        schema={"doc_id": pl.String, "requested_at": pl.Datetime("us", "UTC"), "reason": pl.String,
                "erase": pl.Boolean, "erased_at": pl.Datetime("us", "UTC")},
    )
    tx.update(TOMBSTONES.name, add=with_buckets(log, TOMBSTONES, tx.n_buckets))
    log_documents(tx, {DELETED: report.deleted})
    _exclude_source_files(tx, report.deleted, reason)
    return report


def _exclude_source_files(tx: Transaction, doc_ids: list[str], reason: str) -> None:
    """Mark the deleted documents' files at a sync source, if any, as excluded, with why."""
    rows = tx.rows(SOURCE_FILES.name, "doc_id", doc_ids)
    if not rows.height:
        return
    why = f"deleted from the index ({reason})" if reason else "deleted from the index"
    tx.update(SOURCE_FILES.name, remove=_doc_rows(doc_ids),
              add=rows.with_columns(status=pl.lit(EXCLUDED), reason=pl.lit(why)))
