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


@pytest.fixture(scope="session")
def readable_store(tmp_path_factory, restricted_sample, sample_documents, sample_records, hashing_embedder):
    """``readable_store(principal) -> Store``: a store of only the documents of the restricted sample
    that ``principal`` may read (each with its readers, as a document's record names them), its
    snapshot exported; built once per principal in a session. Tests read it, never write to it."""
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor
    from lightfoot_pipeline.snapshot.export import export_snapshot

    _, readers = restricted_sample
    built: dict[str, Store] = {}

    def build(principal: Principal) -> Store:
        if principal.name not in built:
            readable = {d for d, groups in readers.items() if principal.may_read(groups)}
            store = Store(str(tmp_path_factory.mktemp(f"readable-by-{principal.name}") / "store"))
            operations.ingest(store, [d for d in sample_documents if d.doc_id in readable],
                              ReplayExtractor(sample_records), hashing_embedder)
            write_readers(store, {d: readers[d] for d in readable})
            export_snapshot(store, hashing_embedder)
            built[principal.name] = store
        return built[principal.name]

    return build


@pytest.fixture(scope="session")
def served(restricted_sample, hashing_embedder):
    """The restricted sample's snapshot (exported once per session), its readers and its store."""
    from lightfoot_pipeline.snapshot.export import export_snapshot
    from lightfoot_pipeline.snapshot.format import load_snapshot

    root, readers = restricted_sample
    store = Store(str(root))
    export_snapshot(store, hashing_embedder)
    return load_snapshot(store), readers, store
