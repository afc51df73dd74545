"""List prices of known language models, USD per million input and output tokens.

The table is ``lightfoot_pipeline/data/llm_prices.json``; the cost ledger charges a model's list
price unless the price is configured (``LLMSettings.price_in_per_mtok``, ``price_out_per_mtok``).
Answers taken through a provider's Batch API are charged at the table's ``batch_discount`` of that
price (``LLMSettings.batch_discount`` overrides it).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=1)
def _prices_file() -> dict:
    return json.loads((resources.files("lightfoot_pipeline") / "data" / "llm_prices.json").read_text(encoding="utf-8"))


def _price_table() -> dict[str, dict]:
    return {k: v for k, v in _prices_file()["models"].items()}


@lru_cache(maxsize=1)
def batch_discount() -> float:
    """The share of a model's price that a provider's Batch API charges (0.5: half price), from the table."""
    return float(_prices_file().get("batch_discount", 1.0))


def list_price(model: str) -> tuple[float, float] | None:
    """The list price of a model (USD per million input, output tokens), if the table has it.

    Matched exactly, then case-insensitively, then by the name after the provider prefix
    (``meta-llama/Llama-3.3-70B-Instruct`` and ``llama-3.3-70b-instruct`` are one model).
    """
    table = _price_table()
    entry = table.get(model)
    if entry is None:
        folded = {k.casefold(): v for k, v in table.items()}
        entry = folded.get(model.casefold())
        if entry is None:
            base = {k.rsplit("/", 1)[-1].casefold(): v for k, v in table.items()}
            entry = base.get(model.rsplit("/", 1)[-1].casefold())
    if entry is None:
        return None
    return float(entry["in"]), float(entry["out"])
