from collections import Counter

from lightfoot_pipeline.ingest.records import validate_record

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
