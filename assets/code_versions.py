"""Each asset's code version: a digest of the source of the code that computes it.

``code_version(__name__, "passages")`` in an asset's decorator is the digest of the function
``passages`` of that module over the sources of ``lightfoot_pipeline`` (the engine) and
``assets`` (lightfoot_pipeline/provenance/source_versions.py says what it covers), with the
engine's version and the index's settings (``IndexSettings().shape_of_index()``), which change
what the tables hold without a change to a line of code. So the UI marks an asset's
materializations stale when the code that computes it changes, and only that asset's: the
per-batch assets keep their version when the graph's code changes. The five graph assets are one
multi-asset (one function, one store commit) and share its version.
"""

from __future__ import annotations

from functools import cache, lru_cache
from pathlib import Path

from lightfoot_pipeline.provenance.source_versions import SourceIndex

__all__ = ["SourceIndex", "code_version"]


@lru_cache(maxsize=1)
def _index() -> SourceIndex:
    import assets
    import lightfoot_pipeline

    return SourceIndex({
        "lightfoot_pipeline": Path(lightfoot_pipeline.__file__).resolve().parent.parent,
        "assets": Path(assets.__file__).resolve().parent.parent,
    })


@lru_cache(maxsize=1)
def _engine_and_settings() -> dict:
    import lightfoot_pipeline
    from lightfoot_pipeline.settings import IndexSettings

    return {"engine": lightfoot_pipeline.__version__, "settings": IndexSettings().shape_of_index()}


@cache
def code_version(module_name: str, function: str) -> str:
    """The code version of the asset computed by ``function`` of ``module_name`` (see above)."""
    return _index().digest(module_name, function, _engine_and_settings())
