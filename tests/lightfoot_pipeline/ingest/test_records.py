import json
from collections import Counter

import pytest

from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.ingest.extraction.parse import parse_answer
from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.ingest.records import validate_record
from lightfoot_pipeline.settings import MAX_ENTITIES_PER_PASSAGE, MAX_FACTS_PER_PASSAGE, IndexSettings

PASSAGE = "Houston has an average temperature of 53.1 °F in January. The Bank of Sierra Leone is the central bank."


def test_valid_record_passes_unchanged():
    record = {"entities": [{"name": "Houston", "type": "location", "description": "a city"}],
              "facts": [["Houston", "has average temperature of", "53.1 °F"]]}
    result = validate_record(record, PASSAGE, entity_types=("location", "entity"))
    assert [e.name for e in result.entities] == ["Houston"]
    assert result.entities[0].type == "location"
    assert len(result.facts) == 1 and not result.issues


def test_split_predicate_is_repaired():
    result = validate_record({"facts": [["Houston", "has", "average temperature of", "53.1 °F"]]}, PASSAGE)
    assert [(f.subject, f.predicate, f.object) for f in result.facts] == [
        ("Houston", "has average temperature of", "53.1 °F")
    ]
    assert result.counts() == Counter({"repaired:fact:predicate split in two": 1})


def test_fourth_element_quoting_the_passage_is_evidence():
    quote = "The Bank of Sierra Leone is the central bank"
    result = validate_record({"facts": [["Bank of Sierra Leone", "is", "central bank", quote]]}, PASSAGE)
    assert result.facts[0].evidence == quote and result.facts[0].evidence_verified is True


def test_malformed_facts_are_dropped_with_reasons():
    record = {"facts": [["Houston", "is a city"], ["a", "b", "c", "d", "e"], "not a list", ["", "x", "y"],
                        ["Saint-Jules", "has population of", "573", "2011 Census"], [None, "p", "o"]]}
    result = validate_record(record, PASSAGE)
    assert result.facts == []
    reasons = Counter(i.reason for i in result.issues)
    assert reasons == Counter({"no object": 1, "5 elements": 1, "not an array": 1,
                               "empty subject, predicate or object": 1, "4 elements, ambiguous": 1,
                               "element that is not text": 1})


def test_numbers_are_repaired_to_text():
    result = validate_record({"facts": [["Houston", "has population", 2304580]]}, PASSAGE)
    assert result.facts[0].object == "2304580"
    assert result.n_repaired == 1


def test_evidence_not_in_passage_is_flagged_not_dropped():
    result = validate_record({"facts": [["Houston", "is in", "Texas", "Houston is the largest city in Texas"]]},
                             PASSAGE, max_facts=12, evidence_fourth=True)
    assert len(result.facts) == 1
    assert result.facts[0].evidence_verified is False
    assert [i.action for i in result.issues] == ["flagged"]


def test_limits_and_garbage_never_raise():
    many = {"entities": [{"name": f"E{i}"} for i in range(20)] + ["bare", 7, {"type": "x"}],
            "facts": "nope"}
    result = validate_record(many, PASSAGE, max_entities=12)
    assert len(result.entities) == 12
    assert validate_record(["not", "an", "object"], PASSAGE).issues[0].reason == "not an object"


def test_recorded_sample_counts(sample_documents, sample_records):
    """The recording has 185 malformed facts: 101 are repaired, 84 dropped, none abort."""
    passages = {d.doc_id: f"{d.title}\n{d.text}" for d in sample_documents}
    totals: Counter = Counter()
    for doc_id, record in sample_records.items():
        totals.update(validate_record(record, passages[doc_id]).counts())
    repaired = sum(v for k, v in totals.items() if k.startswith("repaired:fact"))
    dropped = sum(v for k, v in totals.items() if k.startswith("dropped:fact"))
    assert (repaired, dropped) == (101, 84)
    assert totals["dropped:fact:no object"] == 70
    # The caps sit far above the recording: none of its records reaches them.
    assert not any("limit" in key for key in totals)
    assert max(len(r.get("facts") or []) for r in sample_records.values()) < MAX_FACTS_PER_PASSAGE
    assert max(len(r.get("entities") or []) for r in sample_records.values()) < MAX_ENTITIES_PER_PASSAGE


def test_a_passage_with_ten_thousand_facts_is_capped_with_the_reason():
    huge = {"entities": [{"name": f"Entity {i}"} for i in range(10_000)],
            "facts": [[f"Entity {i}", "precedes", f"Entity {i + 1}"] for i in range(10_000)]}
    result = validate_record(huge, PASSAGE)
    assert len(result.entities) == MAX_ENTITIES_PER_PASSAGE and len(result.facts) == MAX_FACTS_PER_PASSAGE
    assert result.facts[-1].subject == f"Entity {MAX_FACTS_PER_PASSAGE - 1}"  # the first ones are kept
    assert result.counts() == Counter({"dropped:entity:over the entity limit": 1, "dropped:fact:over the fact limit": 1})
    detail = {i.reason: i.detail for i in result.issues}
    assert detail["over the fact limit"] == f"{10_000 - MAX_FACTS_PER_PASSAGE} past {MAX_FACTS_PER_PASSAGE}"
    assert len(validate_record(huge, PASSAGE, max_entities=None, max_facts=None).facts) == 10_000


def test_the_caps_are_settings_that_reach_the_replayed_records():
    settings = IndexSettings(max_entities_per_passage=2, max_facts_per_passage=3)
    record = {"entities": [{"name": n} for n in ("A", "B", "C")], "facts": [["A", "is", f"B{i}"] for i in range(5)]}
    extractor = ReplayExtractor({"d": record}, max_entities=settings.max_entities_per_passage,
                                max_facts=settings.max_facts_per_passage)
    (outcome,) = extractor.extract([Passage("c", "d", 0, "", "A is B.")])
    assert (len(outcome.record.entities), len(outcome.record.facts)) == (2, 3)
    assert outcome.record.counts()["dropped:fact:over the fact limit"] == 1
    (default,) = ReplayExtractor({"d": record}).extract([Passage("c", "d", 0, "", "A is B.")])
    assert (len(default.record.entities), len(default.record.facts)) == (3, 5)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_facts_per_passage must be a whole number"):
            IndexSettings(max_facts_per_passage=bad)


def test_a_model_answer_is_capped_too():
    answer = json.dumps({"entities": [], "facts": [[f"S{i}", "p", f"O{i}"] for i in range(150)]})
    parsed = parse_answer(answer)
    assert len(parsed.record.facts) == MAX_FACTS_PER_PASSAGE
    assert parsed.record.counts()["dropped:fact:over the fact limit"] == 1
