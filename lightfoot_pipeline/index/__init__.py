"""The index built from the extractions: per-document rows, then the global graph.

``documents`` (the per-document stage: passages, extractions, ``forms``), then ``reconcile`` (the
graph stage): exact name ``links``, entities as connected ``components``, ``synonyms``, ``facts``
(with ``digests`` of their sets of sources).
"""
