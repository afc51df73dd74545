"""The snapshot's graph: entity and passage nodes in one symmetric sparse matrix.

Nodes are numbered entities first, then passages: node ``i < n_entities`` is entity ``i``, node
``n_entities + j`` is passage ``j``. The adjacency matrix ``A`` is symmetric (the graph is
undirected) and holds

- passage–entity edges of weight 1, one per mention;
- entity–entity edges weighted by the number of facts linking the pair (either direction);
- entity–entity synonym edges weighted by the similarity of their closest member names.

A pair with both a fact edge and a synonym edge gets the sum of the two weights. The export
(collect.py) builds it and writes its three CSR arrays (format.py); retrieval walks it (``retrieval/graph.py``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def build_adjacency(
    n_entities: int,
    n_passages: int,
    mentions: tuple[np.ndarray, np.ndarray],
    fact_pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
    synonym_pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> sp.csr_matrix:
    """The symmetric (N, N) adjacency matrix, N = n_entities + n_passages.

    ``mentions`` is (entity index, passage index); ``fact_pairs`` and ``synonym_pairs`` are
    (entity index, entity index, weight), each unordered pair once.
    """
    n = n_entities + n_passages
    # Node numbers in the narrowest type that holds them: scipy keeps a matrix's indices in int32
    # where they fit, so int64 copies would only be converted again (at a million passages, 30M
    # entries a copy).
    index = np.int32 if n < np.iinfo(np.int32).max else np.int64

    def narrowed(values, bound: int) -> np.ndarray:
        """``values`` as node numbers, checked to lie below ``bound`` before the narrowing (which
        would wrap a stray value into range)."""
        values = np.asarray(values)
        if values.size and (values.min() < 0 or values.max() >= bound):
            raise ValueError(f"edge endpoint outside the {n} nodes of the graph")
        return values.astype(index, copy=False)

    m_entity, m_passage = narrowed(mentions[0], n_entities), narrowed(mentions[1], n_passages)
    f_a, f_b, s_a, s_b = (narrowed(a, n_entities) for a in (fact_pairs[0], fact_pairs[1], synonym_pairs[0],
                                                            synonym_pairs[1]))
    f_w, s_w = np.asarray(fact_pairs[2]), np.asarray(synonym_pairs[2])
    m_passage = m_passage + index(n_entities)
    rows = np.concatenate([m_entity, m_passage, f_a, f_b, s_a, s_b])
    cols = np.concatenate([m_passage, m_entity, f_b, f_a, s_b, s_a])
    weights = np.concatenate([
        np.ones(2 * len(m_entity), dtype=np.float64),
        np.asarray(f_w, dtype=np.float64), np.asarray(f_w, dtype=np.float64),
        np.asarray(s_w, dtype=np.float64), np.asarray(s_w, dtype=np.float64),
    ])
    if rows.size and np.any(rows == cols):
        raise ValueError("the retrieval graph has no self-loops; an edge joins a node to itself")
    if weights.size and not np.all(weights > 0):
        raise ValueError("edge weights must be positive")
    # Duplicate (row, col) entries are summed by the conversion to CSR.
    adjacency = sp.coo_matrix((weights, (rows, cols)), shape=(n, n)).tocsr()
    adjacency.sum_duplicates()
    adjacency.sort_indices()
    return adjacency
