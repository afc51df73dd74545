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
    ends = [(mentions[0], n_entities), (mentions[1], n_passages), (fact_pairs[0], n_entities),
            (fact_pairs[1], n_entities), (synonym_pairs[0], n_entities), (synonym_pairs[1], n_entities)]
    for values, bound in ends:  # checked before the narrowing, which would wrap a stray value into range
        values = np.asarray(values)
        if values.size and (values.min() < 0 or values.max() >= bound):
            raise ValueError(f"edge endpoint outside the {n} nodes of the graph")
    m_entity, m_passage = (np.asarray(a, dtype=index) for a in mentions)
    f_a, f_b, f_w = (np.asarray(a) for a in fact_pairs)
    s_a, s_b, s_w = (np.asarray(a) for a in synonym_pairs)
    rows = np.concatenate([m_entity, index(n_entities) + m_passage, f_a.astype(index), f_b.astype(index),
                           s_a.astype(index), s_b.astype(index)])
    cols = np.concatenate([index(n_entities) + m_passage, m_entity, f_b.astype(index), f_a.astype(index),
                           s_b.astype(index), s_a.astype(index)])
    weights = np.concatenate([
        np.ones(2 * len(m_entity), dtype=np.float64),
        np.asarray(f_w, dtype=np.float64), np.asarray(f_w, dtype=np.float64),
        np.asarray(s_w, dtype=np.float64), np.asarray(s_w, dtype=np.float64),
    ])
    if rows.size and (rows.min() < 0 or rows.max() >= n or cols.min() < 0 or cols.max() >= n):
        raise ValueError(f"edge endpoint outside the {n} nodes of the graph")
    if rows.size and np.any(rows == cols):
        raise ValueError("the retrieval graph has no self-loops; an edge joins a node to itself")
    if weights.size and not np.all(weights > 0):
        raise ValueError("edge weights must be positive")
    # Duplicate (row, col) entries are summed by the conversion to CSR.
    adjacency = sp.coo_matrix((weights, (rows, cols)), shape=(n, n)).tocsr()
    adjacency.sum_duplicates()
    adjacency.sort_indices()
    return adjacency
