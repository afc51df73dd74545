"""Claims on extraction-cache keys: at most one claimant holds a key, however many claim it at once."""

from __future__ import annotations

import threading
import time

import pytest

from lightfoot_pipeline.ingest.extraction.claims import ExtractionClaims


def test_a_key_another_claimant_holds_is_not_given_out(store):
    a, b = ExtractionClaims(store, "run-a"), ExtractionClaims(store, "run-b")
    assert a.claim(["k1", "k2"]) == (["k1", "k2"], {})
    mine, others = b.claim(["k2", "k3"])
    assert mine == ["k3"]
    assert list(others) == ["k2"] and others["k2"].claimant == "run-a"
    assert a.claim(["k2"])[0] == ["k2"], "a claimant's own claim does not block it"


def test_a_release_frees_the_key_and_keeps_the_reason(store):
    a, b = ExtractionClaims(store, "run-a"), ExtractionClaims(store, "run-b")
    a.claim(["k1", "k2"])
    a.release(["k1", "k2"], {"k2": "model call failed after 1 attempt(s): HTTP 503"})
    assert b.reasons(["k1", "k2", "k3"]) == {"k2": "model call failed after 1 attempt(s): HTTP 503"}
    assert b.claim(["k1", "k2"]) == (["k1", "k2"], {})
    assert a.reasons(["k2"]) == {}, "the latest event of a key is its state: claimed again, no reason"


def test_a_claim_ends_when_its_lease_runs_out(store):
    ExtractionClaims(store, "run-a", lease_s=0.2).claim(["k1"])
    b = ExtractionClaims(store, "run-b")
    assert b.claim(["k1"])[0] == []
    time.sleep(0.3)
    assert b.claim(["k1"])[0] == ["k1"]


def test_claimants_racing_for_the_same_keys_never_both_hold_one(store):
    keys = [f"k{i}" for i in range(12)]
    won: dict[str, list[str]] = {}
    start = threading.Barrier(4)

    def claim(name: str) -> None:
        claims = ExtractionClaims(store, name)
        start.wait()
        held: list[str] = []
        for i in range(0, len(keys), 3):  # several rounds, so appends interleave
            held += claims.claim(keys[i:i + 3])[0]
        won[name] = held

    threads = [threading.Thread(target=claim, args=(f"run-{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    holders = {key: [name for name, held in won.items() if key in held] for key in keys}
    assert all(len(names) == 1 for names in holders.values()), holders
    state = ExtractionClaims(store, "reader").state(keys)
    assert {key: state[key].claimant for key in keys} == {key: names[0] for key, names in holders.items()}


def test_a_claimant_needs_a_name_and_a_positive_lease(store):
    with pytest.raises(ValueError, match="needs a name"):
        ExtractionClaims(store, "")
    with pytest.raises(ValueError, match="lease_s"):
        ExtractionClaims(store, "run-a", lease_s=0)
