import polars as pl

from lightfoot_pipeline.index.components import components, entity_id_for, entity_rows, mention_rows
from lightfoot_pipeline.index.synonyms import synonym_edges


def _names(*names, type_="entity"):
    return pl.DataFrame({"name": list(names), "type": [type_] * len(names)})


def _links(*rows):
    return pl.DataFrame(rows, schema={"type": pl.String, "name_a": pl.String, "name_b": pl.String,
                                      "similarity": pl.Float64}, orient="row")


def test_components_follow_strong_links_only():
    names = _names("a", "b", "c", "d")
    links = _links(("entity", "a", "b", 0.95), ("entity", "b", "c", 0.85), ("entity", "c", "d", 0.92))
    labelled = components(names, links, 0.92)
    ids = dict(zip(labelled["name"], labelled["entity_id"], strict=True))
    assert ids["a"] == ids["b"] == entity_id_for("entity", "a")
    assert ids["c"] == ids["d"] == entity_id_for("entity", "c")


def test_types_never_mix():
    names = pl.concat([_names("x", type_="person"), _names("x", type_="location")])
    labelled = components(names, _links(), 0.92)
    assert labelled["entity_id"].n_unique() == 2


def test_canonical_name_by_provenance_then_alphabet_and_mentions():
    aliases = pl.DataFrame({
        "name": ["nyc", "new york", "big apple"], "type": ["location"] * 3, "entity_id": ["e1"] * 3,
        "surface": ["NYC", "New York", "Big Apple"], "n_chunks": [2, 2, 1],
    })
    forms = pl.DataFrame({
        "chunk_id": ["c1", "c2", "c2", "c3", "c3"], "doc_id": ["d1", "d2", "d2", "d3", "d3"],
        "name": ["nyc", "nyc", "new york", "new york", "big apple"], "type": ["location"] * 5,
    })
    (row,) = entity_rows(aliases, forms).iter_rows(named=True)
    assert row["canonical_name"] == "new york"  # 2 passages, ties with "nyc": alphabetical
    assert row["display_name"] == "New York" and row["n_aliases"] == 3 and row["n_chunks"] == 3
    assert sorted(mention_rows(aliases, forms)["chunk_id"].to_list()) == ["c1", "c2", "c3"]


def test_synonym_edges_take_the_best_member_pair():
    aliases = pl.DataFrame({"name": ["a", "b", "c"], "type": ["entity"] * 3, "entity_id": ["e1", "e1", "e2"]})
    links = _links(("entity", "a", "c", 0.81), ("entity", "b", "c", 0.86), ("entity", "a", "b", 0.97))
    edges = synonym_edges(links, aliases, 0.80)
    assert edges.rows() == [("e1", "e2", 0.86)]
