"""Retention: documents due for deletion from their own date or the policy file."""

from __future__ import annotations

import datetime as dt
import json
import re

import polars as pl
import pytest

from lightfoot_pipeline.ingest.retention import PolicyError, RetentionPolicy, due_documents, parse_retention_date

TODAY = dt.date(2026, 6, 15)


def documents(*rows) -> pl.DataFrame:
    return pl.DataFrame(
        [{"doc_id": d, "source": s, "retention_until": r} for d, s, r in rows],
        schema={"doc_id": pl.String, "source": pl.String, "retention_until": pl.Date},
    )


def test_own_retention_date_expires_the_day_after():
    docs = documents(("past", "", dt.date(2026, 6, 14)), ("today", "", TODAY), ("none", "", None))
    due = due_documents(docs, TODAY)
    assert [d.doc_id for d in due] == ["past"]
    assert due[0].reason == "retention: retention_until expired on 2026-06-14"


def test_policy_rules_match_by_glob_and_the_earliest_date_wins():
    policy = RetentionPolicy.parse(json.dumps({"rules": [
        {"source": "crm/*", "keep_days": 30},
        {"doc_id": "draft-*", "delete_after": "2026-06-01"},
        {"doc_id": "keep-me", "source": "wiki", "delete_after": "2020-01-01"},
    ]}))
    docs = documents(
        ("crm-old", "crm/eu", None), ("crm-new", "crm/eu", None), ("crm-unlanded", "crm/eu", None),
        ("draft-1", "wiki", dt.date(2030, 1, 1)), ("draft-2", "wiki", dt.date(2026, 5, 1)),
        ("keep-me", "blog", None), ("other", "wiki", None),
    )
    landed = {"crm-old": dt.date(2026, 5, 1), "crm-new": dt.date(2026, 6, 1)}
    due = {d.doc_id: d for d in due_documents(docs, TODAY, policy, landed)}
    assert sorted(due) == ["crm-old", "draft-1", "draft-2"]
    assert "keep-me" not in due  # its source pattern does not match
    assert due["crm-old"].until == dt.date(2026, 5, 31)
    assert "keep 30 days" in due["crm-old"].reason
    assert due["draft-1"].until == dt.date(2026, 6, 1)
    assert due["draft-2"].until == dt.date(2026, 5, 1) and "retention_until" in due["draft-2"].reason


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not valid JSON"),
        ('{"rules": {}}', "a list of rules"),
        ('{"rules": [{"doc_id": "a"}]}', "exactly one of delete_after and keep_days"),
        ('{"rules": [{"keep_days": 1, "delete_after": "2026-01-01"}]}', "exactly one"),
        ('{"rules": [{"delete_after": "soon"}]}', "not an ISO 8601 date"),
        ('{"rules": [{"keep_days": -1}]}', "whole number of days"),
        ('{"rules": [{"keep_days": 1, "owner": "x"}]}', "unknown fields"),
        ('{"rules": [{"keep_days": 1, "source": 3}]}', "glob pattern string"),
    ],
)
def test_a_bad_policy_says_where_and_why(text, message):
    with pytest.raises(PolicyError, match=message):
        RetentionPolicy.parse(text, "policy.json")


@pytest.mark.parametrize(
    "value, date",
    [
        ("2026-06-30", dt.date(2026, 6, 30)),
        ("2026-06-30T10:00Z", dt.date(2026, 6, 30)),
        ("2026-06-30T23:59:59.999999+00:00", dt.date(2026, 6, 30)),
        ("2026-07-01T01:30:00+02:00", dt.date(2026, 6, 30)),  # its instant is 2026-06-30T23:30Z
        ("2026-06-30T22:00:00-05:00", dt.date(2026, 7, 1)),  # and this one 2026-07-01T03:00Z
    ],
)
def test_retention_dates_are_iso_dates_or_datetimes_with_an_offset(value, date):
    assert parse_retention_date(value) == date


@pytest.mark.parametrize(
    "value, message",
    [
        ("2024-01-01 garbage", "not an ISO 8601 date"),
        ("2024-01-01garbage", "not an ISO 8601 date"),
        ("2024-01-01\n", "not an ISO 8601 date"),
        (" 2024-01-01", "not an ISO 8601 date"),
        ("20240101", "not an ISO 8601 date"),
        ("2024-W01-1", "not an ISO 8601 date"),
        ("2024-01-01T10:00:00", "not an ISO 8601 date"),  # no offset: which day it ends is unknown
        ("2024-01-01 10:00:00+00:00", "not an ISO 8601 date"),
        ("２０２４-０１-０１", "not an ISO 8601 date"),
        ("2024-02-30", "not a valid date"),
        ("2024-01-01T25:00Z", "not a valid date"),
        ("soon", "not an ISO 8601 date"),
        (20240101, "not a date"),
        (["2024-01-01"], "not a date"),
    ],
)
def test_anything_else_is_refused_with_the_reason(value, message):
    with pytest.raises(ValueError, match=message):
        parse_retention_date(value)


def test_a_policy_date_is_read_as_strictly():
    with pytest.raises(PolicyError, match=re.escape("policy.json: rule 1: delete_after '2026-06-30 later' is not an ISO 8601")):
        RetentionPolicy.parse('{"rules": [{"delete_after": "2026-06-30 later"}]}', "policy.json")
    (rule,) = RetentionPolicy.parse('{"rules": [{"delete_after": "2026-06-30T23:00:00-02:00"}]}').rules
    assert rule.delete_after == dt.date(2026, 7, 1)
