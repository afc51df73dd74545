"""Claims on extraction-cache keys: which run asks the model for a passage text, so it is asked once.

Runs that extract in parallel (each in its own pod) may hold the same passage text: the same
document in two drops, or two documents that share a passage. Before asking the model, a run
claims the cache keys it means to ask; a key another run holds is not asked but waited for, until
its answer is in the cache or the claim ends (released, expired, or its holder finished).

The claims are a journal table. Every append lands on the exact Delta version after the one it was
computed from, or fails and is computed again (:meth:`Store.append_journal_after`), so the
journal's versions order all claims and releases, whatever the writers' clocks say: the row with
the highest ``seq`` (the version it landed at) is a key's state. Two runs claiming the same key at
once cannot both see it free and both land: the second to land read a version without the first's
claim, so its append fails, and it reads again.

A claim expires after ``lease_s`` (a holder that died without releasing); a run claims at most
``CLAIM_CHUNK`` keys at a time and asks them before it claims more, so a live holder keeps its
claims well inside the lease.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import polars as pl

from lightfoot_pipeline.store.log import ConcurrentCommitError
from lightfoot_pipeline.store.tables import EXTRACTION_CLAIMS, with_buckets

CLAIM, RELEASE = "claim", "release"
CLAIM_LEASE_S = 1800.0  # a claim its holder neither released nor renewed ends after this long
CLAIM_CHUNK = 256  # keys claimed at once; a holder asks them before it claims more
APPEND_TRIES = 50  # appends that lost the race to another writer before one gives up


@dataclass(frozen=True)
class Claim:
    """A key's latest claim or release."""

    cache_key: str
    event: str
    claimant: str
    reason: str
    expires_at: dt.datetime

    def held(self, now: dt.datetime) -> bool:
        return self.event == CLAIM and self.expires_at > now


class ExtractionClaims:
    """The claims journal of a store, seen by one claimant (a run id)."""

    def __init__(self, store, claimant: str, lease_s: float = CLAIM_LEASE_S) -> None:
        if not claimant:
            raise ValueError("a claimant needs a name (the run id)")
        if lease_s <= 0:
            raise ValueError(f"lease_s must be positive, got {lease_s}")
        self.store = store
        self.claimant = claimant
        self.lease_s = lease_s

    def state(self, keys: Iterable[str]) -> dict[str, Claim]:
        """Each key's latest claim or release (keys never claimed are absent)."""
        return self._state(set(keys))[1]

    def claim(self, keys: Iterable[str], ended: Callable[[str], bool] | None = None) -> tuple[list[str], dict[str, Claim]]:
        """Claim every key that no other claimant holds: the keys this claimant now holds, and the
        claims of the keys other claimants hold. A claimant for which ``ended`` is true (a run that
        finished) holds nothing."""
        wanted = set(keys)
        if not wanted:
            return [], {}
        for _ in range(APPEND_TRIES):
            version, state = self._state(wanted)
            now = _now()
            others = {k: c for k, c in state.items()
                      if c.claimant != self.claimant and c.held(now) and not (ended and ended(c.claimant))}
            mine = sorted(wanted - set(others))
            if self._append_after(version, mine, CLAIM, {}, now):
                return mine, others
        raise ConcurrentCommitError(f"claims on the extraction cache kept losing to other writers ({APPEND_TRIES} tries)")

    def release(self, keys: Iterable[str], reasons: dict[str, str] | None = None) -> None:
        """End this claimant's claims on the keys; ``reasons`` says why a key has no answer."""
        released = sorted(set(keys))
        if not released:
            return
        for _ in range(APPEND_TRIES):
            version, _ = self._state(set())
            if self._append_after(version, released, RELEASE, reasons or {}, _now()):
                return
        raise ConcurrentCommitError(f"releases of extraction-cache claims kept losing to other writers ({APPEND_TRIES} tries)")

    def reasons(self, keys: Iterable[str]) -> dict[str, str]:
        """Why each key's latest holder released it without an answer (keys with no such reason are absent)."""
        return {k: c.reason for k, c in self.state(keys).items() if c.event == RELEASE and c.reason}

    # -- the journal --------------------------------------------------------------------------

    def _state(self, keys: set[str]) -> tuple[int | None, dict[str, Claim]]:
        version, rows = self.store.read_journal_version(EXTRACTION_CLAIMS.name)
        if not keys or rows.height == 0:
            return version, {}
        latest = rows.filter(pl.col("cache_key").is_in(sorted(keys))).sort("seq").unique("cache_key", keep="last")
        return version, {
            r["cache_key"]: Claim(r["cache_key"], r["event"], r["claimant"], r["reason"] or "", r["expires_at"])
            for r in latest.iter_rows(named=True)
        }

    def _append_after(self, version: int | None, keys: list[str], event: str, reasons: dict[str, str],
                      now: dt.datetime) -> bool:
        if not keys:
            return True
        seq = 0 if version is None else version + 1
        expires = now + dt.timedelta(seconds=self.lease_s) if event == CLAIM else now
        frame = pl.DataFrame(
            {"cache_key": keys, "seq": [seq] * len(keys), "event": [event] * len(keys),
             "claimant": [self.claimant] * len(keys), "reason": [reasons.get(k, "") for k in keys],
             "at": [now] * len(keys), "expires_at": [expires] * len(keys)},
            schema=pl.from_arrow(EXTRACTION_CLAIMS.schema.empty_table()).schema,
        )
        landed = self.store.append_journal_after(
            EXTRACTION_CLAIMS.name, with_buckets(frame, EXTRACTION_CLAIMS, self.store.n_buckets), version)
        if not landed:
            time.sleep(random.uniform(0.005, 0.05))  # another writer landed first: read again, a moment later
        return landed


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
