"""The cost ledger: one row per model call, ids and numbers only, totals per run and document."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lightfoot_pipeline.store import ledger


def charge(run_id, doc_id, tokens_in, tokens_out, status="ok", **extra):
    values = dict(run_id=run_id, purpose="extract", model="meta-llama/Llama-3.3-70B-Instruct", status=status,
                  attempts=1, tokens_in=tokens_in, tokens_out=tokens_out, price_in_per_mtok=0.10,
                  price_out_per_mtok=0.32, price_source="list", doc_id=doc_id, chunk_id=f"chunk-{doc_id}")
    values.update(extra)
    return ledger.Charge(**values)


def test_cost_at_the_papers_prices():
    # One million tokens each way at $0.10 in and $0.32 out:
    assert ledger.cost_usd(1_000_000, 1_000_000, 0.10, 0.32) == pytest.approx(0.42)
    assert charge("r", "d", 2000, 500).cost_usd == pytest.approx((2000 * 0.10 + 500 * 0.32) / 1e6)


def test_totals_per_run_and_per_document(store):
    ledger.record(store, [charge("run-a", "d1", 1000, 100), charge("run-a", "d2", 2000, 200),
                          charge("run-a", "d2", 500, 0, status="error", attempts=5, error_kind="timeout")])
    ledger.record(store, [charge("run-b", "d1", 4000, 400, attempts=2),
                          charge("run-b", None, 300, 30, purpose="answer", chunk_id=None)])
    everything = ledger.totals(store)
    assert (everything["calls"], everything["attempts"], everything["runs"], everything["documents"]) == (5, 10, 2, 2)
    assert everything["retries"] == 5  # 4 of the timed-out call and 1 of run-b's: not calls
    assert (everything["tokens_in"], everything["tokens_out"]) == (7800, 730)
    assert everything["cost_usd"] == pytest.approx(ledger.cost_usd(7800, 730, 0.10, 0.32))
    assert everything["failed_calls"] == 1
    run_a = ledger.totals(store, "run-a")
    assert (run_a["calls"], run_a["tokens_in"], run_a["run_id"]) == (3, 3500, "run-a")
    assert ledger.totals(store, "no-such-run")["calls"] == 0
    runs = ledger.by_run(store)
    assert [r["run_id"] for r in runs] == ["run-a", "run-b"]
    assert [r["calls"] for r in runs] == [3, 2]
    assert [r["retries"] for r in runs] == [4, 1]
    docs = {d["doc_id"]: d for d in ledger.by_document(store)}
    assert set(docs) == {"d1", "d2"}  # the answer call has no document
    assert (docs["d1"]["calls"], docs["d1"]["retries"], docs["d1"]["tokens_in"]) == (2, 1, 5000)
    assert (docs["d2"]["calls"], docs["d2"]["retries"]) == (2, 4)
    assert {d["doc_id"] for d in ledger.by_document(store, "run-b")} == {"d1"}


@pytest.mark.slow
def test_every_charge_is_durable_once_recorded_and_compaction_keeps_them(store):
    for i in range(store.n_buckets * 5):  # one append per answer, as extraction writes them
        ledger.record(store, [charge("run-a", f"d{i}", 100, 10, attempts=1 + i % 2)])
    appended = len(DeltaTable(store.journal_uri(ledger.LLM_LEDGER.name)).file_uris())
    assert appended > store.n_buckets * 4
    assert appended - store.n_buckets <= ledger.compact(store) <= appended  # a bucket's lone file stays as it is
    assert len(DeltaTable(store.journal_uri(ledger.LLM_LEDGER.name)).file_uris()) <= store.n_buckets
    totals = ledger.totals(store)
    assert (totals["calls"], totals["retries"]) == (store.n_buckets * 5, store.n_buckets * 5 // 2)
    assert ledger.compact(store) == 0  # nothing small left to compact


def test_an_empty_ledger(store):
    assert ledger.totals(store)["calls"] == 0
    assert ledger.totals(store)["retries"] == 0
    assert ledger.by_run(store) == [] and ledger.by_document(store) == []


def test_rows_hold_ids_and_numbers_only():
    ids = {"call_id", "run_id", "purpose", "model", "doc_id", "chunk_id", "cache_key", "status", "error_kind",
           "price_source"}
    strings = {f.name for f in ledger.LLM_LEDGER.schema if pa.types.is_string(f.type)}
    assert strings == ids


def test_run_ids_are_unique():
    assert len({ledger.new_run_id() for _ in range(50)}) == 50
