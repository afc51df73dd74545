"""The resources every Lightfoot definition uses, configured from the environment.

The variables are read by ``lightfoot_pipeline/settings/environment.py`` and listed in the README's settings
table; the language model's endpoint, model and key (OPENAI_BASE_URL, LIGHTFOOT_LLM_MODEL,
OPENAI_API_KEY) reach the extractor only as ``dg.EnvVar``, resolved at run time and never stored.
"""

import dagster as dg

from assets.resources import EmbedderResource, ExtractorResource, InboxResource, StoreResource
from lightfoot_pipeline.settings import extractor_mode, is_set


def _env(name: str) -> dg.EnvVar | None:
    """An EnvVar when the variable is set (resolved at run time, never stored), else None."""
    return dg.EnvVar(name) if is_set(name) else None


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(
        resources={
            "store": StoreResource(),
            "embedder": EmbedderResource(),
            "extractor": ExtractorResource(
                mode=extractor_mode(),
                base_url=_env("OPENAI_BASE_URL"),
                model=_env("LIGHTFOOT_LLM_MODEL"),
                api_key=_env("OPENAI_API_KEY"),
            ),
            "inbox": InboxResource(),
        }
    )
