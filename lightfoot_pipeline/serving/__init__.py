"""Query time: the serving snapshot, retrieval by Personalized PageRank, reranking, answers.

``snapshot`` (exported from the store), ``graph`` (the CSR graph and PageRank, with ``rowsplit``
for its products), ``retrieve`` (question to ranked passages), ``rerank`` (cross-encoder and RRF),
``answer`` (the one model call at query time) and ``serve`` (the HTTP query service).
"""
