"""What the checks of a staged snapshot found, kept beside it, and whether it was published.

A snapshot is exported *staged*: its files are written but the ``latest`` pointer does not move.
Its blocking checks (:data:`StagedCheck`: the permission audit of its reader views, a comparison
of the store with a fresh rebuild) run on the staged copy, and only a snapshot that passes them
is published (export.py: :func:`publish_checked`). What they found is written beside the
snapshot's files as ``verdict.json``: each check's name, whether it passed or was skipped and why,
and its metadata — ids, counts, digests and group names, never a passage, title or question. A
snapshot left unpublished keeps its verdict, so ``lightfoot status`` and Dagster can say why
(:func:`unpublished_snapshot`), until a later snapshot is published or an erasure removes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from lightfoot_pipeline.snapshot.format import MANIFEST_FILE, MISSING, SnapshotDirectory, SnapshotError, SnapshotInfo
from lightfoot_pipeline.store.store import Store

VERDICT_FILE = "verdict.json"


@dataclass(frozen=True)
class CheckVerdict:
    """One check of a staged snapshot: ``passed``, or ``skipped`` with why (a skipped check blocks
    nothing), and ``reason`` when it failed. ``metadata`` holds ids, counts, digests only."""

    name: str
    passed: bool
    reason: str | None = None
    skipped: str | None = None
    metadata: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, payload: dict) -> CheckVerdict:
        return cls(name=str(payload["name"]), passed=bool(payload["passed"]), reason=payload.get("reason"),
                   skipped=payload.get("skipped"), metadata=dict(payload.get("metadata") or {}))


# A check of a staged snapshot: given the store and the staged snapshot's manifest, what it found.
StagedCheck = Callable[[Store, SnapshotInfo], CheckVerdict]


@dataclass(frozen=True)
class Verdict:
    """What became of a staged snapshot: published, or why not."""

    snapshot_id: str
    published: bool
    checks: list[CheckVerdict] = field(default_factory=list)
    reason: str | None = None  # why it was not published: the failing checks, or a newer snapshot

    def as_dict(self) -> dict:
        return {"snapshot_id": self.snapshot_id, "published": self.published, "reason": self.reason,
                "checks": [c.as_dict() for c in self.checks]}

    @classmethod
    def from_dict(cls, payload: dict) -> Verdict:
        return cls(snapshot_id=str(payload["snapshot_id"]), published=bool(payload["published"]),
                   checks=[CheckVerdict.from_dict(c) for c in payload.get("checks", [])], reason=payload.get("reason"))


def failing_reason(checks: list[CheckVerdict]) -> str | None:
    """Why these checks keep a snapshot unpublished (None when every one passed or was skipped)."""
    failed = [c for c in checks if not c.passed and c.skipped is None]
    return "; ".join(f"{c.name} failed: {c.reason or 'no reason given'}" for c in failed) or None


def write_verdict(location: SnapshotDirectory, verdict: Verdict) -> bool:
    """Keep the verdict beside its snapshot; False (nothing written) when the snapshot is gone (an
    erasure removed it while it was checked). Called under the snapshot lock."""
    if not location.exists(location.path(verdict.snapshot_id, MANIFEST_FILE)):
        return False
    location.write_bytes(location.path(verdict.snapshot_id, VERDICT_FILE),
                         json.dumps(verdict.as_dict(), indent=2, sort_keys=True).encode())
    return True


def read_verdict(location: SnapshotDirectory, snapshot_id: str) -> Verdict | None:
    """A snapshot's verdict, or None when it has none (under check, or exported before verdicts)."""
    payload = location.read_json(location.path(snapshot_id, VERDICT_FILE),
                                 f"snapshot {snapshot_id} has an unreadable verdict")
    if payload is MISSING:
        return None
    try:
        return Verdict.from_dict(payload)
    except (KeyError, TypeError, ValueError) as err:
        raise SnapshotError(f"snapshot {snapshot_id} has a verdict of another shape: {err}") from err


def unpublished_snapshot(store: Store) -> Verdict | None:
    """The newest snapshot staged after the published one and left unpublished, with why; None
    when there is none (snapshots under check have no verdict yet and are not reported)."""
    location = SnapshotDirectory(store)
    published = location.pointer() or ""
    for snapshot_id in reversed(location.snapshot_ids()):
        if snapshot_id <= published:
            return None
        verdict = read_verdict(location, snapshot_id)
        if verdict is not None and not verdict.published:
            return verdict
    return None
