"""Delete: drop documents' rows and recompute only what their names touched. No model call.

The result equals a fresh index of the surviving documents (the erasure invariant); with
``erase`` the deleted text also leaves the store's history (``erase.py``). With ``link=False``
the graph is left to the graph stage, and so is any erasure: until the graph is recomputed its
tables still hold the deleted documents' names and facts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.index.documents import TombstoneReport, tombstone_documents
from lightfoot_pipeline.index.reconcile import GraphChange, reconcile_graph
from lightfoot_pipeline.operations.erase import erase_history, pending_erasures
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.snapshot.verdict import StagedCheck
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import TOMBSTONES
from lightfoot_pipeline.store.transaction import Transaction


@dataclass
class DeleteReport:
    deleted: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)  # not live: nothing to delete
    already_deleted: list[str] = field(default_factory=list)  # those of not_found that were deleted before
    passages_removed: int = 0
    graph: GraphChange = field(default_factory=GraphChange)
    model_calls: int = 0  # always 0: deletion never calls a model; reported so that it shows
    seq: int = 0
    seconds: float = 0.0
    erase: dict | None = None
    tombstone: TombstoneReport | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k not in {"graph", "tombstone"}}
        out["graph"] = self.graph.as_dict()
        return out


def delete(
    store: Store,
    doc_ids: Sequence[str],
    settings: IndexSettings | None = None,
    *,
    erase: bool = False,
    reason: str = "",
    stage: Callable[[Transaction], None] | None = None,
    link: bool = True,
    snapshot_checks: Sequence[StagedCheck] = (),
) -> DeleteReport:
    """Delete documents: drop their rows, recompute what their names touched. No model call.

    Ids the store does not hold are reported in ``not_found`` (a deletion of what is not there is
    done already). With ``erase``, the history of the deleted documents is erased, and so is that
    of ids deleted earlier without an erase (``already_deleted``). With or without it, erasures
    asked for earlier and not finished are finished (``erase`` in the report says what was
    erased). A deleted document's file at a sync source is excluded there. ``stage``: further
    changes to make in the same commit, before the graph update. ``link=False``: commit the
    tombstones and the rows' removal only; the graph queue keeps the names and facts for the
    graph stage, and the erasures (this one's and any pending) stay pending until an erase after it.
    ``snapshot_checks``: what a snapshot exported to replace one holding erased text must pass to
    be published (snapshot/export.py: ``publish_checked``).
    """
    settings = settings or IndexSettings()
    started = time.perf_counter()
    with store.transaction() as tx:
        tombstone = tombstone_documents(tx, doc_ids, reason=reason, erase=erase)
        if stage is not None:
            stage(tx)
        graph = reconcile_graph(tx, settings, None) if link else GraphChange()
        earlier = tx.table(TOMBSTONES.name).filter(pl.col("doc_id").is_in(tombstone.not_found))
        manifest = tx.commit("delete", {"deleted": len(tombstone.deleted), "erase": erase, "model_calls": 0})
    report = DeleteReport(
        deleted=tombstone.deleted, not_found=tombstone.not_found, passages_removed=len(tombstone.chunk_ids),
        already_deleted=sorted(set(earlier.get_column("doc_id").to_list())),
        graph=graph, seq=manifest.seq, tombstone=tombstone,
    )
    report.seconds = time.perf_counter() - started
    # An erasure asked for earlier and not finished (a run stopped between its deletion and its
    # erasure) is finished by the next delete, with or without an erase of its own.
    if link and (erase or pending_erasures(store)):
        ids = [*tombstone.deleted, *report.already_deleted] if erase else []
        report.erase = erase_history(store, ids, snapshot_checks=snapshot_checks).as_dict()
    return report
