"""What a subquery retrieves: entities, their facts and passages, from the serving snapshot.

Two retrieval calls (paper §3.4), both without a model:

- **global exploration** is the one-step retrieval (retrieve.py) run for the subquery: fact- and
  passage-seeded PageRank over the whole graph, reranked where a cross-encoder is configured;
- **local investigation** of a memory point anchors the walk at the point's entities
  (:func:`~lightfoot_pipeline.retrieval.retrieve.anchored_seeds`) and keeps to their graph
  neighbourhood: the anchors and the entities one edge away, the facts that end at them, and the
  passages that mention them. An anchor set with no neighbourhood falls back to global exploration.

Either way the subquery's entities are the ends of its facts, then the entities its passages
mention, best passage first. :class:`StepEvidence` numbers a step's evidence for the prompt
(``E1``, ``F1``, ``P1``) and maps the references back to ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from lightfoot_pipeline.retrieval.retrieve import FactHit, PassageHit, Retriever, anchored_seeds, top_indices
from lightfoot_pipeline.snapshot.format import Snapshot


@dataclass(frozen=True)
class EntityRef:
    entity_id: str
    node: int
    name: str


@dataclass
class Evidence:
    """One subquery and what it retrieved."""

    kind: str  # "global" or "local"
    query: str
    point: str | None
    entities: list[EntityRef] = field(default_factory=list)
    facts: list[FactHit] = field(default_factory=list)
    passages: list[PassageHit] = field(default_factory=list)
    note: str = ""

    def as_dict(self, text: bool = True) -> dict:
        out = {"kind": self.kind, "point": self.point, "entities": [e.entity_id for e in self.entities],
               "facts": [f.fact_id for f in self.facts], "chunks": [p.chunk_id for p in self.passages],
               "docs": [p.doc_id for p in self.passages], "note": self.note}
        if text:
            out["query"] = self.query
        return out


class SnapshotIndex:
    """Lookups the deep mode needs on one snapshot: entity ids by node and back, fact rows by id."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    @cached_property
    def entity_ids(self) -> list[str]:
        return self.snapshot.entities.get_column("entity_id").to_list()  # by node

    @cached_property
    def entity_names(self) -> list[str]:
        return self.snapshot.entities.get_column("display_name").to_list()

    @cached_property
    def entity_nodes(self) -> dict[str, int]:
        return {entity_id: node for node, entity_id in enumerate(self.entity_ids)}

    @cached_property
    def fact_rows(self) -> dict[str, int]:
        return {fact_id: row for row, fact_id in enumerate(self.snapshot.facts.get_column("fact_id").to_list())}

    @cached_property
    def chunk_rows(self) -> dict[str, int]:
        return {chunk_id: row for row, chunk_id in enumerate(self.snapshot.passages.get_column("chunk_id").to_list())}

    def entity(self, node: int) -> EntityRef:
        return EntityRef(self.entity_ids[node], node, self.entity_names[node])

    def fact(self, row: int, similarity: float = 0.0) -> FactHit:
        snap = self.snapshot
        values = snap.facts.row(row, named=True)
        return FactHit(fact_id=values["fact_id"], subject=values["subject"], predicate=values["predicate"],
                       object=values["object"], similarity=similarity,
                       evidence=[{"chunk_id": e["chunk_id"], "doc_id": e["doc_id"], "evidence": e["evidence"]}
                                 for e in snap.fact_evidence(row)], row=row)

    def passage(self, row: int, rank: int, score: float = 0.0, dense: float = 0.0) -> PassageHit:
        values = self.snapshot.passages.row(row, named=True)
        return PassageHit(rank=rank, chunk_id=values["chunk_id"], doc_id=values["doc_id"],
                          title=values["title"] or "", text=values["text"], pagerank_rank=rank,
                          pagerank_score=score, dense_score=dense)

    def neighbours(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The entity nodes one edge from ``nodes`` (with them), and the passages any of those mention."""
        graph = self.snapshot.adjacency  # (N, N)
        n_entities = self.snapshot.n_entities
        reached = np.unique(graph[nodes].indices) if nodes.size else np.zeros(0, dtype=np.int64)
        entities = np.union1d(nodes, reached[reached < n_entities])
        around = np.unique(graph[entities].indices) if entities.size else np.zeros(0, dtype=np.int64)
        passages = around[around >= n_entities] - n_entities
        return entities.astype(np.int64), passages.astype(np.int64)

    def mentioned(self, passage_rows: list[int]) -> list[int]:
        """Entity nodes the passages mention, in passage order."""
        graph = self.snapshot.adjacency
        n_entities = self.snapshot.n_entities
        out: list[int] = []
        for row in passage_rows:
            out.extend(int(i) for i in graph[n_entities + row].indices if i < n_entities)
        return list(dict.fromkeys(out))


def explore(retriever: Retriever, index: SnapshotIndex, query: str, n_passages: int, n_facts: int,
            n_entities: int, rerank: bool = True) -> Evidence:
    """Global exploration: the one-step retrieval for the subquery."""
    vector = retriever.question_vector(query)
    retrieval = retriever.retrieve(query, top_k=n_passages, rerank=rerank, vector=vector)
    facts = retriever.similar_facts(vector, n_facts)
    evidence = Evidence("global", query, None, facts=facts, passages=retrieval.passages)
    evidence.entities = _entities(index, facts, retrieval.passages, n_entities)
    return evidence


def investigate(retriever: Retriever, index: SnapshotIndex, query: str, point: str, entity_ids: list[str],
                n_passages: int, n_facts: int, n_entities: int, rerank: bool = True) -> Evidence:
    """Local investigation: a walk anchored at the point's entities, kept to their neighbourhood."""
    snap = retriever.snapshot
    anchors = np.asarray(sorted({index.entity_nodes[e] for e in entity_ids if e in index.entity_nodes}),
                         dtype=np.int64)
    entities, passages = index.neighbours(anchors)
    if not passages.size:
        evidence = explore(retriever, index, query, n_passages, n_facts, n_entities, rerank)
        evidence.kind, evidence.point = "local", point
        evidence.note = "the point's entities have no neighbourhood in this snapshot: explored globally"
        return evidence
    vector = retriever.question_vector(query)
    dense = retriever.dense_scores(vector)  # (#passages,)
    near = np.isin(snap.fact_subjects, entities) | np.isin(snap.fact_objects, entities)  # (#facts,)
    rows = np.flatnonzero(near)
    scores = snap.fact_vectors[rows] @ vector if rows.size else np.zeros(0)  # (#near, dim) x (dim,)
    facts = [index.fact(int(rows[i]), float(scores[i])) for i in top_indices(scores, n_facts)]
    seeds = anchored_seeds(snap, anchors, facts, dense, passages, retriever.settings.passage_seed_weight)
    result = retriever.graph.personalized_pagerank(seeds, damping=retriever.settings.damping,
                                              tolerance=retriever.settings.tolerance)
    walk = retriever.graph.passage_scores(result.scores)[passages]  # (#neighbourhood passages,)
    picked = passages[top_indices(walk, n_passages)]
    hits = [index.passage(int(row), rank, float(walk[np.searchsorted(passages, row)]), float(dense[row]))
            for rank, row in enumerate(picked, start=1)]
    if rerank and retriever.reranker is not None and hits:
        scores_ce = retriever.reranker.score(query, snap.passage_texts([index.chunk_rows[h.chunk_id] for h in hits]))
        order = sorted(range(len(hits)), key=lambda j: (-float(scores_ce[j]), j))
        hits = [hits[j] for j in order]
        for rank, hit in enumerate(hits, start=1):
            hit.rank = rank
    evidence = Evidence("local", query, point, facts=facts, passages=hits)
    evidence.entities = _entities(index, facts, hits, n_entities)
    return evidence


def _entities(index: SnapshotIndex, facts: list[FactHit], passages: list[PassageHit], limit: int) -> list[EntityRef]:
    snap = index.snapshot
    nodes = [int(n) for f in facts for n in (snap.fact_subjects[f.row], snap.fact_objects[f.row])]
    nodes += index.mentioned([index.chunk_rows[p.chunk_id] for p in passages])
    return [index.entity(n) for n in list(dict.fromkeys(nodes))[:limit]]


class StepEvidence:
    """A step's evidence over all its subqueries, numbered once each: E1…, F1…, P1…."""

    def __init__(self, items: list[Evidence]) -> None:
        self.items = items
        self.entities: dict[str, EntityRef] = {}
        self.facts: dict[str, FactHit] = {}
        self.passages: dict[str, PassageHit] = {}
        for item in items:
            for entity in item.entities:
                self.entities.setdefault(entity.entity_id, entity)
            for fact in item.facts:
                self.facts.setdefault(fact.fact_id, fact)
            for passage in item.passages:
                self.passages.setdefault(passage.chunk_id, passage)
        self.refs: dict[str, tuple[str, str]] = {}  # "E1" -> ("entity", entity_id)
        for prefix, kind, ids in (("E", "entity", self.entities), ("F", "fact", self.facts),
                                  ("P", "passage", self.passages)):
            for number, item_id in enumerate(ids, start=1):
                self.refs[f"{prefix}{number}"] = (kind, item_id)
        self.ref_of = {item_id: ref for ref, (_, item_id) in self.refs.items()}

    def resolve(self, refs: list[str]) -> tuple[list[str], list[str], list[str], list[str]]:
        """Entity, fact and chunk ids of the references, and the references this step did not give."""
        entities: list[str] = []
        facts: list[str] = []
        chunks: list[str] = []
        unknown: list[str] = []
        for ref in refs:
            kind, item_id = self.refs.get(ref.strip().upper(), (None, ""))
            if kind is None and ref in self.ref_of:  # the id itself rather than its reference
                kind, item_id = self.refs[self.ref_of[ref]]
            target = {"entity": entities, "fact": facts, "passage": chunks}.get(kind or "")
            if target is None:
                unknown.append(ref)
            elif item_id not in target:
                target.append(item_id)
        return entities, facts, chunks, unknown
