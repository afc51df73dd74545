"""The resources every Lightfoot definition uses, configured from the environment.

LIGHTFOOT_STORE (store root), LIGHTFOOT_EMBEDDER (model or ``hashing``), LIGHTFOOT_EXTRACTOR
(auto | replay | openai), LIGHTFOOT_INBOX, LIGHTFOOT_ERASURE_INBOX and
LIGHTFOOT_RETENTION_POLICY; the language model's endpoint, model and key come from
OPENAI_BASE_URL, LIGHTFOOT_LLM_MODEL and OPENAI_API_KEY (the key only through ``dg.EnvVar``).
"""

import os

import dagster as dg

from assets.resources import EmbedderResource, ExtractorResource, InboxResource, StoreResource


def _env(name: str) -> dg.EnvVar | None:
    """An EnvVar when the variable is set (resolved at run time, never stored), else None."""
    return dg.EnvVar(name) if os.environ.get(name) else None


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(
        resources={
            "store": StoreResource(),
            "embedder": EmbedderResource(),
            "extractor": ExtractorResource(
                mode=os.environ.get("LIGHTFOOT_EXTRACTOR", "auto"),
                base_url=_env("OPENAI_BASE_URL"),
                model=_env("LIGHTFOOT_LLM_MODEL"),
                api_key=_env("OPENAI_API_KEY"),
            ),
            "inbox": InboxResource(),
        }
    )
