"""Provenance a person can read: what a document contributed and what its deletion would remove
(``documents.py``), and an entity's names, passages, documents, synonyms and facts (``entities.py``).

Both read the committed store and never change it. The layer sits above ``index`` (the deletion
preview runs the index's own deletion stages) and below ``service``, whose web page shows them;
why a passage ranked is ``retrieval/explain.py``, since it needs a snapshot.
"""

from lightfoot_pipeline.errors import LightfootError


class ExplainError(LightfootError, LookupError):
    """What was asked about is not in the store (the message says what is, or how to find it)."""
