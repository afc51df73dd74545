"""The view of any reader set equals a fresh index of its readable documents: random corpora,
random readers, random principals (Hypothesis; the profile sets how many examples)."""

from __future__ import annotations

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.permissions.views import reader_view
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store.store import Store
from tests.lightfoot_pipeline.permissions.conftest import write_readers
from tests.lightfoot_pipeline.test_erasure_invariant import EMBEDDER, SETTINGS, build, corpus_strategy, make_corpus

GROUPS = ("public", "staff", "legal")
reader_sets = st.sets(st.sampled_from(GROUPS), max_size=2).map(lambda s: tuple(sorted(s)))


def _tables(snapshot) -> dict[str, pl.DataFrame]:
    return {"entities": snapshot.entities, "passages": snapshot.passages, "facts": snapshot.facts,
            "evidence": snapshot.evidence}


@SETTINGS
@given(raw=corpus_strategy, data=st.data())
def test_a_view_equals_a_fresh_index_of_the_readable_documents(tmp_path_factory, raw, data):
    root = tmp_path_factory.mktemp("views")
    documents, records = make_corpus(raw)
    readers = {d.doc_id: data.draw(reader_sets) for d in documents}
    principal = Principal("p", tuple(sorted(data.draw(st.sets(st.sampled_from(GROUPS[1:]))))))
    full = build(root, "full", [documents], records)
    write_readers(full, readers)
    export_snapshot(full, EMBEDDER)
    view = reader_view(load_snapshot(full), principal)
    readable = [d for d in documents if principal.may_read(readers[d.doc_id])]
    if len(readable) == len(documents):
        assert view.whole
        return
    fresh = Store(str(root / "fresh"))
    if readable:
        build(root, "fresh", [readable], records)
        export_snapshot(fresh, EMBEDDER)
        theirs = load_snapshot(fresh)
    else:
        assert view.snapshot.passages.height == view.snapshot.entities.height == view.snapshot.facts.height == 0
        return
    mine = view.snapshot
    for name, frame in _tables(mine).items():
        assert frame.equals(_tables(theirs)[name]), name
    assert (mine.adjacency != theirs.adjacency).nnz == 0
    for table in ("aliases", "entities", "mentions", "synonym_edges", "facts", "forms", "fact_sources"):
        spec_columns = [c for c in fresh.read(table).columns if c != "bucket"]
        want = fresh.read(table).select(spec_columns).sort(spec_columns)
        got = view.tables[table].select(spec_columns).sort(spec_columns)
        assert got.equals(want), table
