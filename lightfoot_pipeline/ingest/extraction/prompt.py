"""The extraction prompt and output schema, read from data files in ``prompts/``.

``extract.md`` is the system message, ``extract.user.md`` the user message around the passage,
``extract.schema.json`` the JSON schema of the answer (sent as structured-output format where the
endpoint supports it). Placeholders ``{{NAME}}`` are filled from :class:`ExtractionPrompt`'s
limits and entity types.

The passage goes in as data between ``<passage>`` tags. A passage cannot close the tag early:
tag look-alikes inside it are defanged (``<`` becomes ``‹``) before it is placed, so whatever it
says stays inside the data block.

Hashes: ``prompt_hash`` covers both rendered templates (so changing the wording, the limits or
the entity types makes a new cache key), ``schema_hash`` the rendered schema.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources

from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.settings import DEFAULT_ENTITY_TYPES

MAX_ENTITIES = 12
MAX_FACTS = 12
DESCRIPTION_WORDS = 8
EVIDENCE_WORDS = 12
# Output budget per passage: the paper's prompt averages 269 output tokens; a full answer of 12
# entities and 12 facts fits in about 900.
MAX_OUTPUT_TOKENS = 1200

_TAG_LOOKALIKE = re.compile(r"<(\s*/?\s*passage)", re.IGNORECASE)


def _read(name: str) -> str:
    return (resources.files("lightfoot_pipeline.ingest.extraction") / "prompts" / name).read_text(encoding="utf-8")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def passage_block(passage: Passage) -> str:
    """The passage text as it is placed between the tags: title line, then text, defanged."""
    return _TAG_LOOKALIKE.sub(r"‹\1", passage.retrieval_text)


@dataclass(frozen=True)
class ExtractionPrompt:
    entity_types: tuple[str, ...] = field(default=DEFAULT_ENTITY_TYPES)
    max_entities: int = MAX_ENTITIES
    max_facts: int = MAX_FACTS
    description_words: int = DESCRIPTION_WORDS
    evidence_words: int = EVIDENCE_WORDS
    max_output_tokens: int = MAX_OUTPUT_TOKENS

    def __post_init__(self) -> None:
        if not self.entity_types or any(not t or t != t.strip().casefold() or " " in t for t in self.entity_types):
            raise ValueError(f"entity types must be non-empty lower-case words, got {self.entity_types!r}")
        for name in ("max_entities", "max_facts", "description_words", "evidence_words", "max_output_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def _fill(self, template: str) -> str:
        values = {
            "ENTITY_TYPES": ", ".join(self.entity_types),
            "MAX_ENTITIES": str(self.max_entities),
            "MAX_FACTS": str(self.max_facts),
            "DESCRIPTION_WORDS": str(self.description_words),
            "EVIDENCE_WORDS": str(self.evidence_words),
        }
        for name, value in values.items():
            template = template.replace("{{" + name + "}}", value)
        return template

    @cached_property
    def system(self) -> str:
        return self._fill(_read("extract.md")).strip()

    @cached_property
    def user_template(self) -> str:
        return self._fill(_read("extract.user.md")).strip()

    @cached_property
    def schema(self) -> dict:
        schema = json.loads(_read("extract.schema.json"))
        entities = schema["properties"]["entities"]
        entities["maxItems"] = self.max_entities
        entities["items"]["properties"]["type"]["enum"] = list(self.entity_types)
        schema["properties"]["facts"]["maxItems"] = self.max_facts
        return schema

    @cached_property
    def prompt_hash(self) -> str:
        return _sha(f"{self.system}\x00{self.user_template}\x00{self.max_output_tokens}")

    @cached_property
    def schema_hash(self) -> str:
        return _sha(json.dumps(self.schema, sort_keys=True, separators=(",", ":")))

    def messages(self, passage: Passage) -> list[dict]:
        user = self.user_template.replace("{{PASSAGE}}", passage_block(passage))
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    @staticmethod
    def text_hash(passage: Passage) -> str:
        """Hash of exactly what the model reads of the passage (its title and text)."""
        return _sha(passage_block(passage))
