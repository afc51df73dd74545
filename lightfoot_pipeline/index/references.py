"""References between the index's tables: what each kind points at, and how many point at nothing.

A sound store has none dangling: every passage, extraction, form, fact source and mention points at
a live document or passage, every mention and alias at an entity, every synonym edge at two
entities, every fact at a source and back; and the aliases are exactly the live names.
"""

from __future__ import annotations

import polars as pl

from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    ALIASES,
    DOCUMENTS,
    ENTITIES,
    EXTRACTIONS,
    FACT_SOURCES,
    FACTS,
    FORMS,
    MENTIONS,
    PASSAGES,
    SYNONYM_EDGES,
)


def dangling_references(store: Store, manifest: Manifest | None = None) -> dict[str, int]:
    """For each kind of reference, how many point at something that is not live (at ``manifest``,
    by default the newest commit)."""
    manifest = manifest or store.manifest()
    read = lambda name, *cols: store.read_columns(name, manifest, list(cols))  # noqa: E731
    documents = read(DOCUMENTS.name, "doc_id")
    passages = read(PASSAGES.name, "chunk_id", "doc_id")
    entities = read(ENTITIES.name, "entity_id")
    forms = read(FORMS.name, "chunk_id", "name", "type")
    aliases = read(ALIASES.name, "name", "type", "entity_id")
    mentions = read(MENTIONS.name, "entity_id", "chunk_id")
    edges = read(SYNONYM_EDGES.name, "entity_a", "entity_b")
    sources = read(FACT_SOURCES.name, "fact_id", "chunk_id")
    facts = read(FACTS.name, "fact_id")
    extractions = read(EXTRACTIONS.name, "chunk_id", "doc_id")

    def absent(frame: pl.DataFrame, on: str, target: pl.DataFrame, target_on: str | None = None) -> int:
        keys = target.select(pl.col(target_on or on).alias(on)).unique()
        return frame.select(on).join(keys, on=on, how="anti").height

    live_names = forms.select("name", "type").unique()  # a name is live while a live passage's form has it
    return {
        "passages -> documents": absent(passages, "doc_id", documents),
        "extractions -> passages": absent(extractions, "chunk_id", passages),
        "forms -> passages": absent(forms, "chunk_id", passages),
        "fact_sources -> passages": absent(sources, "chunk_id", passages),
        "mentions -> passages": absent(mentions, "chunk_id", passages),
        "mentions -> entities": absent(mentions, "entity_id", entities),
        "aliases -> entities": absent(aliases, "entity_id", entities),
        "aliases -> live names": aliases.join(live_names, on=["name", "type"], how="anti").height,
        "live names -> aliases": live_names.join(aliases, on=["name", "type"], how="anti").height,
        "synonym_edges -> entities": absent(edges, "entity_a", entities, "entity_id")
        + absent(edges, "entity_b", entities, "entity_id"),
        "facts -> fact_sources": absent(facts, "fact_id", sources),
        "fact_sources -> facts": absent(sources, "fact_id", facts),
    }
