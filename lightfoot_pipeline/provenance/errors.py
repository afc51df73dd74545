"""The error a provenance question gets when what it asks about is not in the store."""

from lightfoot_pipeline.errors import LightfootError


class ExplainError(LightfootError, LookupError):
    """What was asked about is not in the store (the message says what is, or how to find it)."""
