"""The index's configuration: the embedder and the settings a store was built with.

A new store adopts the configuration of its first commit; every later write is checked against
it, so that one store never mixes name vectors of two models or links made under two thresholds.
"""

from __future__ import annotations

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.transaction import Transaction


class IndexConfigError(LightfootError, RuntimeError):
    """The store was built with another embedder or other settings than the ones given."""


def index_config(embedder_id: str, dim: int, settings: IndexSettings) -> dict:
    return {"embedder": embedder_id, "dim": dim, "settings": settings.shape_of_index()}


def check_config(tx: Transaction, settings: IndexSettings, embedder: Embedder | None = None) -> None:
    """Adopt the index's config (its settings and embedder) on a new store; refuse one that differs
    on an existing store. Without an embedder (a graph update that embeds no name), only the
    settings are checked and nothing is adopted."""
    current = tx.config
    if not current:
        if embedder is not None:
            tx.config = index_config(embedder.model_id, embedder.dim, settings)
        return
    if current.get("settings") != settings.shape_of_index():
        raise IndexConfigError(
            f"the store was built with settings {current.get('settings')}, not {settings.shape_of_index()}; "
            "rebuild into a new store to change them"
        )
    if embedder is not None and current.get("embedder") != embedder.model_id:
        raise IndexConfigError(
            f"the store's name vectors come from {current.get('embedder')!r}, not {embedder.model_id!r}; "
            "use the same embedder (--embedder or LIGHTFOOT_EMBEDDER may name that id), or rebuild into a new store"
        )
