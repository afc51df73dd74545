"""Retention: documents due for deletion from their own date or the policy file."""

from __future__ import annotations

import datetime as dt
import json

import polars as pl
import pytest

from lightfoot_pipeline.retention import PolicyError, RetentionPolicy, due_documents

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
