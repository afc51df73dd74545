"""An entity's provenance: its aliases, the passages and documents behind each, its synonym edges
and the facts whose subject or object is one of its names, each fact with its evidence; and a
fact's: the passages that assert it. Both name their source documents with the batches and runs
that produced them (provenance/batches.py).

An entity is found by its id, or by any of its names as written (the name is normalised as at
ingestion, so ``"The Beatles"`` finds ``the beatles``); a name two entities of different types
share finds both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.ingest.normalise import normalise_name
from lightfoot_pipeline.provenance.batches import source_batches
from lightfoot_pipeline.provenance.errors import ExplainError
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    ALIASES,
    ENTITIES,
    FACT_SOURCES,
    FACTS,
    FORMS,
    MENTIONS,
    PASSAGES,
    SYNONYM_EDGES,
)

# Rows listed per alias and per entity (the counts are always whole).
MAX_PASSAGES_PER_ALIAS = 50
MAX_FACTS = 200


@dataclass
class EntityExplanation:
    entity_id: str
    type: str
    display_name: str
    canonical_name: str
    store_seq: int
    n_passages: int = 0
    documents: list[str] = field(default_factory=list)
    aliases: list[dict] = field(default_factory=list)  # {name, surface, n_passages, passages: [{chunk_id, doc_id, title}]}
    synonyms: list[dict] = field(default_factory=list)  # {entity_id, display_name, type, similarity}
    facts: list[dict] = field(default_factory=list)  # {fact_id, subject, predicate, object, subject_entity, ...}
    n_facts: int = 0
    sources: list[dict] = field(default_factory=list)  # {doc_id, produced_by, batches}: source_batches

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class FactExplanation:
    fact_id: str
    subject: str
    predicate: str
    object: str
    store_seq: int
    n_sources: int = 0
    evidence: list[dict] = field(default_factory=list)  # {chunk_id, doc_id, evidence, evidence_verified}
    sources: list[dict] = field(default_factory=list)  # {doc_id, produced_by, batches}: source_batches

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def find_entities(store: Store, query: str) -> list[str]:
    """The ids of the entities ``query`` names: an entity id, or one of their names."""
    text = query.strip()
    if not text:
        raise ExplainError("the entity name is empty", hint="give a name as it appears in a passage, or an entity id")
    entities = store.read(ENTITIES.name, columns=["entity_id"])
    if entities.filter(pl.col("entity_id") == text).height:
        return [text]
    aliases = store.read(ALIASES.name, columns=["name", "entity_id"])
    name = normalise_name(text)
    found = aliases.filter(pl.col("name") == name).get_column("entity_id").unique().sort().to_list()
    if found:
        return found
    near = aliases.filter(pl.col("name").str.contains(name, literal=True)).get_column("name").unique().sort()
    hint = (f"names that contain it: {', '.join(near.head(5).to_list())}" if near.len() and name
            else "give a name as it appears in a passage, or an entity id")
    raise ExplainError(f"no entity in the store at {store.uri} is named {query!r}", hint=hint)


def explain_entity(store: Store, query: str) -> list[EntityExplanation]:
    """Every entity ``query`` names, with its provenance (see the module docstring)."""
    manifest = store.manifest()
    ids = find_entities(store, query)
    entities = store.read(ENTITIES.name, manifest).filter(pl.col("entity_id").is_in(ids))
    aliases = store.read(ALIASES.name, manifest, columns=["name", "type", "entity_id", "surface", "n_chunks"])
    display = store.read(ENTITIES.name, manifest, columns=["entity_id", "display_name", "type"])
    forms = store.read(FORMS.name, manifest, columns=["chunk_id", "doc_id", "name", "type"])
    titles = store.read(PASSAGES.name, manifest, columns=["chunk_id", "title"])
    mentions = store.read(MENTIONS.name, manifest, columns=["entity_id", "chunk_id", "doc_id"])
    edges = store.read(SYNONYM_EDGES.name, manifest, columns=["entity_a", "entity_b", "similarity"])
    facts = store.read(FACTS.name, manifest, columns=["fact_id", "subject", "subject_type", "predicate", "object",
                                                      "object_type", "n_sources"])
    sources = store.read(FACT_SOURCES.name, manifest, columns=["fact_id", "chunk_id", "doc_id", "evidence"])
    ends = aliases.select("name", "type", "entity_id")
    out = []
    for row in entities.sort("entity_id").iter_rows(named=True):
        entity_id = row["entity_id"]
        members = aliases.filter(pl.col("entity_id") == entity_id).sort(["n_chunks", "name"], descending=[True, False])
        explanation = EntityExplanation(entity_id, row["type"], row["display_name"], row["canonical_name"], manifest.seq)
        said = mentions.filter(pl.col("entity_id") == entity_id)
        explanation.n_passages = said.get_column("chunk_id").n_unique()
        explanation.documents = said.get_column("doc_id").unique().sort().to_list()
        used = (forms.join(members.select("name", "type"), on=["name", "type"], how="semi")
                .join(titles, on="chunk_id", how="left").unique(["name", "chunk_id"]).sort("name", "chunk_id"))
        for member in members.iter_rows(named=True):
            passages = used.filter(pl.col("name") == member["name"]).select("chunk_id", "doc_id", "title")
            explanation.aliases.append({"name": member["name"], "surface": member["surface"],
                                        "n_passages": member["n_chunks"],
                                        "passages": passages.head(MAX_PASSAGES_PER_ALIAS).to_dicts()})
        touching = pl.concat([
            edges.filter(pl.col("entity_a") == entity_id).select(pl.col("entity_b").alias("entity_id"), "similarity"),
            edges.filter(pl.col("entity_b") == entity_id).select(pl.col("entity_a").alias("entity_id"), "similarity"),
        ])
        explanation.synonyms = (touching.join(display, on="entity_id", how="left")
                                .sort(["similarity", "entity_id"], descending=[True, False]).to_dicts())
        explanation.facts, explanation.n_facts = _facts(facts, sources, ends, members.select("name", "type"))
        explanation.sources = source_batches(store, explanation.documents, manifest)
        out.append(explanation)
    return out


def explain_fact(store: Store, fact_id: str, manifest: Manifest | None = None) -> FactExplanation:
    """A fact, the passages that assert it with their evidence, and its source documents with the
    batches and runs that produced them, as of ``manifest`` (default: the store's latest commit);
    reads the fact's buckets and its documents' only."""
    manifest = manifest or store.manifest()
    found = store.rows(FACTS.name, "fact_id", [fact_id], manifest)
    if found.height == 0:
        raise ExplainError(f"no fact {fact_id!r} in the store at {store.uri}",
                           hint="fact ids are listed by `lightfoot explain entity` and `explain doc` (--json)")
    fact = found.row(0, named=True)
    evidence = (store.rows(FACT_SOURCES.name, "fact_id", [fact_id], manifest).filter(pl.col("fact_id") == fact_id)
                .select("chunk_id", "doc_id", "evidence", "evidence_verified").sort("doc_id", "chunk_id"))
    return FactExplanation(fact_id, fact["subject"], fact["predicate"], fact["object"], manifest.seq,
                           n_sources=fact["n_sources"], evidence=evidence.to_dicts(),
                           sources=source_batches(store, evidence.get_column("doc_id").to_list(), manifest))


def _facts(facts: pl.DataFrame, sources: pl.DataFrame, ends: pl.DataFrame, names: pl.DataFrame) -> tuple[list[dict], int]:
    """The facts with one of ``names`` at either end, with each end's entity and their evidence."""
    as_subject = facts.join(names, left_on=["subject", "subject_type"], right_on=["name", "type"], how="semi")
    as_object = facts.join(names, left_on=["object", "object_type"], right_on=["name", "type"], how="semi")
    touching = pl.concat([as_subject, as_object]).unique("fact_id")
    total = touching.height
    touching = (
        touching.join(ends.rename({"entity_id": "subject_entity"}), left_on=["subject", "subject_type"],
                      right_on=["name", "type"], how="left")
        .join(ends.rename({"entity_id": "object_entity"}), left_on=["object", "object_type"],
              right_on=["name", "type"], how="left")
        .sort(["n_sources", "fact_id"], descending=[True, False]).head(MAX_FACTS)
    )
    evidence = (sources.join(touching.select("fact_id"), on="fact_id", how="semi").sort("fact_id", "chunk_id")
                .group_by("fact_id", maintain_order=True)
                .agg(pl.struct("chunk_id", "doc_id", "evidence").alias("evidence")))
    rows = touching.join(evidence, on="fact_id", how="left").select(
        "fact_id", "subject", "predicate", "object", "subject_entity", "object_entity", "n_sources", "evidence",
    ).sort(["n_sources", "fact_id"], descending=[True, False])
    return rows.to_dicts(), total
