"""Shared fixtures of the permission tests: the bundled sample with readers assigned by a seeded
rule, and the four principals of the issue (no group, staff, legal, staff and legal)."""

from __future__ import annotations

import random
import shutil

import polars as pl
import pytest

from lightfoot_pipeline.ingest.readers import readers_text
from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENT_READERS, with_buckets

GROUPS_SEED = 27
PRINCIPALS = (
    Principal("nobody-special", ()),
    Principal("staff-member", ("staff",)),
    Principal("counsel", ("legal",)),
    Principal("partner", ("legal", "staff")),
)


def seeded_readers(doc_ids: list[str], seed: int = GROUPS_SEED) -> dict[str, tuple[str, ...]]:
    """Readers for each document by a seeded rule: about 40% public, 20% staff, 20% legal, 10% both
    staff and legal, 10% nobody but the operator."""
    rng = random.Random(seed)
    choices = [("public",)] * 4 + [("staff",)] * 2 + [("legal",)] * 2 + [("legal", "staff")] + [()]
    return {doc_id: rng.choice(choices) for doc_id in sorted(doc_ids)}


def write_readers(store: Store, readers: dict[str, tuple[str, ...]]) -> None:
    """Set documents' readers in one commit (what ``operations.set_readers`` does; here without it,
    so that the view tests stand on the store alone)."""
    ids = sorted(readers)
    frame = pl.DataFrame({"doc_id": ids, "readers": [readers_text(readers[d]) for d in ids]},
                         schema={"doc_id": pl.String, "readers": pl.String})
    with store.transaction() as tx:
        tx.rows(DOCUMENT_READERS.name, "doc_id", ids)
        tx.update(DOCUMENT_READERS.name, remove=pl.col("doc_id").is_in(ids),
                  add=with_buckets(frame, DOCUMENT_READERS, tx.n_buckets))
        tx.commit("readers", {"documents": len(ids)})


@pytest.fixture(scope="session")
def restricted_sample(tmp_path_factory, sample_store_built, sample_documents):
    """A copy of the bundled sample's store with seeded readers, and the readers it was given."""
    root = tmp_path_factory.mktemp("restricted-sample") / "store"
    shutil.copytree(sample_store_built, root)
    readers = seeded_readers([d.doc_id for d in sample_documents])
    write_readers(Store(str(root)), readers)
    return root, readers
