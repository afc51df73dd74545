"""The deep mode's memory operations and reply parsing, without a model or a snapshot."""

from __future__ import annotations

import pytest

from lightfoot_pipeline.retrieval.deep.memory import MAX_DESCRIPTION_CHARS, Memory, Operation
from lightfoot_pipeline.retrieval.deep.parse import ReplyError, find_object, parse_check, parse_final, parse_operations


def test_insert_update_and_merge_take_effect_and_ids_are_never_reused():
    memory = Memory()
    a = memory.apply(Operation("insert", "A", entity_ids=["e1"], chunk_ids=["c1"]))
    b = memory.apply(Operation("insert", "B", fact_ids=["f1"]))
    assert (a.point, b.point) == ("M1", "M2") and a.applied and b.applied
    memory.apply(Operation("update", "A, revised", point="M1", chunk_ids=["c2", "c1"]))
    assert memory.points["M1"].description == "A, revised" and memory.points["M1"].chunk_ids == ["c1", "c2"]
    merged = memory.apply(Operation("merge", "A and B", points=["M1", "M2"], entity_ids=["e2"]))
    assert merged.point == "M3" and list(memory.points) == ["M3"]
    point = memory.points["M3"]
    assert (point.entity_ids, point.fact_ids, point.chunk_ids) == (["e1", "e2"], ["f1"], ["c1", "c2"])
    assert memory.apply(Operation("insert", "C", chunk_ids=["c9"])).point == "M4"


@pytest.mark.parametrize("operation, reason", [
    (Operation("insert", "", chunk_ids=["c"]), "needs a description"),
    (Operation("insert", "nothing under it"), "at least one entity"),
    (Operation("update", "x", point="M9"), "no memory point 'M9'"),
    (Operation("update", "", point="M1"), "new description or new evidence"),
    (Operation("merge", "x", points=["M1"]), "at least two"),
    (Operation("merge", "x", points=["M1", "M7"]), "no memory points ['M7']"),
    (Operation("merge", "", points=["M1", "M2"]), "description of the merged point"),
    (Operation("delete", "x", point="M1"), "unknown operation 'delete'"),
])
def test_an_operation_that_cannot_apply_is_refused_and_changes_nothing(operation, reason):
    memory = Memory()
    memory.apply(Operation("insert", "A", chunk_ids=["c1"]))
    memory.apply(Operation("insert", "B", chunk_ids=["c2"]))
    before = memory.as_list()
    result = memory.apply(operation)
    assert not result.applied and reason in result.reason and memory.as_list() == before


def test_a_long_description_is_cut_and_noted():
    memory = Memory()
    op = memory.apply(Operation("insert", "word " * 400, chunk_ids=["c"]))
    assert len(memory.points["M1"].description) == MAX_DESCRIPTION_CHARS and op.notes


@pytest.mark.parametrize("text", [None, "", "no json here", "[1, 2]", "{broken"])
def test_a_reply_without_a_readable_object_is_refused(text):
    with pytest.raises(ReplyError):
        find_object(text)


def test_replies_are_read_past_known_deviations():
    notes: list[str] = []
    assert find_object("Sure!\n```json\n{'a': True, 'b': [1, 2,],}\n```", notes) == {"a": True, "b": [1, 2]}
    assert "code fence removed" in notes
    cut = '{"operations": [{"op": "insert", "description": "one", "passages": ["P1"]}, {"op": "upd'
    operations, notes = parse_operations(cut)
    assert [o.op for o in operations] == ["insert"] and "truncated JSON closed" in notes
    operations, _ = parse_operations('{"Ops": [{"Operation": "Add", "Content": "x", "chunks": "P2", "id": "m3"}]}')
    assert (operations[0].op, operations[0].description, operations[0].refs, operations[0].point) == (
        "insert", "x", ["P2"], "M3")
    with pytest.raises(ReplyError, match="no list of operations"):
        parse_operations('{"answer": "x"}')


def test_the_check_reply_needs_a_verdict_and_subqueries_when_insufficient():
    check = parse_check('{"sufficient": "no", "subqueries": [{"kind": "local", "point": "M5", "query": "q"}, '
                        '{"query": "r", "point": "2"}, {"kind": "global", "query": ""}]}', {"M2"}, 3)
    assert [(q.kind, q.point, q.query) for q in check.subqueries] == [("global", None, "q"), ("local", "M2", "r")]
    assert any("unknown point 'M5'" in n for n in check.notes) and any("without a query" in n for n in check.notes)
    assert len(parse_check('{"sufficient": false, "queries": ["a", "b", "c", "d"]}', set(), 2).subqueries) == 2
    with pytest.raises(ReplyError, match="verdict"):
        parse_check('{"subqueries": []}', set(), 3)
    with pytest.raises(ReplyError, match="no usable subquery"):
        parse_check('{"sufficient": false, "subqueries": []}', set(), 3)


def test_the_answer_reply_keeps_known_points_and_falls_back_to_the_first_line():
    assert parse_final('{"answer": "Tallinn", "points": ["M1", "m2", "M9"]}', {"M1", "M2"})[:2] == (
        "Tallinn", ["M1", "M2"])
    answer, points, notes = parse_final("Tallinn\nbecause the memory says so", {"M1"})
    assert (answer, points) == ("Tallinn", []) and notes
    with pytest.raises(ReplyError):
        parse_final("{}", set())
