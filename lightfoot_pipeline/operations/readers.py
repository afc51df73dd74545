"""Set readers: change who may read live documents, in one store commit. No model call.

A document's readers are metadata beside its text (``document_readers``, ingest/readers.py): a
change of them rewrites that row and nothing else, so no passage, extraction, form or graph row
changes and the graph queue stays as it is. The change is logged under the current batch with
the action ``readers`` (store/batches.py), and the commit records the reason and the counts, never a
document's content.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.ingest.readers import ReadersError, parse_groups, readers_of_text, readers_text
from lightfoot_pipeline.store.batches import READERS, log_documents
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENT_READERS, DOCUMENTS, with_buckets


@dataclass
class ReadersReport:
    """What a change of readers did: ``changed`` maps each document whose readers changed to its
    readers before and after; ``unchanged``, each that had the readers asked for already, to them.
    ``seq`` is the store commit (0 when nothing changed and nothing was committed)."""

    changed: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    unchanged: dict[str, list[str]] = field(default_factory=dict)
    model_calls: int = 0  # always 0: a change of readers never calls a model
    seq: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def set_readers(store: Store, readers: Mapping[str, Iterable[str] | str], *, reason: str = "") -> ReadersReport:
    """Give each live document of ``readers`` (doc_id → group names, or one comma-separated string)
    those readers, in one commit.

    Every group is checked as a document's readers are (:func:`~lightfoot_pipeline.ingest.readers.parse_groups`),
    and every id must be a live document: otherwise ReadersError, and nothing changes. Documents
    that have the readers asked for already are left as they are; when none changes, nothing is
    committed. A document stored before readers were kept (no row) reads as public.
    """
    wanted = {doc_id: parse_groups(groups if isinstance(groups, str) else list(groups),
                                   f"set_readers: readers of {doc_id!r}")
              for doc_id, groups in sorted(readers.items())}
    if not wanted:
        return ReadersReport()
    ids = list(wanted)
    with store.transaction() as tx:
        live = set(tx.rows(DOCUMENTS.name, "doc_id", ids).get_column("doc_id").to_list())
        unknown = [d for d in ids if d not in live]
        if unknown:
            shown = ", ".join(map(repr, unknown[:10])) + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
            raise ReadersError(f"set_readers: {len(unknown)} of the documents are not live in {store.uri}: {shown}",
                               hint="name live documents only (`lightfoot explain doc ID` says what became of one)")
        stored = dict(tx.rows(DOCUMENT_READERS.name, "doc_id", ids).select("doc_id", "readers").iter_rows())
        report = ReadersReport()
        for doc_id, groups in wanted.items():
            before = readers_of_text(stored.get(doc_id))
            if doc_id in stored and stored[doc_id] == readers_text(groups):
                report.unchanged[doc_id] = list(groups)
            else:
                report.changed[doc_id] = {"before": list(before), "after": list(groups)}
        if not report.changed:
            return report
        changed = list(report.changed)
        rows = pl.DataFrame({"doc_id": changed, "readers": [readers_text(wanted[d]) for d in changed]},
                            schema={"doc_id": pl.String, "readers": pl.String})
        tx.update(DOCUMENT_READERS.name, remove=pl.col("doc_id").is_in(changed),
                  add=with_buckets(rows, DOCUMENT_READERS, tx.n_buckets))
        log_documents(tx, {READERS: changed})
        manifest = tx.commit("readers", {"reason": reason, "readers_changed": len(changed),
                                         "unchanged": len(report.unchanged), "model_calls": 0})
    report.seq = manifest.seq
    return report
