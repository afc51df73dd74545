"""Delete: drop documents' rows and recompute only what their names touched. No model call.

The result equals a fresh index of the surviving documents (the erasure invariant); with
``erase`` the deleted text also leaves the store's history (``erase.py``). With ``link=False``
the graph is left to the graph stage, and so is any erasure: until the graph is recomputed its
tables still hold the deleted documents' names and facts. A deletion of more documents than
``$LIGHTFOOT_DELETION_PIECE`` is committed in pieces (:func:`delete`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lightfoot_pipeline.index.documents import TombstoneReport, tombstone_documents
from lightfoot_pipeline.index.reconcile import GraphChange, reconcile_graph
from lightfoot_pipeline.operations.erase import erase_history, pending_erasures
from lightfoot_pipeline.settings import IndexSettings, deletion_piece
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

    More documents than ``$LIGHTFOOT_DELETION_PIECE`` (50,000) are deleted in pieces of that many,
    one commit each: what a deletion holds follows the piece, not the request, and each commit
    leaves what a fresh build of the documents left then gives. The erasure runs once, after the
    last. (``link=False`` commits the tombstones at once: the graph is left to the graph stage.)
    """
    settings = settings or IndexSettings()
    started = time.perf_counter()
    ids = list(dict.fromkeys(doc_ids))
    size = deletion_piece()
    pieces = ([ids[i:i + size] for i in range(0, len(ids), size)] if link else [ids]) or [[]]
    tombstone = TombstoneReport()
    earlier: set[str] = set()
    graph: GraphChange | None = None
    for number, piece in enumerate(pieces, start=1):
        # Each piece is one commit that leaves what a fresh build of the documents left then gives;
        # ``stage`` goes with the last, which leaves the store as one commit of all of them would.
        with store.transaction() as tx:
            done = tombstone_documents(tx, piece, reason=reason, erase=erase)
            if stage is not None and number == len(pieces):
                stage(tx)
            change = reconcile_graph(tx, settings, None) if link else GraphChange()
            if done.not_found:  # of those, the ones deleted earlier (the rows of their ids only)
                earlier.update(tx.rows(TOMBSTONES.name, "doc_id", done.not_found).get_column("doc_id").to_list())
            details = {"deleted": len(done.deleted), "erase": erase, "model_calls": 0}
            if len(pieces) > 1:
                details.update(piece=number, pieces=len(pieces))
            manifest = tx.commit("delete", details)
        for name in ("deleted", "not_found", "chunk_ids", "cache_keys"):
            getattr(tombstone, name).extend(getattr(done, name))
        graph = change if graph is None else graph.then(change)
    report = DeleteReport(
        deleted=tombstone.deleted, not_found=tombstone.not_found, passages_removed=len(tombstone.chunk_ids),
        already_deleted=sorted(earlier), graph=graph or GraphChange(), seq=manifest.seq, tombstone=tombstone,
    )
    report.seconds = time.perf_counter() - started
    # An erasure asked for earlier and not finished (a run stopped between its deletion and its
    # erasure) is finished by the next delete, with or without an erase of its own.
    if link and (erase or pending_erasures(store)):
        erased = [*tombstone.deleted, *report.already_deleted] if erase else []
        report.erase = erase_history(store, erased, snapshot_checks=snapshot_checks).as_dict()
    return report
