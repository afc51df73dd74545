"""The cost ledger: every model call, its tokens and its price, by run and by document.

One row per call, written as the answers arrive (extraction writes each answer's row before the
request that follows it is sent), to a journal table beside the store's tables. A call is one
answer asked for, however many HTTP requests it took: ``attempts`` counts its requests, and its
retries are the requests after the first (resent after a 429, a 5xx, a timeout or a dropped
connection, or in a simpler output mode). :func:`totals` and the per-run and per-document sums
report ``calls`` and ``retries`` apart. Rows hold ids and numbers only — run, passage, document,
cache key, model, tokens, prices — never text, so erasing a document leaves nothing of its text
here; the rows stay as the record of what was paid.

Prices are USD per million tokens: the configured ones (``LIGHTFOOT_LLM_PRICE_IN`` /
``LIGHTFOOT_LLM_PRICE_OUT``), else the model's list price from ``data/llm_prices.json`` (the
paper's Llama 3.3 70B: $0.10 in, $0.32 out). Each row keeps the prices it was charged at; a call
to a model without a known price, made because the operator allowed it, is ``unpriced`` at $0.
A call whose endpoint reported no usage is charged the most it could have been billed
(``usage_reported`` false).

Many threads append at once (a query service's answers): :func:`ensure` creates the ledger before
they start, and each append is tried again until it is written (``Journals.append_journal``), so
no row is lost to another writer's commit.

:func:`totals` is what the Dagster layer reports as metadata; ``lightfoot cost`` prints
:func:`totals`, :func:`by_run` and :func:`by_document`.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

import polars as pl

from lightfoot_pipeline.store.tables import LLM_LEDGER, arrow_frame, with_buckets


def new_run_id(prefix: str = "run") -> str:
    """A run id for calls made outside an orchestrator run: time-ordered, then random."""
    now = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{prefix}-{now}-{uuid.uuid4().hex[:8]}"


def cost_usd(tokens_in: int, tokens_out: int, price_in_per_mtok: float, price_out_per_mtok: float) -> float:
    return (tokens_in * price_in_per_mtok + tokens_out * price_out_per_mtok) / 1_000_000


@dataclass(frozen=True)
class Charge:
    """One call's entry: who asked, what it cost."""

    run_id: str
    purpose: str
    model: str
    status: str
    attempts: int
    tokens_in: int
    tokens_out: int
    price_in_per_mtok: float
    price_out_per_mtok: float
    price_source: str
    seconds: float = 0.0
    doc_id: str | None = None
    chunk_id: str | None = None
    cache_key: str | None = None
    error_kind: str | None = None
    usage_reported: bool = True

    @property
    def cost_usd(self) -> float:
        return cost_usd(self.tokens_in, self.tokens_out, self.price_in_per_mtok, self.price_out_per_mtok)

    def row(self) -> dict:
        return {
            "call_id": uuid.uuid4().hex,
            "run_id": self.run_id,
            "purpose": self.purpose,
            "model": self.model,
            "doc_id": self.doc_id,
            "chunk_id": self.chunk_id,
            "cache_key": self.cache_key,
            "status": self.status,
            "error_kind": self.error_kind,
            "attempts": self.attempts,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "usage_reported": self.usage_reported,
            "price_in_per_mtok": self.price_in_per_mtok,
            "price_out_per_mtok": self.price_out_per_mtok,
            "price_source": self.price_source,
            "cost_usd": self.cost_usd,
            "seconds": self.seconds,
            "created_at": dt.datetime.now(dt.UTC),
        }


def ensure(store) -> bool:
    """Create the (empty) ledger if the store has none yet; True when this call created it."""
    return store.ensure_journal(LLM_LEDGER.name)


def record(store, charges: list[Charge]) -> None:
    """Append charges to the ledger (one journal commit for the lot, durable when this returns;
    tried again until written, StoreError after ``journals.APPEND_RETRY_S``)."""
    if not charges:
        return
    frame = pl.DataFrame([c.row() for c in charges], schema=arrow_frame(LLM_LEDGER.schema.empty_table()).schema)
    store.append_journal(LLM_LEDGER.name, with_buckets(frame, LLM_LEDGER, store.n_buckets))


def compact(store) -> int:
    """Rewrite the small files that appends left into a few larger ones; the files compacted."""
    return store.compact_journal(LLM_LEDGER.name)


def read(store, run_id: str | None = None) -> pl.DataFrame:
    rows = store.read_journal(LLM_LEDGER.name)
    return rows if run_id is None else rows.filter(pl.col("run_id") == run_id)


_SUMS = [
    pl.len().alias("calls"),
    (pl.col("attempts") - 1).clip(lower_bound=0).sum().alias("retries"),
    pl.col("attempts").sum().alias("attempts"),
    pl.col("tokens_in").sum().alias("tokens_in"),
    pl.col("tokens_out").sum().alias("tokens_out"),
    pl.col("cost_usd").sum().alias("cost_usd"),
    (pl.col("status") != "ok").sum().alias("failed_calls"),
    (pl.col("price_source") == "unpriced").sum().alias("unpriced_calls"),
    (~pl.col("usage_reported")).sum().alias("estimated_usage_calls"),
]


def totals(store, run_id: str | None = None) -> dict:
    """Calls, retries, attempts (calls + retries), tokens and cost, over the whole ledger or one run."""
    rows = read(store, run_id)
    empty = {"calls": 0, "retries": 0, "attempts": 0, "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0, "failed_calls": 0,
             "unpriced_calls": 0, "estimated_usage_calls": 0}
    out: dict[str, Any] = (dict(empty) if rows.height == 0
                           else {k: v for k, v in rows.select(_SUMS).row(0, named=True).items()})
    out = {k: (float(v) if k == "cost_usd" else int(v)) for k, v in out.items()}
    out["runs"] = rows.get_column("run_id").n_unique() if rows.height else 0
    out["documents"] = rows.get_column("doc_id").drop_nulls().n_unique() if rows.height else 0
    out["models"] = sorted(rows.get_column("model").unique().to_list()) if rows.height else []
    if run_id is not None:
        out["run_id"] = run_id
    return out


def by_run(store) -> list[dict]:
    """One line per run, oldest first."""
    rows = read(store)
    if rows.height == 0:
        return []
    grouped = rows.group_by("run_id").agg(
        *_SUMS,
        pl.col("created_at").min().alias("started_at"),
        pl.col("created_at").max().alias("finished_at"),
        pl.col("model").unique().sort().str.join(",").alias("models"),
    )
    return grouped.sort(["started_at", "run_id"]).to_dicts()


def by_document(store, run_id: str | None = None) -> list[dict]:
    """One line per document (calls with no document, such as answers, are left out)."""
    rows = read(store, run_id).filter(pl.col("doc_id").is_not_null())
    if rows.height == 0:
        return []
    return rows.group_by("doc_id").agg(*_SUMS).sort("doc_id").to_dicts()
