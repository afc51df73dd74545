"""Peak memory of the benchmark's own process, the figure every benchmark reports (the engine's
``peak_rss_mb``, lightfoot_pipeline/progress.py)."""

from __future__ import annotations

from lightfoot_pipeline.progress import peak_rss_mb

__all__ = ["peak_rss_mb"]
