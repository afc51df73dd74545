"""The models the engine calls: the local text embedder and the language-model client."""

from lightfoot_pipeline.models.embedder import (
    DEFAULT_EMBEDDER,
    Embedder,
    EmbedderUnavailable,
    HashingEmbedder,
    SentenceTransformerEmbedder,
    load_embedder,
)
from lightfoot_pipeline.models.llm import Completion, LLMClient, LLMError, LLMSettings

__all__ = [
    "DEFAULT_EMBEDDER", "Completion", "Embedder", "EmbedderUnavailable", "HashingEmbedder", "LLMClient", "LLMError",
    "LLMSettings", "SentenceTransformerEmbedder", "load_embedder",
]
