"""Forms and fact assertions: what one passage's extraction contributes to the index.

A form is ``(chunk_id, name, type)``: every entity name the extraction listed and every fact
subject and object, normalised (see normalise.py). A fact subject or object takes the type of an
entity of the same normalised name in the same passage (the first in type order when several
match, preferring specific types to the generic one), else the generic type.

A fact assertion is ``(fact_id, chunk_id)`` with its evidence; the fact's id is a hash of its
subject, predicate and object forms, so every passage that asserts the same fact names the same id.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable

import polars as pl

from lightfoot_pipeline.ingest.normalise import normalise_name, normalise_predicate
from lightfoot_pipeline.ingest.records import ValidatedRecord
from lightfoot_pipeline.settings import GENERIC_TYPE

FORM_COLUMNS = {"chunk_id": pl.String, "doc_id": pl.String, "name": pl.String, "type": pl.String, "surface": pl.String}
FACT_SOURCE_COLUMNS = {
    "fact_id": pl.String,
    "chunk_id": pl.String,
    "doc_id": pl.String,
    "subject": pl.String,
    "subject_type": pl.String,
    "predicate": pl.String,
    "object": pl.String,
    "object_type": pl.String,
    "evidence": pl.String,
    "evidence_verified": pl.Boolean,
}


def fact_id_for(subject: str, subject_type: str, predicate: str, obj: str, object_type: str) -> str:
    key = "\x00".join((subject, subject_type, predicate, obj, object_type))
    return "fact-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


def _type_for(name: str, entity_types: dict[str, set[str]]) -> str:
    types = entity_types.get(name)
    if not types:
        return GENERIC_TYPE
    specific = sorted(t for t in types if t != GENERIC_TYPE)
    return specific[0] if specific else GENERIC_TYPE


def forms_of(chunk_id: str, doc_id: str, record: ValidatedRecord) -> tuple[list[dict], list[dict]]:
    """Form rows and fact-assertion rows of one passage."""
    surfaces: dict[tuple[str, str], Counter] = defaultdict(Counter)
    entity_types: dict[str, set[str]] = defaultdict(set)
    for entity in record.entities:
        name = normalise_name(entity.name)
        if name:
            entity_types[name].add(entity.type)
            surfaces[(name, entity.type)][entity.name] += 1

    assertions: dict[str, dict] = {}
    for fact in record.facts:
        subject, obj = normalise_name(fact.subject), normalise_name(fact.object)
        predicate = normalise_predicate(fact.predicate)
        if not subject or not obj or not predicate:
            continue
        s_type, o_type = _type_for(subject, entity_types), _type_for(obj, entity_types)
        surfaces[(subject, s_type)][fact.subject] += 1
        surfaces[(obj, o_type)][fact.object] += 1
        fact_id = fact_id_for(subject, s_type, predicate, obj, o_type)
        row = {
            "fact_id": fact_id,
            "chunk_id": chunk_id,
            "doc_id": doc_id,
            "subject": subject,
            "subject_type": s_type,
            "predicate": predicate,
            "object": obj,
            "object_type": o_type,
            "evidence": fact.evidence,
            "evidence_verified": fact.evidence_verified,
        }
        # A passage that states the same fact twice keeps one assertion: the one whose evidence
        # sorts first (verified evidence before unverified, then alphabetical), whatever the order.
        previous = assertions.get(fact_id)
        if previous is None or _evidence_rank(row) < _evidence_rank(previous):
            assertions[fact_id] = row

    forms = [
        {
            "chunk_id": chunk_id,
            "doc_id": doc_id,
            "name": name,
            "type": type_,
            "surface": min(counts, key=lambda s: (-counts[s], s)),
        }
        for (name, type_), counts in surfaces.items()
    ]
    return forms, list(assertions.values())


def _evidence_rank(row: dict) -> tuple:
    evidence = row["evidence"]
    return (evidence is None, row["evidence_verified"] is not True, evidence or "")


def forms_frame(rows: Iterable[dict]) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema=FORM_COLUMNS)


def fact_sources_frame(rows: Iterable[dict]) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema=FACT_SOURCE_COLUMNS)
