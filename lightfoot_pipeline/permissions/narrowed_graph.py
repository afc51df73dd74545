"""A view's graph narrowed from its base's graph, in time that follows what the narrowing takes.

A narrowing takes documents from a view's base (the whole snapshot, or a view that held them:
views.py ``ViewCache``). The view's graph is what the export's assembly (snapshot/collect.py
``assemble_graph``) gives for the view's tables; assembling it again joins every mention, fact and
synonym edge by its string ids (seconds at 100,000 passages). :func:`narrow_graph` gives the same
graph, node for node and entry for entry, from the base's graph and the view's tables:

- the passages are the base's less those of the documents taken, in the same (chunk id) order;
- an entity none of whose passages is taken keeps its row (type, display name, passage count),
  its mention edges and its synonym edges, which are functions of its members' live forms and
  links (DESIGN.md); the others are replaced by the view's tables' rows of them and of the
  entities ``narrowed_tables`` derived again (the parts they split into). Both sets are in
  entity id order, so the kept nodes keep their relative order: a node renumbering
  (``old_to_new``) maps the base's adjacency onto the view's without sorting it;
- the facts are the base's, in the base's order (by fact id, or by its fact index's groups:
  views.py ``view_snapshot`` orders them as the view's index wants); a fact keeps its row unless
  its evidence is in a document taken (it is recounted from the view's tables, or gone with its
  last source) or an end is a replaced entity (resolved again through the view's aliases);
- the adjacency is the base's entries between kept nodes, less the entity pairs that lost a fact
  (their weights are counted again), with the edges of the new entities and of those pairs added
  as the assembly weighs them (adjacency.py: a fact edge counts the pair's facts, a synonym edge
  adds its similarity, a mention weighs 1), so every entry is the sum the assembly makes.

The rows of each passage and fact in the base are kept beside the graph: the view's vectors are
those rows of the base's (snapshot/shared_rows.py), never copied, and its passage texts and
evidence ranges (what a retriever looks up) are the base's, by row. Measured at 100,000 passages
(load average 8 on the 2-core machine): 1.1–1.2 s, where assembling took 2.9 s at load 4.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import scipy.sparse as sp

from lightfoot_pipeline.snapshot.collect import Graph
from lightfoot_pipeline.snapshot.format import Snapshot, SnapshotError
from lightfoot_pipeline.snapshot.shared_rows import SharedRows


@dataclass
class NarrowedGraph:
    """A view's graph and its vectors: the base's rows of its passages and facts, in the graph's order."""

    graph: Graph
    passage_vectors: SharedRows  # (#passages, dim): the base's rows of the graph's passages, in its order
    fact_vectors: SharedRows  # (#facts, dim): the base's rows of its facts, in the graph's order
    fact_rows: np.ndarray  # (#facts,) increasing: the row among the base's facts of each of the graph's
    evidence_ranges: tuple[np.ndarray, np.ndarray]  # (#facts,) each, of the graph's facts (Snapshot.evidence_ranges)


def _in(column: str, values: pl.Series) -> pl.Expr:
    return pl.col(column).is_in(values.implode())


def _pair_keys(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """(k,) one int64 per unordered pair of nodes."""
    return np.minimum(a, b).astype(np.int64) * n + np.maximum(a, b)


def narrow_graph(base: Snapshot, lost: frozenset[str], tables: dict[str, pl.DataFrame],
                 derived: pl.Series) -> NarrowedGraph | None:
    """The graph :func:`snapshot.collect.assemble_graph` assembles from ``tables`` (a view's, as
    views.py ``narrowed_tables_and_entities`` gives them for the base's documents less ``lost``,
    with ``derived``, the ids of the entities it derived again), from the base's graph ``base``
    (see the module docstring). None when the tables hold entities that neither the base nor
    ``derived`` explains (the caller assembles the graph then)."""
    gone = pl.Series("doc_id", sorted(lost), dtype=pl.String)
    n_base = base.n_nodes
    n_old_entities = base.n_entities
    adjacency = base.adjacency
    if not adjacency.has_sorted_indices:  # the renumbering below keeps the base's order: it must be sorted
        adjacency = adjacency.sorted_indices()
    indptr, indices = adjacency.indptr, adjacency.indices
    lost_passages = base.passages.filter(_in("doc_id", gone)).get_column("node").to_numpy()  # node numbers

    # Entities adjacent to a passage taken (their mentions) are replaced by the tables' rows of
    # them and of the entities derived again.
    replaced = np.zeros(n_base, dtype=bool)
    replaced[adjacency[lost_passages].indices] = True
    replaced = replaced[:n_old_entities]
    ids = base.entities.get_column("entity_id")
    kept = base.entities.filter(pl.Series(~replaced)).select(
        "entity_id", "type", "display_name", "n_passages", pl.col("node").alias("old"))
    fresh = tables["entities"].filter(_in("entity_id", pl.concat([derived, ids.filter(pl.Series(replaced))])))
    if kept.height + fresh.height != tables["entities"].height:
        return None
    fresh_mentions = tables["mentions"].filter(_in("entity_id", fresh.get_column("entity_id")))
    per_entity = fresh_mentions.group_by("entity_id").agg(pl.col("chunk_id").n_unique().alias("n_passages"))
    fresh = (fresh.select("entity_id", "type", "display_name").join(per_entity, on="entity_id", how="left")
             .with_columns(pl.col("n_passages").fill_null(0).cast(pl.Int64), pl.lit(None, dtype=pl.Int64).alias("old"))
             .sort("entity_id"))
    # Both in entity id order: the fresh rows go where they sort among the kept ones.
    at = kept.get_column("entity_id").search_sorted(fresh.get_column("entity_id")).to_numpy().astype(np.int64)
    order = np.insert(np.arange(kept.height), at, np.arange(kept.height, kept.height + fresh.height))
    entities = (pl.concat([kept.with_columns(pl.col("n_passages").cast(pl.Int64), pl.col("old").cast(pl.Int64)),
                           fresh.select(kept.columns)], how="vertical_relaxed")[order]
                .with_row_index("node").with_columns(pl.col("node").cast(pl.Int64)))
    n_entities = entities.height
    passages = (base.passages.with_row_index("base_row").filter(~_in("doc_id", gone))
                .with_columns(pl.col("node").alias("old"))
                .with_row_index("row").with_columns((pl.col("row").cast(pl.Int64) + n_entities).alias("node")))
    n = n_entities + passages.height

    old_to_new = np.full(n_base, -1, dtype=np.int64)  # (N base,) a node's number in the view, -1 if gone
    survivors = entities.filter(pl.col("old").is_not_null())
    old_to_new[survivors.get_column("old").to_numpy()] = survivors.get_column("node").to_numpy()
    old_to_new[passages.get_column("old").to_numpy()] = passages.get_column("node").to_numpy()
    is_new = np.zeros(n, dtype=bool)  # (N,) the view's entities that the base does not hold as they are
    is_new[entities.filter(pl.col("old").is_null()).get_column("node").to_numpy()] = True

    # Facts, in the base's order: its rows renumbered; those with evidence taken recounted or gone,
    # those with an end replaced resolved again through the view's aliases.
    taken = base.evidence.get_column("doc_id").is_in(gone.implode()).to_numpy()  # (#base evidence,)
    recounted = base.evidence.filter(pl.Series(taken)).get_column("fact_id").unique()
    surviving = tables["facts"].filter(_in("fact_id", recounted)).get_column("fact_id")
    fact_ids = base.facts.get_column("fact_id")
    subjects = old_to_new[base.facts.get_column("subject_entity").to_numpy()]  # (#base facts,)
    objects = old_to_new[base.facts.get_column("object_entity").to_numpy()]
    n_sources = base.facts.get_column("n_sources").to_numpy().copy()
    vanished = (fact_ids.is_in(recounted.implode()) & ~fact_ids.is_in(surviving.implode())).to_numpy()
    redo = np.flatnonzero(~vanished & ((subjects < 0) | (objects < 0) | fact_ids.is_in(surviving.implode()).to_numpy()))
    if redo.size:
        wanted = fact_ids.gather(redo)
        patch = pl.DataFrame({"fact_id": wanted}).join(tables["facts"].filter(_in("fact_id", wanted)), on="fact_id",
                                                       how="left", maintain_order="left")
        names = pl.concat([patch.select(pl.col("subject").alias("name"), pl.col("subject_type").alias("type")),
                           patch.select(pl.col("object").alias("name"), pl.col("object_type").alias("type"))]).unique()
        named = tables["aliases"].join(names, on=["name", "type"], how="semi")
        ends = named.join(entities.select("entity_id", "node").filter(_in("entity_id", named.get_column("entity_id"))),
                          on="entity_id", how="left").select("name", "type", "node")
        patch = (patch
                 .join(ends.rename({"name": "subject", "type": "subject_type", "node": "s"}),
                       on=["subject", "subject_type"], how="left", maintain_order="left")
                 .join(ends.rename({"name": "object", "type": "object_type", "node": "o"}),
                       on=["object", "object_type"], how="left", maintain_order="left"))
        if patch.filter(pl.col("s").is_null() | pl.col("o").is_null()).height:
            raise SnapshotError("facts name subjects or objects that no alias holds; run the graph stage")
        subjects[redo] = patch.get_column("s").to_numpy()
        objects[redo] = patch.get_column("o").to_numpy()
        n_sources[redo] = patch.get_column("n_sources").to_numpy()

    # Entity pairs that kept both ends but lost a fact: their weights are counted again.
    both = vanished & (subjects >= 0) & (objects >= 0) & (subjects != objects)
    dirty = np.unique(_pair_keys(subjects[both], objects[both], n))
    fact_rows = np.flatnonzero(~vanished)  # (#facts,) the view's facts, rows of the base's
    facts = (base.facts.select("fact_id", "subject", "predicate", "object").filter(pl.Series(~vanished))
             .with_columns(pl.Series("subject_entity", subjects[fact_rows], dtype=pl.Int64),
                           pl.Series("object_entity", objects[fact_rows], dtype=pl.Int64),
                           pl.Series("n_sources", n_sources[fact_rows], dtype=base.facts.schema["n_sources"])))
    subjects, objects = subjects[fact_rows], objects[fact_rows]
    # Fact edges whose count may change: every pair of a fact of a replaced entity or a dirty pair.
    base_subjects = base.facts.get_column("subject_entity").to_numpy()
    base_objects = base.facts.get_column("object_entity").to_numpy()
    old_pairs = (base_subjects != base_objects) & (replaced[base_subjects] | replaced[base_objects])
    changed_pairs = np.unique(_pair_keys(base_subjects[old_pairs], base_objects[old_pairs], n_base)).size

    # The base's entries between kept nodes, renumbered (the order is kept: old_to_new is increasing).
    rows = old_to_new[np.repeat(np.arange(n_base, dtype=np.int64), np.diff(indptr))]
    cols = old_to_new[indices]
    keep = (rows >= 0) & (cols >= 0)
    if dirty.size:
        among = keep & (rows < n_entities) & (cols < n_entities)
        keep[among] = ~np.isin(_pair_keys(rows[among], cols[among], n), dirty)
    keys = rows[keep] * n + cols[keep]
    values = adjacency.data[keep].astype(np.float64)

    # The edges that are new: mentions of the new entities, fact and synonym edges with a new end or of a dirty pair.
    node_of = entities.filter(pl.Series(is_new[:n_entities])).select("entity_id", "node")
    chunks = fresh_mentions.get_column("chunk_id")
    mentions = (fresh_mentions.select("entity_id", "chunk_id").join(node_of, on="entity_id", how="left")
                .join(passages.filter(_in("chunk_id", chunks)).select("chunk_id", pl.col("node").alias("passage")),
                      on="chunk_id", how="left"))
    if mentions.filter(pl.col("node").is_null() | pl.col("passage").is_null()).height:
        raise SnapshotError("mentions name entities or passages that the store does not hold; run the graph stage")
    m_entity, m_passage = mentions.get_column("node").to_numpy(), mentions.get_column("passage").to_numpy()
    linked = subjects != objects
    redone = linked & (is_new[subjects] | is_new[objects] | np.isin(_pair_keys(subjects, objects, n), dirty))
    pairs, counts = np.unique(_pair_keys(subjects[redone], objects[redone], n), return_counts=True)
    f_a, f_b = pairs // n, pairs % n
    synonyms = tables["synonym_edges"].select("entity_a", "entity_b", "similarity")
    wanted = pl.concat([fresh.get_column("entity_id"),
                        entities.filter(pl.Series(np.isin(np.arange(n_entities), np.concatenate(
                            [dirty // n, dirty % n])))).get_column("entity_id")])
    synonyms = synonyms.filter(_in("entity_a", wanted) | _in("entity_b", wanted))
    ends_of = entities.filter(_in("entity_id", pl.concat([synonyms.get_column("entity_a"),
                                                          synonyms.get_column("entity_b")]))).select("entity_id", "node")
    synonyms = (synonyms.join(ends_of.rename({"entity_id": "entity_a", "node": "a"}), on="entity_a", how="left")
                .join(ends_of.rename({"entity_id": "entity_b", "node": "b"}), on="entity_b", how="left"))
    if synonyms.filter(pl.col("a").is_null() | pl.col("b").is_null()).height:
        raise SnapshotError("synonym edges name entities that the store does not hold; run the graph stage")
    s_a, s_b = synonyms.get_column("a").to_numpy(), synonyms.get_column("b").to_numpy()
    s_keys = _pair_keys(s_a, s_b, n)
    pick = is_new[s_a] | is_new[s_b] | np.isin(s_keys, dirty)
    s_a, s_b, s_w = s_a[pick], s_b[pick], synonyms.get_column("similarity").to_numpy()[pick]
    added = sp.coo_matrix((
        np.concatenate([np.ones(2 * m_entity.size), counts.astype(np.float64), counts.astype(np.float64),
                        s_w.astype(np.float64), s_w.astype(np.float64)]),
        (np.concatenate([m_entity, m_passage, f_a, f_b, s_a, s_b]).astype(np.int64),
         np.concatenate([m_passage, m_entity, f_b, f_a, s_b, s_a]).astype(np.int64))), shape=(n, n)).tocsr()
    added.sum_duplicates()  # a pair with a fact and a synonym edge weighs their sum, as in the assembly
    added.sort_indices()
    added_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(added.indptr))
    added_keys = added_rows * n + added.indices.astype(np.int64)
    at = np.searchsorted(keys, added_keys)
    keys = np.insert(keys, at, added_keys)
    values = np.insert(values, at, added.data.astype(np.float64))
    counts_per_row = np.bincount(keys // n, minlength=n)
    index_type = np.int32 if max(n, keys.size) < np.iinfo(np.int32).max else np.int64
    new_indptr = np.zeros(n + 1, dtype=index_type)
    np.cumsum(counts_per_row, out=new_indptr[1:])
    narrowed = sp.csr_matrix((values, (keys % n).astype(index_type), new_indptr), shape=(n, n))
    narrowed.has_sorted_indices = True

    base_edges = base.info.counts.get("edges", {})
    if "fact" in base_edges:  # the base's count, less the pairs whose facts changed, plus their pairs now
        fact_pairs = int(base_edges["fact"]) - changed_pairs - dirty.size + pairs.size
    else:
        fact_pairs = np.unique(_pair_keys(subjects[linked], objects[linked], n)).size
    graph = Graph(
        entities=entities.select("node", "entity_id", "type", "display_name", "n_passages"),
        passages=passages.select("node", "chunk_id", "doc_id", "title", "text", "location"),
        facts=facts.select("fact_id", "subject", "predicate", "object", "subject_entity", "object_entity", "n_sources"),
        evidence=base.evidence.filter(pl.Series(~taken)),
        adjacency=narrowed,
        edge_counts={"mention": tables["mentions"].height, "fact": int(fact_pairs),
                     "synonym": tables["synonym_edges"].height},
    )
    passage_rows = passages.get_column("base_row").to_numpy()
    return NarrowedGraph(graph, SharedRows.of(base.passage_vectors, passage_rows),
                         SharedRows.of(base.fact_vectors, fact_rows), fact_rows, _evidence_ranges(base, taken, fact_rows))


def _evidence_ranges(base: Snapshot, taken: np.ndarray, fact_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(#facts,) first row and number of rows of each fact's evidence once the base's evidence
    rows ``taken`` are gone, for the base's facts ``fact_rows``: the base's ranges, each moved up by
    the rows taken before it and shortened by those taken in it."""
    starts, counts = base.evidence_ranges
    before = np.zeros(taken.size + 1, dtype=np.int64)  # (#base evidence + 1,) rows taken before each
    np.cumsum(taken, out=before[1:])
    start, count = starts[fact_rows], counts[fact_rows]
    kept_count = count - (before[start + count] - before[start])
    kept_start = np.where(kept_count > 0, start - before[start], 0)
    return kept_start, kept_count

