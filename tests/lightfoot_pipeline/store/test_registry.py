"""The store's tables are one fixed set, declared in store/tables.py: what vacuum, recovery and
migration go through does not depend on which modules a process happened to import.

One fresh interpreter reads ``all_specs()`` after importing ``store.tables`` alone, then imports
every module of the engine and of the Dagster layer in turn, each package led by the package
itself and the Dagster layer by its definitions, and reads it again after each: a table that
some module declared on import would show up as a difference at that module.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import assets
import lightfoot_pipeline

ROOT = Path(__file__).resolve().parents[3]

EXPECTED = {
    # index tables
    "documents", "document_readers", "passages", "passage_sources", "extractions", "forms", "fact_sources", "name_links",
    "aliases", "entities", "mentions", "synonym_edges", "facts",
    # operational tables
    "name_links_reverse", "name_sketches", "document_keys", "tombstones", "graph_queue",
    "extraction_cache", "extraction_claims", "llm_ledger", "source_files", "batch_documents",
    "extraction_batches", "extraction_batch_requests",
}

# Imports the modules named in argv in turn, in this order, and prints the table names that
# all_specs() gives after each (JSON: module -> names).
SCRIPT = """
import importlib, json, sys
seen = {}
for name in sys.argv[1:]:
    importlib.import_module(name)
    tables = importlib.import_module("lightfoot_pipeline.store.tables")
    seen[name] = sorted(spec.name for spec in tables.all_specs())
print(json.dumps(seen))
"""


def modules_of(package) -> list[str]:
    """Every module of a package, sub-packages included (``__main__`` modules run on import: left out)."""
    found = [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return [name for name in found if not name.endswith(".__main__")]


def import_order() -> list[str]:
    """``store.tables`` first, then each top-level package of the engine led by the package itself
    (``lightfoot_pipeline.cli`` among them), then the Dagster layer led by ``assets.definitions``."""
    engine = modules_of(lightfoot_pipeline)
    out: dict[str, list[str]] = {}
    for name in engine:
        top = ".".join(name.split(".")[:2])
        out.setdefault(top, [top]).extend([name] if name != top else [])
    dagster = ["assets.definitions", *(m for m in modules_of(assets) if m != "assets.definitions")]
    return ["lightfoot_pipeline.store.tables", *(m for batch in out.values() for m in batch), *dagster]


@pytest.mark.slow  # one fresh interpreter importing every module, the Dagster definitions among them
def test_every_table_is_declared_whatever_was_imported():
    order = import_order()
    assert {"lightfoot_pipeline.cli", "lightfoot_pipeline.store", "lightfoot_pipeline.ingest",
            "assets.definitions"} <= set(order)
    result = subprocess.run([sys.executable, "-c", SCRIPT, *order], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"importing the modules failed:\n{result.stderr[-4000:]}"
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(seen) == set(order)
    differing = {module: sorted(set(names) ^ EXPECTED) for module, names in seen.items() if set(names) != EXPECTED}
    assert not differing, f"all_specs() differs from the declared tables after importing: {differing}"
    assert all(len(names) == len(EXPECTED) for names in seen.values())
