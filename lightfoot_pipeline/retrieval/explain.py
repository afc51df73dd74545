"""Why each passage ranked: the seed facts with their evidence, the entities its PageRank mass came
through, its dense score and its ranks.

The explanation re-runs the query's parts with the retriever's own functions (question vector,
dense scores, seed facts, seeds, the walk), so its numbers are the ranking's. At the walk's fixed
point a passage's score is what the restart puts on it plus what flows in from its neighbours,
which are entities only (snapshot/adjacency.py):

    x[p] = (1 - d) · s[p] + d · Σ_e A[e, p] / deg(e) · x[e]      (+ the edgeless nodes' share of s[p])

so each term ``d · A[e, p] / deg(e) · x[e]`` is the mass entity ``e`` passed to the passage, and
its share of ``x[p]`` says how much of the passage's score came through that entity.
"""

from __future__ import annotations

import numpy as np

from lightfoot_pipeline.retrieval.retrieve import RetrievalError, Retriever

# Entities listed per passage (those that passed it the most mass).
TOP_ENTITIES = 5


def explain_query(retriever: Retriever, question: str, *, top_k: int = 10, rerank: bool = True) -> dict:
    """The query's ranked passages, each with why it ranked (see the module docstring)."""
    snap, s = retriever.snapshot, retriever.settings
    if not 1 <= top_k <= s.candidates:
        raise RetrievalError(f"top_k must be from 1 to {s.candidates}, got {top_k}")
    vector = retriever.question_vector(question)
    dense = retriever.dense_scores(vector)  # (#passages,)
    facts = retriever.similar_facts(vector, s.top_facts)
    seeds = retriever.seeds(dense, facts)  # (N,)
    retrieval = retriever.retrieve(question, top_k=top_k, rerank=rerank, vector=vector)
    n_entities = snap.n_entities
    entity_names = snap.entities.get_column("display_name").to_list()
    entity_ids = snap.entities.get_column("entity_id").to_list()
    seed_total = float(seeds.sum())
    scores = None
    if seed_total > 0:
        # the walk the retriever ranks with: the local walk's scores keep the balance of the shares
        # below within its residual bound
        scores = retriever.walk(seeds, rerank=rerank and retriever.reranker is not None).scores  # (N,)
    seed_facts = []
    seed_entities: dict[int, float] = {}
    for hit in facts:
        ends = []
        for role, node in (("subject", int(snap.fact_subjects[hit.row])), ("object", int(snap.fact_objects[hit.row]))):
            mass = max(hit.similarity, 0.0) / max(int(snap.entity_passage_counts[node]), 1)
            seed_entities[node] = seed_entities.get(node, 0.0) + mass
            ends.append({"role": role, "entity_id": entity_ids[node], "display_name": entity_names[node],
                         "seed_weight": round(mass / seed_total, 6) if seed_total else 0.0})
        seed_facts.append({"fact_id": hit.fact_id, "subject": hit.subject, "predicate": hit.predicate,
                           "object": hit.object, "similarity": round(hit.similarity, 6), "evidence": hit.evidence,
                           "entities": ends})
    row_of = {chunk: i for i, chunk in enumerate(snap.passages.get_column("chunk_id").to_list())}
    adjacency = snap.adjacency  # (N, N) symmetric CSR
    degree = np.asarray(adjacency.sum(axis=1)).ravel()  # (N,)
    passages = []
    for hit in retrieval.passages:
        row = row_of[hit.chunk_id]
        node = n_entities + row
        why: dict = {
            "rank": hit.rank, "chunk_id": hit.chunk_id, "doc_id": hit.doc_id, "title": hit.title, "text": hit.text,
            "location": hit.location,
            "pagerank_rank": hit.pagerank_rank, "pagerank_score": hit.pagerank_score,
            "dense_score": round(hit.dense_score, 6), "dense_rank": int((dense > dense[row]).sum()) + 1,
            "rerank_rank": hit.rerank_rank, "rerank_score": hit.rerank_score, "fused_score": hit.fused_score,
            "seed_weight": round(float(seeds[node]) / seed_total, 6) if seed_total else 0.0,
            "entities": [],
        }
        start, end = adjacency.indptr[node], adjacency.indptr[node + 1]
        neighbours, weights = adjacency.indices[start:end], adjacency.data[start:end]
        if scores is not None and float(scores[node]) > 0:
            inflow = s.damping * weights / degree[neighbours] * scores[neighbours]  # (#neighbours,)
            why["restart_share"] = round((1.0 - s.damping) * float(seeds[node]) / seed_total / float(scores[node]), 6)
            for j in np.lexsort((neighbours, -inflow))[:TOP_ENTITIES]:
                entity = int(neighbours[j])
                why["entities"].append({
                    "entity_id": entity_ids[entity], "display_name": entity_names[entity],
                    "share": round(float(inflow[j]) / float(scores[node]), 6),
                    "seed": entity in seed_entities,
                })
        else:
            why["entities"] = [{"entity_id": entity_ids[int(e)], "display_name": entity_names[int(e)], "share": None,
                                "seed": int(e) in seed_entities} for e in neighbours[:TOP_ENTITIES]]
        passages.append(why)
    return {
        "question": question, "snapshot_id": snap.snapshot_id, "order": retrieval.order,
        "reranker": retrieval.reranker.as_dict(), "pagerank": retrieval.pagerank,
        "settings": {"top_facts": s.top_facts, "seed_passages": s.seed_passages,
                     "passage_seed_weight": s.passage_seed_weight, "damping": s.damping},
        "seed_facts": seed_facts, "passages": passages,
    }
