"""Lightfoot's settings: the index's parameters (:class:`IndexSettings`), how files are cut into
passages (:class:`ChunkSettings`), and every environment variable Lightfoot reads (:data:`VARIABLES`),
each by one function. A value that cannot be used raises :class:`SettingsError`.
"""

from lightfoot_pipeline.settings.errors import SettingsError
from lightfoot_pipeline.settings.index import (
    DEFAULT_ENTITY_TYPES, ENTITY_THRESHOLD, GENERIC_TYPE, LSH_BANDS, LSH_ROWS, LSH_SEED, MAX_ENTITIES_PER_PASSAGE,
    MAX_FACTS_PER_PASSAGE, SYNONYM_THRESHOLD, Banding, IndexSettings,
)
from lightfoot_pipeline.settings.chunking import (
    CHUNK_OVERLAP_TOKENS, CHUNK_TOKENS, MAX_FILE_BYTES, MAX_PASSAGES_PER_DOCUMENT, ChunkSettings,
)
from lightfoot_pipeline.settings.environment import (
    DEEP_VARIABLES, DEFAULT_STORE, DOCUMENT_INBOX_ENV, EMBEDDER_ENV, ERASURE_INBOX_ENV, EXTRACTION_SLOTS_ENV,
    EXTRACTOR_ENV, LINK_PIECE_SIZE, LINK_PIECE_SIZE_ENV, LLM_VARIABLES, MODEL_HUB_VARIABLES, OBJECT_STORE_VARIABLES,
    RELINK_EXECUTOR_ENV, RELINK_EXECUTORS, RERANKER_ENV, RETENTION_POLICY_ENV, SERVE_ANSWERS_ENV, SERVE_BUDGET_ENV,
    SERVE_TOKEN_ENV, SERVE_TOKENS_FILE_ENV, STORE_ENV, SYNC_SOURCE_ENV, VARIABLES, deep_environment,
    document_inbox_uri, embedder_spec, erasure_inbox_uri, extraction_slots, extractor_mode, is_set,
    keep_model_hub_offline, link_piece_size, llm_environment, object_store_options, relink_executor, reranker_spec,
    resolve_store_uri, retention_policy_path, serve_answer_budget_usd, serve_answers, serve_tokens, sync_source_uri,
)

__all__ = [
    "CHUNK_OVERLAP_TOKENS", "CHUNK_TOKENS", "DEEP_VARIABLES", "DEFAULT_ENTITY_TYPES", "DEFAULT_STORE",
    "DOCUMENT_INBOX_ENV", "EMBEDDER_ENV", "ENTITY_THRESHOLD", "ERASURE_INBOX_ENV", "EXTRACTION_SLOTS_ENV",
    "EXTRACTOR_ENV", "GENERIC_TYPE", "LINK_PIECE_SIZE", "LINK_PIECE_SIZE_ENV", "LLM_VARIABLES", "LSH_BANDS",
    "LSH_ROWS", "LSH_SEED", "MAX_ENTITIES_PER_PASSAGE", "MAX_FACTS_PER_PASSAGE", "MAX_FILE_BYTES",
    "MAX_PASSAGES_PER_DOCUMENT", "MODEL_HUB_VARIABLES", "OBJECT_STORE_VARIABLES", "RELINK_EXECUTOR_ENV",
    "RELINK_EXECUTORS", "RERANKER_ENV", "RETENTION_POLICY_ENV", "SERVE_ANSWERS_ENV", "SERVE_BUDGET_ENV",
    "SERVE_TOKEN_ENV", "SERVE_TOKENS_FILE_ENV", "STORE_ENV", "SYNC_SOURCE_ENV", "SYNONYM_THRESHOLD", "VARIABLES",
    "Banding", "ChunkSettings", "deep_environment", "document_inbox_uri", "embedder_spec", "erasure_inbox_uri",
    "extraction_slots", "extractor_mode", "IndexSettings", "is_set", "keep_model_hub_offline", "link_piece_size",
    "llm_environment", "object_store_options", "relink_executor", "reranker_spec", "resolve_store_uri",
    "retention_policy_path", "serve_answer_budget_usd", "serve_answers", "serve_tokens", "SettingsError",
    "sync_source_uri",
]
