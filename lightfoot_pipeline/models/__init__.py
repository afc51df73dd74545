"""The models the engine calls: the local text embedder and the language-model client.

``embedder`` turns names, passages and facts into vectors (locally, the only model indexing runs
itself); ``llm`` reaches any OpenAI-compatible chat-completion endpoint (extraction, answers).
"""
