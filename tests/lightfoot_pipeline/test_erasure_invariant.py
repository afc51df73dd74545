"""Proposition 1 of the paper, as properties: the index is a function of the live documents alone.

- Deleting B from G(A ∪ B) gives the same rows in every table, and the same fingerprint, as G(A).
- Adding the same documents in any order and any batching gives the same store.
- Any interleaving of additions and deletions ends where a fresh build of the survivors does.
"""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import INDEX_TABLES
from lightfoot_pipeline.store.vectors import name_vector_cache

EMBEDDER = HashingEmbedder(dim=32)
# Base names with near-duplicate spellings: they link at the synonym threshold, some at the entity one.
VOCABULARY = [
    "Jan Philip Solovej", "Jan Philip Solovey", "J. P. Solovej", "University of Copenhagen",
    "Copenhagen University", "University of Copenhagen Press", "Carl Rogers", "Carl Rodgers", "Carl R. Rogers",
    "Person-centered therapy", "Person - centered therapy", "person centred therapy", "American Psychological "
    "Association", "American Psychological Assn", "Hot Country Songs", "Hot Country Songs chart", "Hank Snow",
    "Hank Snows", "1963", "1960", "Montana", "Montana State",
    # Near-identical spellings with other numbers: close vectors, never linked.
    "35th Chess Olympiad", "36th Chess Olympiad", "the 35th Chess Olympiad", "World War I", "World War II",
]
TYPES = ["entity", "person"]
PREDICATES = ["founded", "is part of", "published", "was born in"]

doc_strategy = st.fixed_dictionaries({
    "entities": st.lists(st.tuples(st.sampled_from(VOCABULARY), st.sampled_from(TYPES)), min_size=1, max_size=4),
    "facts": st.lists(st.tuples(st.sampled_from(VOCABULARY), st.sampled_from(PREDICATES), st.sampled_from(VOCABULARY)),
                      max_size=3),
})
corpus_strategy = st.lists(doc_strategy, min_size=2, max_size=9)

# Each example builds two or three Delta stores (about a second each on two idle cores), so these tests
# draw fewer examples than the profile's (tests/conftest.py): 8 in the whole suite, 1 in the fast tier.
STORE_EXAMPLES = 1 if os.environ.get("HYPOTHESIS_PROFILE") in ("fast", "dev") else 8
SETTINGS = settings(max_examples=STORE_EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def make_corpus(raw: list[dict]) -> tuple[list[Document], dict[str, dict]]:
    documents, records = [], {}
    for i, doc in enumerate(raw):
        doc_id = f"doc-{i:02d}"
        names = [n for n, _ in doc["entities"]] + [x for s, _, o in doc["facts"] for x in (s, o)]
        text = f"Passage {i} mentions " + "; ".join(names) + "."
        # Some documents name their readers (a row like any other, removed with its document).
        readers = ("legal",) if i % 3 == 1 else ("hr", "legal") if i % 3 == 2 else None
        documents.append(Document(doc_id, f"Title {i}", text, readers=readers))
        records[doc_id] = {
            "doc_id": doc_id,
            "entities": [{"name": n, "type": t, "description": None} for n, t in doc["entities"]],
            "facts": [[s, p, o] for s, p, o in doc["facts"]],
        }
    return documents, records


def build(root, name: str, batches, records) -> Store:
    store = Store(str(root / name))
    for batch in batches:
        operations.ingest(store, list(batch), ReplayExtractor(records), EMBEDDER)
    return store


def table_rows(store: Store) -> dict[str, list[tuple]]:
    out = {}
    for spec in INDEX_TABLES:
        frame = store.read(spec.name).select(spec.columns)
        out[spec.name] = sorted(frame.rows(), key=repr)
    return out


def assert_same_store(left: Store, right: Store) -> None:
    assert table_rows(left) == table_rows(right)
    assert fingerprint(left).as_dict() == fingerprint(right).as_dict()


@SETTINGS
@given(raw=corpus_strategy, data=st.data())
def test_deleting_b_from_g_of_d_equals_g_of_a(tmp_path_factory, raw, data):
    root = tmp_path_factory.mktemp("prop")
    documents, records = make_corpus(raw)
    doomed = data.draw(st.sets(st.sampled_from([d.doc_id for d in documents]), min_size=1))
    full = build(root, "full", [documents], records)
    report = operations.delete(full, sorted(doomed))
    assert report.model_calls == 0 and sorted(report.deleted) == sorted(doomed)
    survivors = [d for d in documents if d.doc_id not in doomed]
    fresh = build(root, "fresh", [survivors] if survivors else [], records)
    assert_same_store(full, fresh)


@SETTINGS
@given(raw=corpus_strategy, data=st.data())
def test_order_and_batching_do_not_matter(tmp_path_factory, raw, data):
    root = tmp_path_factory.mktemp("prop")
    documents, records = make_corpus(raw)
    shuffled = data.draw(st.permutations(documents))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(documents) - 1), max_size=3)))
    batches = [shuffled[a:b] for a, b in itertools.pairwise([0, *cuts, len(documents)])]
    assert_same_store(build(root, "one", [documents], records), build(root, "batched", batches, records))


@SETTINGS
@given(raw=corpus_strategy, data=st.data())
def test_interleaved_additions_and_deletions(tmp_path_factory, raw, data):
    root = tmp_path_factory.mktemp("prop")
    documents, records = make_corpus(raw)
    by_id = {d.doc_id: d for d in documents}
    store = Store(str(root / "live"))
    live: set[str] = set()
    steps = data.draw(st.lists(st.tuples(st.booleans(), st.sets(st.sampled_from(sorted(by_id)), min_size=1)),
                               min_size=1, max_size=5))
    for is_add, ids in steps:
        if is_add:
            operations.ingest(store, [by_id[i] for i in sorted(ids)], ReplayExtractor(records), EMBEDDER)
            live |= ids
        elif store.exists():
            operations.delete(store, sorted(ids))
            live -= ids
    fresh = build(root, "fresh", [[by_id[i] for i in sorted(live)]] if live else [], records)
    if store.exists():
        assert_same_store(store, fresh)


@pytest.mark.slow
def test_full_reconcile_finds_nothing_to_change(tmp_path):
    documents, records = make_corpus([
        {"entities": [(VOCABULARY[i % len(VOCABULARY)], "entity"), (VOCABULARY[(i * 7) % len(VOCABULARY)], "person")],
         "facts": [(VOCABULARY[i % 5], "founded", VOCABULARY[(i + 3) % 7])]}
        for i in range(12)
    ])
    store = build(tmp_path, "s", [documents[:8], documents[8:]], records)
    operations.delete(store, ["doc-03", "doc-09"])
    from lightfoot_pipeline.index.reconcile import reconcile_graph
    from lightfoot_pipeline.settings import IndexSettings

    with store.transaction() as tx:
        change = reconcile_graph(tx, IndexSettings(), name_vector_cache(store, EMBEDDER), full=True)
        assert tx.pending() == {}
    assert (change.names_added, change.names_removed, change.names_changed) == (0, 0, 0)


def test_deleting_every_document_empties_every_index_table(tmp_path):
    documents, records = make_corpus([{"entities": [(n, "entity")], "facts": [(n, "founded", "1963")]}
                                      for n in VOCABULARY[:6]])
    store = build(tmp_path, "s", [documents], records)
    operations.delete(store, [d.doc_id for d in documents])
    assert all(rows == [] for rows in table_rows(store).values())


def test_deletion_needs_no_embedder_and_no_model(tmp_path, monkeypatch):
    documents, records = make_corpus([{"entities": [(n, "entity")], "facts": []} for n in VOCABULARY[:8]])
    store = build(tmp_path, "s", [documents], records)

    def forbidden(*_args, **_kwargs):
        raise AssertionError("deletion must not embed")

    monkeypatch.setattr(HashingEmbedder, "embed", forbidden)
    report = operations.delete(store, ["doc-01", "doc-04"])
    assert report.model_calls == 0 and report.graph.vectors_computed == 0


@pytest.mark.minilm
def test_invariant_with_the_packaged_minilm_on_a_sample_slice(tmp_path, sample_documents, sample_records, minilm):
    documents = sample_documents[:60]
    doomed = {d.doc_id for d in documents[::6]}
    full = Store(str(tmp_path / "full"))
    operations.ingest(full, documents, ReplayExtractor(sample_records), minilm)
    operations.delete(full, sorted(doomed))
    fresh = Store(str(tmp_path / "fresh"))
    survivors = [d for d in documents if d.doc_id not in doomed]
    # A second embedder instance, in reverse order and two batches: vectors must not depend on batches.
    from lightfoot_pipeline.models.embedder import SentenceTransformerEmbedder

    other = SentenceTransformerEmbedder()
    operations.ingest(fresh, survivors[::-1][:20], ReplayExtractor(sample_records), other)
    operations.ingest(fresh, survivors[::-1][20:], ReplayExtractor(sample_records), other)
    assert_same_store(full, fresh)
    assert full.read("entities").height > 0 and full.read("name_links").height > 0
