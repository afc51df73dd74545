"""Retention: which documents are past their retention date, from their metadata or a policy file.

A document's retention date is the earliest of

- its own ``retention_until`` (a corpus field, stored in the documents table), and
- the dates the policy file's matching rules give it.

It is due for deletion (a hard erase) on the first day after that date.

Dates are strict ISO 8601 (:func:`parse_retention_date`): a calendar date ``2026-06-30``, or a
date and time with its UTC offset ``2026-06-30T18:00:00+02:00`` (``Z`` for UTC), which counts as
its calendar date in UTC, so a document is never erased before the instant it names. Anything else
(``2026-06-30 garbage``, a week date, a time without an offset, a number) is refused.

The policy file is JSON::

    {"rules": [
        {"source": "crm/*", "keep_days": 365},
        {"doc_id": "draft-*", "delete_after": "2026-06-30"}
    ]}

A rule matches a document when every pattern it gives (``doc_id``, ``source``; shell-style globs)
matches; it gives ``delete_after`` (a date, as above) or ``keep_days`` (counted from the day the
document landed, so it applies to documents that came through an inbox).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.ingest.doc_ids import doc_id_problem
from lightfoot_pipeline.store.filesystem import open_filesystem

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:\d{2})", re.ASCII)


def parse_retention_date(value: object) -> dt.date:
    """The date of an ISO 8601 date, or of a date and time with an offset (its UTC date).

    Raises ValueError saying what is wrong with anything else.
    """
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a date: expected an ISO 8601 date string such as '2026-06-30'")
    try:
        if _DATE.fullmatch(value):
            return dt.date.fromisoformat(value)
        if _DATETIME.fullmatch(value):
            return dt.datetime.fromisoformat(value).astimezone(dt.UTC).date()
    except ValueError as err:  # the right shape, but no such day or time (2026-02-30)
        raise ValueError(f"{value!r} is not a valid date ({err})") from err
    raise ValueError(
        f"{value!r} is not an ISO 8601 date: expected YYYY-MM-DD, or YYYY-MM-DDTHH:MM[:SS] with an offset "
        "(Z or +HH:MM)"
    )


class PolicyError(LightfootError, ValueError):
    """A retention policy file that cannot be read; the message says where and why."""

    hint = "correct the policy file (its format: the docstring of lightfoot_pipeline/ingest/retention.py)"


@dataclass(frozen=True)
class RetentionRule:
    doc_id: str | None = None
    source: str | None = None
    delete_after: dt.date | None = None
    keep_days: int | None = None

    def matches(self, doc_id: str, source: str) -> bool:
        return (self.doc_id is None or fnmatch.fnmatchcase(doc_id, self.doc_id)) and (
            self.source is None or fnmatch.fnmatchcase(source or "", self.source)
        )

    def until(self, landed_on: dt.date | None) -> dt.date | None:
        if self.delete_after is not None:
            return self.delete_after
        if self.keep_days is not None and landed_on is not None:
            return landed_on + dt.timedelta(days=self.keep_days)
        return None

    def describe(self) -> str:
        where = " and ".join(f"{k} {v!r}" for k, v in (("doc_id", self.doc_id), ("source", self.source)) if v)
        what = f"delete after {self.delete_after}" if self.delete_after else f"keep {self.keep_days} days"
        return f"policy rule ({where or 'every document'}: {what})"


@dataclass(frozen=True)
class RetentionPolicy:
    rules: tuple[RetentionRule, ...] = ()

    @classmethod
    def parse(cls, text: str, where: str = "retention policy") -> RetentionPolicy:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise PolicyError(f"{where}: not valid JSON ({err.msg} at line {err.lineno})") from err
        if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
            raise PolicyError(f"{where}: expected an object with a list of rules")
        rules = []
        for number, raw in enumerate(data["rules"], start=1):
            rules.append(_rule(raw, f"{where}: rule {number}"))
        return cls(tuple(rules))


def load_policy(location: str | None, storage_options: dict[str, str] | None = None) -> RetentionPolicy:
    """The policy in a file (a local path or an object-store URI, reached with the store's
    ``storage_options``); no location: the empty policy."""
    if not location:
        return RetentionPolicy()
    fs, path = open_filesystem(location, storage_options)
    try:
        with fs.open_input_stream(path) as stream:
            return RetentionPolicy.parse(stream.read().decode("utf-8"), location)
    except FileNotFoundError as err:
        raise PolicyError(f"{location}: retention policy file not found") from err


def _rule(raw: object, where: str) -> RetentionRule:
    if not isinstance(raw, dict):
        raise PolicyError(f"{where}: expected an object")
    unknown = set(raw) - {"doc_id", "source", "delete_after", "keep_days"}
    if unknown:
        raise PolicyError(f"{where}: unknown fields {sorted(unknown)}")
    for name in ("doc_id", "source"):
        if name in raw and not isinstance(raw[name], str):
            raise PolicyError(f"{where}: {name} must be a glob pattern string")
    if "doc_id" in raw and (problem := doc_id_problem(raw["doc_id"])):
        # What no doc id may hold, a pattern's literal parts cannot match either.
        raise PolicyError(f"{where}: the pattern can match no document: {problem}")
    if ("delete_after" in raw) == ("keep_days" in raw):
        raise PolicyError(f"{where}: give exactly one of delete_after and keep_days")
    delete_after = None
    if "delete_after" in raw:
        try:
            delete_after = parse_retention_date(raw["delete_after"])
        except ValueError as err:
            raise PolicyError(f"{where}: delete_after {err}") from err
    keep_days = raw.get("keep_days")
    if keep_days is not None and (not isinstance(keep_days, int) or isinstance(keep_days, bool) or keep_days < 0):
        raise PolicyError(f"{where}: keep_days must be a whole number of days, not {keep_days!r}")
    return RetentionRule(raw.get("doc_id"), raw.get("source"), delete_after, keep_days)


@dataclass(frozen=True)
class DueDocument:
    doc_id: str
    until: dt.date
    why: str

    @property
    def reason(self) -> str:
        return f"retention: {self.why} expired on {self.until.isoformat()}"


def due_documents(
    documents: pl.DataFrame,
    today: dt.date,
    policy: RetentionPolicy | None = None,
    landed_on: Mapping[str, dt.date] | None = None,
) -> list[DueDocument]:
    """Documents (rows of the documents table) whose retention date is before ``today``."""
    policy = policy or RetentionPolicy()
    landed_on = landed_on or {}
    due = []
    for row in documents.select("doc_id", "source", "retention_until").iter_rows(named=True):
        candidates: list[tuple[dt.date, str]] = []
        if row["retention_until"] is not None:
            candidates.append((row["retention_until"], "retention_until"))
        for rule in policy.rules:
            if rule.matches(row["doc_id"], row["source"] or ""):
                until = rule.until(landed_on.get(row["doc_id"]))
                if until is not None:
                    candidates.append((until, rule.describe()))
        if candidates:
            until, why = min(candidates)
            if until < today:
                due.append(DueDocument(row["doc_id"], until, why))
    return sorted(due, key=lambda d: d.doc_id)
