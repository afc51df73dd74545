"""The JSON schemas of the deep mode's three model replies (sent as structured output where the
endpoint takes it; parse.py reads replies that stray from them).

Every property is required, so that the schemas hold in strict structured-output modes; a field
that does not apply is sent empty (``""`` or ``[]``).
"""

from __future__ import annotations

_IDS = {"type": "array", "items": {"type": "string"}}

CHECK_SCHEMA = {
    "title": "memory_check",
    "type": "object",
    "properties": {
        "sufficient": {"type": "boolean", "description": "whether the memory answers the question"},
        "reason": {"type": "string", "description": "what the memory has, or what it lacks"},
        "subqueries": {
            "type": "array",
            "description": "when not sufficient: what to retrieve next",
            "items": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": ["local", "global"]},
                    "point": {"type": "string", "description": "local: the memory point investigated (M1, …)"},
                    "query": {"type": "string"},
                },
                "required": ["kind", "point", "query"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["sufficient", "reason", "subqueries"],
    "additionalProperties": False,
}

OPERATIONS_SCHEMA = {
    "title": "memory_operations",
    "type": "object",
    "properties": {
        "operations": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": ["insert", "update", "merge"]},
                    "point": {"type": "string", "description": "update: the point changed (M1, …)"},
                    "points": {**_IDS, "description": "merge: the points merged"},
                    "description": {"type": "string"},
                    "entities": {**_IDS, "description": "entity references (E1, …)"},
                    "facts": {**_IDS, "description": "fact references (F1, …)"},
                    "passages": {**_IDS, "description": "passage references (P1, …)"},
                },
                "required": ["op", "point", "points", "description", "entities", "facts", "passages"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["operations"],
    "additionalProperties": False,
}

ANSWER_SCHEMA = {
    "title": "memory_answer",
    "type": "object",
    "properties": {
        "answer": {"type": "string", "description": "the shortest span that answers the question"},
        "points": {**_IDS, "description": "the memory points the answer rests on (M1, …)"},
    },
    "required": ["answer", "points"],
    "additionalProperties": False,
}

SCHEMAS = {"check": CHECK_SCHEMA, "memory": OPERATIONS_SCHEMA, "answer": ANSWER_SCHEMA}
