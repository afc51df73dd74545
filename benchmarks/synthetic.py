"""Synthetic extractions at MuSiQue scale, for benchmarks that measure the engine, not a model.

MuSiQue's corpus has 11,402 passages; its extractions average about 6 entities and 8 facts per
passage. The generator draws entity names from a Zipf distribution over a large vocabulary (a few
names recur in hundreds of passages, most in one or two), and writes some mentions with a
near-duplicate spelling (a typo, an initial, a suffix, different case or hyphenation), so that the
name links, components and synonym edges have realistic work to do. Every passage's text contains
its entities and facts verbatim, so evidence quotes verify.

Deterministic for a given seed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from lightfoot_pipeline.ingest.dataset import Document

SYLLABLES = ["ka", "ri", "to", "mel", "an", "sor", "vi", "den", "la", "quo", "bar", "ten", "ush", "pol", "gra", "fen", "mar", "cor", "lin", "sta", "ber", "nov", "alt", "rek", "dor", "mis", "pan", "tev", "yor", "zal", "hem", "tir", "cas", "lum", "ond", "pir", "vel", "gos", "tam", "rin", "sud", "wex", "fal", "ish"]
TYPES = ("person", "organization", "location", "work", "event")
PREDICATES = (
    "founded", "was born in", "is located in", "directed", "plays for", "was written by", "married",
    "is part of", "succeeded", "was released by", "won", "is the capital of",
)
SUFFIXES = {"organization": " Inc", "location": " City", "work": " (film)", "event": " Games", "person": " Jr"}


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _vocabulary(size: int, rng: random.Random) -> list[tuple[str, str]]:
    seen: set[str] = set()
    names: list[tuple[str, str]] = []
    while len(names) < size:
        name = " ".join(_word(rng) for _ in range(rng.randint(1, 3)))
        if name in seen:
            continue
        seen.add(name)
        names.append((name, TYPES[len(names) % len(TYPES)]))
    return names


def _variant(name: str, type_: str, rng: random.Random) -> str:
    """A near-duplicate spelling of a name."""
    kind = rng.randrange(5)
    words = name.split()
    if kind == 0 and len(name) > 6:  # a typo: one letter doubled
        i = rng.randrange(1, len(name) - 1)
        return name[:i] + name[i] + name[i:]
    if kind == 1 and len(words) > 1:  # first word as an initial
        return f"{words[0][0]}. {' '.join(words[1:])}"
    if kind == 2:
        return name + SUFFIXES[type_]
    if kind == 3:
        return name.upper() if len(name) < 12 else name.lower()
    return "-".join(words) if len(words) > 1 else name + "s"


def _choice_without_replacement(np_rng: np.random.Generator, weights: np.ndarray, cdf: np.ndarray,
                                size: int) -> np.ndarray:
    """``np_rng.choice(len(weights), size, replace=False, p=weights)``, the same draws and result,
    with the first round's cumulative distribution computed once rather than per call (NumPy's
    own rebuilds it from the whole vocabulary every time, which dominates at 100,000 passages)."""
    found = np.zeros(size, dtype=np.int64)
    n_unique = 0
    while n_unique < size:
        x = np_rng.random((size - n_unique,))
        if n_unique == 0:
            round_cdf = cdf
        else:
            p = weights.copy()
            p[found[:n_unique]] = 0
            round_cdf = np.cumsum(p)
            round_cdf /= round_cdf[-1]
        new = round_cdf.searchsorted(x, side="right")
        _, first = np.unique(new, return_index=True)
        first.sort()
        new = new.take(first)
        found[n_unique : n_unique + new.size] = new
        n_unique += new.size
    return found


def synthetic_documents_and_records(
    n_passages: int = 11402,
    seed: int = 0,
    entities_per_passage: float = 6.0,
    facts_per_passage: float = 8.0,
    vocabulary_size: int | None = None,
    zipf_exponent: float = 0.75,
    variant_rate: float = 0.15,
    new_object_rate: float = 0.3,
) -> tuple[list[Document], dict[str, dict]]:
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    vocabulary = _vocabulary(vocabulary_size or int(n_passages * 8), rng)
    weights = 1.0 / np.arange(1, len(vocabulary) + 1) ** zipf_exponent
    weights /= weights.sum()
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    documents: list[Document] = []
    records: dict[str, dict] = {}
    for p in range(n_passages):
        n_entities = max(1, int(np_rng.poisson(entities_per_passage)))
        picks = _choice_without_replacement(np_rng, weights, cdf, n_entities)
        entities = []
        for index in picks:
            name, type_ = vocabulary[int(index)]
            if rng.random() < variant_rate:
                name = _variant(name, type_, rng)
            entities.append({"name": name, "type": type_, "description": None})
        facts = []
        sentences = []
        for _ in range(max(0, int(np_rng.poisson(facts_per_passage)))):
            if len(entities) < 2:
                break
            s, o = rng.sample(entities, 2)
            predicate = rng.choice(PREDICATES)
            # Like real extractions, some fact objects are phrases the entity list does not name.
            obj = f"{_word(rng)} {rng.randint(1800, 2020)}" if rng.random() < new_object_rate else o["name"]
            sentence = f"{s['name']} {predicate} {obj}"
            sentences.append(sentence + ".")
            facts.append([s["name"], predicate, obj, sentence])
        listed = ", ".join(e["name"] for e in entities)
        text = " ".join(sentences) + f" Also mentioned: {listed}."
        doc_id = f"syn-{p:06d}"
        documents.append(Document(doc_id=doc_id, title=entities[0]["name"], text=text))
        records[doc_id] = {"doc_id": doc_id, "model": "synthetic", "entities": entities, "facts": facts}
    return documents, records


def write_dataset(target: Path, n_passages: int = 11402, seed: int = 0) -> Path:
    """The synthetic corpus as a dataset directory (corpus.jsonl and extractions.jsonl)."""
    documents, records = synthetic_documents_and_records(n_passages, seed)
    return write_documents(target, documents, records)


def write_documents(target: Path, documents, records) -> Path:
    """Documents and their recorded extractions as a dataset directory."""
    target.mkdir(parents=True, exist_ok=True)
    with (target / "corpus.jsonl").open("w") as corpus, (target / "extractions.jsonl").open("w") as extractions:
        for doc in documents:
            corpus.write(json.dumps({"doc_id": doc.doc_id, "title": doc.title, "text": doc.text}) + "\n")
            extractions.write(json.dumps(records[doc.doc_id]) + "\n")
    return target
