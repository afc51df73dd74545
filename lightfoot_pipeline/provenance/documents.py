"""What one document contributed to the index, and what its deletion would remove.

:func:`explain_document` reads the committed store: who may read the document, its passages and
their extraction status, the names it gave and the entities they belong to, and the facts it
asserted with their evidence. It reads only the buckets that hold them (the document's buckets, and the buckets of its
names and facts, which ``document_keys`` lists), so its cost is that of the document, not of the
store. It names the batches and runs that added, replaced, kept or deleted the document
(provenance/batches.py). Its deletion preview runs the two stages ``pipeline.delete`` runs —
``tombstone_documents``, then ``reconcile_graph`` — in a transaction that is never committed, so
the store is left as it was and the preview is exactly what a deletion at this commit does:
entities removed, entities whose aliases or passages change, entities a split creates, facts
dropped or left with fewer sources, and synonym edges removed or added.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.index.documents import tombstone_documents
from lightfoot_pipeline.index.reconcile import EmbedderRequired, GraphChange, reconcile_graph
from lightfoot_pipeline.ingest.passages import location_label
from lightfoot_pipeline.ingest.readers import readers_of_text
from lightfoot_pipeline.provenance.batches import document_batches
from lightfoot_pipeline.provenance.errors import ExplainError
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    ALIASES,
    DOCUMENT_KEYS,
    DOCUMENT_READERS,
    DOCUMENTS,
    ENTITIES,
    EXTRACTIONS,
    FACT_SOURCES,
    FACTS,
    FORMS,
    PASSAGE_SOURCES,
    PASSAGES,
    SYNONYM_EDGES,
    TOMBSTONES,
)
from lightfoot_pipeline.store.transaction import Transaction

ENTITY_COLUMNS = ["entity_id", "type", "display_name", "n_aliases", "n_chunks"]
FACT_COLUMNS = ["fact_id", "subject", "predicate", "object", "n_sources"]
EDGE_COLUMNS = ["entity_a", "entity_b", "similarity"]


@dataclass
class DeletionPreview:
    """What deleting the document would change, computed without changing the store."""

    passages_removed: int = 0
    names_removed: list[dict] = field(default_factory=list)  # {name, type}
    entities_removed: list[dict] = field(default_factory=list)
    entities_changed: list[dict] = field(default_factory=list)  # {entity_id, ..., before: {...}}
    entities_added: list[dict] = field(default_factory=list)  # parts of a split entity under new ids
    facts_dropped: list[dict] = field(default_factory=list)
    facts_changed: list[dict] = field(default_factory=list)  # fewer asserting passages
    synonym_edges_removed: list[dict] = field(default_factory=list)
    synonym_edges_added: list[dict] = field(default_factory=list)
    graph: GraphChange = field(default_factory=GraphChange)

    def counts(self) -> dict[str, int]:
        return {name: len(value) if isinstance(value, list) else value
                for name, value in self.__dict__.items() if name != "graph"}

    def as_dict(self) -> dict:
        out = {name: value for name, value in self.__dict__.items() if name != "graph"}
        out["graph"] = self.graph.as_dict()
        out["counts"] = self.counts()
        return out


@dataclass
class DocumentExplanation:
    doc_id: str
    status: str  # "live" or "deleted"
    store_seq: int
    # title, source, n_passages, retention_until, readers (the groups that may read it; ingest/readers.py)
    document: dict = field(default_factory=dict)
    deletion: dict | None = None  # the deletion log's latest row, for a deleted document
    passages: list[dict] = field(default_factory=list)  # with their extraction's status and counts
    names: list[dict] = field(default_factory=list)  # {name, type, surface, entity_id, display_name, passages}
    entities: list[dict] = field(default_factory=list)  # entities the document's names belong to
    facts: list[dict] = field(default_factory=list)  # facts with this document's evidence
    # Every batch that added, replaced, kept or deleted it: {batch, action, seq, run_id, at, by, run_url}
    batches: list[dict] = field(default_factory=list)
    preview: DeletionPreview | None = None

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "preview"}
        out["deletion_preview"] = self.preview.as_dict() if self.preview is not None else None
        return out


def explain_document(store: Store, doc_id: str, settings: IndexSettings | None = None,
                     *, preview: bool = True, manifest: Manifest | None = None) -> DocumentExplanation:
    """A document's contribution to the index as of ``manifest`` (default: the store's latest
    commit) and, with ``preview``, what its deletion would remove.

    A deleted document is explained by its deletion-log row; an id the store has never held
    raises :class:`ExplainError`.
    """
    manifest = manifest or store.manifest()
    documents = store.rows(DOCUMENTS.name, "doc_id", [doc_id], manifest)
    if documents.height == 0:
        log = store.rows(TOMBSTONES.name, "doc_id", [doc_id], manifest)
        if log.height == 0:
            raise ExplainError(f"document {doc_id!r} is not in the store and was never deleted from it",
                               hint="check the id (`lightfoot status` counts the documents)")
        latest = log.sort("requested_at").row(-1, named=True)
        return DocumentExplanation(doc_id, "deleted", manifest.seq, deletion={
            k: latest[k] for k in ("requested_at", "reason", "erase", "erased_at")},
            batches=document_batches(store, [doc_id], manifest).get(doc_id, []))
    readers = store.rows(DOCUMENT_READERS.name, "doc_id", [doc_id], manifest).get_column("readers").to_list()
    explanation = DocumentExplanation(doc_id, "live", manifest.seq, document={
        **{k: v for k, v in documents.row(0, named=True).items() if k in DOCUMENTS.columns and k != "content_hash"},
        "readers": list(readers_of_text(readers[0] if readers else None))},
        batches=document_batches(store, [doc_id], manifest).get(doc_id, []))
    passages = store.rows(PASSAGES.name, "doc_id", [doc_id], manifest).select(
        "chunk_id", "doc_id", "ordinal", "title", "text")
    extractions = store.rows(EXTRACTIONS.name, "doc_id", [doc_id], manifest).select(
        "chunk_id", "status", "reason", "extractor", "n_entities", "n_facts")
    sources = store.rows(PASSAGE_SOURCES.name, "doc_id", [doc_id], manifest).select(PASSAGE_SOURCES.columns).drop("doc_id")
    mine = (passages.join(extractions, on="chunk_id", how="left")
            .join(sources, on="chunk_id", how="left").sort("ordinal"))
    explanation.passages = [
        {**row, "location": location_label(doc_id, row["page"], row["section"])
         if row["page"] is not None or row["section"] else None}
        for row in mine.drop("doc_id").to_dicts()]

    keys = store.rows(DOCUMENT_KEYS.name, "doc_id", [doc_id], manifest)
    name_keys = keys.filter(pl.col("kind") == "name").get_column("key").unique().to_list()
    fact_keys = keys.filter(pl.col("kind") == "fact").get_column("key").unique().to_list()
    forms = store.rows(FORMS.name, "name", name_keys, manifest).filter(pl.col("doc_id") == doc_id)
    aliases = store.rows(ALIASES.name, "name", name_keys, manifest).select("name", "type", "entity_id")
    entity_ids = aliases.get_column("entity_id").drop_nulls().unique().to_list()
    entities = store.rows(ENTITIES.name, "entity_id", entity_ids, manifest).select(ENTITY_COLUMNS)
    names = (
        forms.group_by("name", "type").agg(pl.col("surface").min(), pl.col("chunk_id").unique().sort().alias("passages"))
        .join(aliases, on=["name", "type"], how="left")
        .join(entities.select("entity_id", "display_name"), on="entity_id", how="left")
        .sort("type", "name")
    )
    explanation.names = names.to_dicts()
    ids = names.get_column("entity_id").drop_nulls().unique()
    explanation.entities = entities.filter(pl.col("entity_id").is_in(ids.implode())).sort("entity_id").to_dicts()

    sources = store.rows(FACT_SOURCES.name, "fact_id", fact_keys, manifest).filter(pl.col("doc_id") == doc_id)
    facts = store.rows(FACTS.name, "fact_id", fact_keys, manifest).select("fact_id", "n_sources")
    explanation.facts = (
        sources.join(facts, on="fact_id", how="left")
        .select("fact_id", "subject", "predicate", "object", "chunk_id", "evidence", "evidence_verified", "n_sources")
        .sort("subject", "predicate", "object", "chunk_id").to_dicts()
    )
    if preview:
        explanation.preview = preview_deletion(store, [doc_id], settings, manifest=manifest)
    return explanation


def preview_deletion(store: Store, doc_ids: list[str], settings: IndexSettings | None = None,
                     *, manifest: Manifest | None = None) -> DeletionPreview:
    """What deleting ``doc_ids`` at ``manifest`` (default: the store's latest commit) would change
    (nothing is written)."""
    settings = settings or IndexSettings()
    tx = Transaction(store, manifest or store.manifest())  # a working copy; never committed
    before = {spec.name: tx.table(spec.name) for spec in (ENTITIES, FACTS, SYNONYM_EDGES, ALIASES)}
    tombstone = tombstone_documents(tx, doc_ids)
    try:
        graph = reconcile_graph(tx, settings, None)
    except EmbedderRequired as err:
        raise ExplainError(f"the store's graph has changes queued that add names ({err}); a deletion preview "
                           "needs a graph in line with its documents",
                           hint="run the graph stage first (the Dagster `graph` asset, or `lightfoot ingest`)") from None
    after = {name: tx.table(name) for name in before}
    out = DeletionPreview(passages_removed=len(tombstone.chunk_ids), graph=graph)
    out.names_removed = (before[ALIASES.name].select("name", "type")
                         .join(after[ALIASES.name].select("name", "type"), on=["name", "type"], how="anti")
                         .sort("type", "name").to_dicts())
    out.entities_removed, out.entities_added, out.entities_changed = table_differences(
        before[ENTITIES.name].select(ENTITY_COLUMNS), after[ENTITIES.name].select(ENTITY_COLUMNS), ["entity_id"])
    out.facts_dropped, _, out.facts_changed = table_differences(
        before[FACTS.name].select(FACT_COLUMNS), after[FACTS.name].select(FACT_COLUMNS), ["fact_id"])
    out.synonym_edges_removed, out.synonym_edges_added, _ = table_differences(
        before[SYNONYM_EDGES.name].select(EDGE_COLUMNS), after[SYNONYM_EDGES.name].select(EDGE_COLUMNS),
        ["entity_a", "entity_b"])
    return out


def table_differences(before: pl.DataFrame, after: pl.DataFrame, key: list[str]) -> tuple[list[dict], list[dict], list[dict]]:
    """Rows only before, rows only after, and rows whose key is in both with other values (each
    with its values ``before``), sorted by key."""
    removed = before.join(after, on=key, how="anti").sort(key).to_dicts()
    added = after.join(before, on=key, how="anti").sort(key).to_dicts()
    values = [c for c in before.columns if c not in key]
    both = after.join(before, on=key, how="inner", suffix="_before")
    if not values or both.height == 0:
        return removed, added, []
    differs = pl.any_horizontal([pl.col(c).ne_missing(pl.col(f"{c}_before")) for c in values])
    changed = []
    for row in both.filter(differs).sort(key).to_dicts():
        changed.append({**{c: row[c] for c in [*key, *values]},
                        "before": {c: row[f"{c}_before"] for c in values if row[c] != row[f"{c}_before"]}})
    return removed, added, changed
