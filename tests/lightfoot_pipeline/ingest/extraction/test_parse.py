"""Tolerant parsing of extraction answers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightfoot_pipeline.ingest.extraction.parse import parse_answer

PASSAGE = "Marie Curie was born in Warsaw in 1867. She won the Nobel Prize in Physics in 1903."
TYPES = ("person", "location", "event", "date", "entity")
RECORD = {
    "entities": [
        {"name": "Marie Curie", "type": "person", "description": "physicist"},
        {"name": "Warsaw", "type": "location", "description": "city of her birth"},
        {"name": "Nobel Prize in Physics", "type": "event", "description": "award"},
    ],
    "facts": [
        ["Marie Curie", "born in", "Warsaw", "Marie Curie was born in Warsaw in 1867"],
        ["Marie Curie", "won", "Nobel Prize in Physics", "She won the Nobel Prize in Physics"],
        ["Marie Curie", "won prize in", "1903", "Nobel Prize in Physics in 1903"],
    ],
}
GOOD = json.dumps(RECORD, separators=(",", ":"))


def parse(text, **kwargs):
    options = dict(entity_types=TYPES, max_entities=12, max_facts=12, description_words=8)
    options.update(kwargs)
    return parse_answer(text, PASSAGE, **options)


def reasons(result) -> list[str]:
    return [f"{i.action}:{i.reason}" for i in result.record.issues]


def test_a_valid_answer_keeps_every_entity_and_fact_with_verified_evidence():
    result = parse(GOOD)
    assert result.ok and result.reason == ""
    assert [e.name for e in result.record.entities] == ["Marie Curie", "Warsaw", "Nobel Prize in Physics"]
    assert [e.type for e in result.record.entities] == ["person", "location", "event"]
    # A fourth element is the evidence, even when it names neither subject nor object verbatim.
    assert [f.evidence_verified for f in result.record.facts] == [True, True, True]
    assert result.record.issues == []


def test_code_fences_and_prose_around_the_object():
    result = parse("Here is the extraction:\n```json\n" + GOOD + "\n```\nLet me know if you need more.")
    assert result.ok and len(result.record.facts) == 3
    assert "repaired:code fence removed" in reasons(result)
    result = parse("Sure. " + GOOD + " That is all.")
    assert result.ok and len(result.record.entities) == 3
    assert {"repaired:prose before JSON", "repaired:prose after JSON"} <= set(reasons(result))


def test_truncated_json_is_closed_and_the_incomplete_item_dropped():
    cut = GOOD[: GOOD.index("She won") + 3]  # inside the evidence of the second fact
    result = parse(cut, truncated=True)
    assert result.ok
    assert len(result.record.entities) == 3
    assert [f.object for f in result.record.facts] == ["Warsaw"]  # the half-written fact is gone
    assert "repaired:truncated JSON closed" in reasons(result)
    # Cut inside the second entity: the first survives, the facts never started.
    cut = GOOD[: GOOD.index('"Warsaw","type"') + 12]
    result = parse(cut)
    assert [e.name for e in result.record.entities] == ["Marie Curie"]
    assert result.record.facts == []


def test_malformed_json_keeps_what_came_before_the_fault():
    broken = GOOD.replace('},{"name":"Nobel', '} {"name":"Nobel')
    result = parse(broken)
    assert result.ok
    assert [e.name for e in result.record.entities] == ["Marie Curie", "Warsaw"]
    assert any(r.startswith("repaired:malformed JSON cut at the fault") for r in reasons(result))


def test_non_standard_json_is_read():
    result = parse(GOOD.replace('"', "'").replace("]]}", "],]}"))
    assert result.ok and len(result.record.facts) == 3 and len(result.record.entities) == 3
    assert "repaired:non-standard JSON read" in reasons(result)


def test_wrong_shapes_are_brought_to_the_schema():
    answer = {
        "Entities": [["Marie Curie", "person", "Polish and naturalised French physicist and chemist who won twice"]],
        "triples": [{"subject": "Marie Curie", "predicate": "born in", "object": "Warsaw",
                     "evidence": "born in Warsaw"}, [1867, "is", "year", "in 1867"]],
    }
    result = parse(json.dumps(answer))
    assert result.ok
    assert result.record.entities[0].description == "Polish and naturalised French physicist and chemist who"
    assert [(f.subject, f.object) for f in result.record.facts] == [("Marie Curie", "Warsaw"), ("1867", "year")]
    assert {"repaired:entities under another key", "repaired:facts under another key",
            "repaired:array instead of object", "repaired:description over the word limit",
            "repaired:object instead of array", "repaired:number as text"} <= set(reasons(result))


def test_entity_and_fact_limits_and_unknown_types():
    answer = {
        "entities": [{"name": f"Thing {i}", "type": "spaceship", "description": "x"} for i in range(20)],
        "facts": [[f"Thing {i}", "near", "Warsaw", "born in Warsaw"] for i in range(15)],
    }
    result = parse(json.dumps(answer))
    assert len(result.record.entities) == 12 and len(result.record.facts) == 12
    assert {e.type for e in result.record.entities} == {"entity"}
    assert {"dropped:over the entity limit", "dropped:over the fact limit"} <= set(reasons(result))


def test_evidence_not_in_the_passage_keeps_the_fact_and_flags_it():
    answer = {"entities": [], "facts": [["Marie Curie", "born in", "Warsaw", "she was born in Kraków"]]}
    result = parse(json.dumps(answer))
    assert len(result.record.facts) == 1
    assert result.record.facts[0].evidence_verified is False
    assert "flagged:evidence not in passage" in reasons(result)


def test_an_oversized_answer_is_cut_before_parsing():
    answer = {"entities": [{"name": f"Name {i}", "type": "person", "description": "d"} for i in range(3000)],
              "facts": []}
    text = json.dumps(answer)
    result = parse(text, max_chars=5000)
    assert result.ok and len(result.record.entities) == 12
    assert {"repaired:answer too long, cut", "repaired:truncated JSON closed"} <= set(reasons(result))


def test_an_empty_extraction_is_not_a_failure():
    result = parse('{"entities":[],"facts":[]}')
    assert result.ok and result.record.entities == [] and result.record.facts == []


def test_unusable_answers_say_why():
    cases = {
        "": "empty answer",
        "   ": "empty answer",
        None: "empty answer",
        "I cannot help with that.": "no JSON object",
        '["Marie Curie", "Warsaw"]': "no JSON object",
        '{"answer": "PWNED"}': "neither entities nor facts",
        "{" + "[" * 5000: "no JSON object",
        '{"entities":[{"name":"Marie Curie","type":': "truncated JSON closed before any complete entity or fact",
    }
    for text, why in cases.items():
        result = parse(text)
        assert not result.ok, text
        assert result.record is None
        assert why in result.reason and result.reason.startswith("unusable answer: ")


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(GOOD)))
def test_any_cut_of_a_valid_answer_parses_to_a_prefix_of_it(cut):
    result = parse(GOOD[:cut], truncated=True)
    if not result.ok:
        assert result.reason.startswith("unusable answer: ")
        return
    full = parse(GOOD).record
    names = [e.name for e in result.record.entities]
    assert names == [e.name for e in full.entities][: len(names)]
    facts = [(f.subject, f.predicate, f.object) for f in result.record.facts]
    assert facts == [(f.subject, f.predicate, f.object) for f in full.facts][: len(facts)]
    # Every fact that survives a cut kept its whole evidence quote.
    assert all(f.evidence_verified for f in result.record.facts)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300))
def test_parsing_never_raises(text):
    result = parse(text)
    assert result.ok or result.reason
