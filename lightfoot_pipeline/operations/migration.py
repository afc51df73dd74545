"""The index derived again from a store's documents and extractions, with no model call.

``rebuild`` makes a fresh index of another store's live documents (what the deletion audits
compare against); ``migrate`` does it in place, bringing a store of an earlier layout or bucket
count to this version's.
"""

from __future__ import annotations

from collections.abc import Iterable

from lightfoot_pipeline.index.documents import derive_forms
from lightfoot_pipeline.index.reconcile import GraphChange, Linker, reconcile_graph
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.operations.config import IndexConfigError, check_config
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.filesystem import delete_folder_quietly, open_filesystem
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    BATCH_DOCUMENTS,
    DOCUMENT_READERS,
    DOCUMENTS,
    EXTRACTIONS,
    PASSAGE_SOURCES,
    PASSAGES,
    RETIRED_TABLES,
    SOURCE_FILES,
    TOMBSTONES,
    all_specs,
    with_buckets,
)
from lightfoot_pipeline.store.vectors import name_vector_cache

# What a rebuild copies of its source: the live documents, who may read them, their passages and
# their extractions. The rest is derived again from these.
COPIED_BY_REBUILD = (DOCUMENTS, DOCUMENT_READERS, PASSAGES, PASSAGE_SOURCES, EXTRACTIONS)


def rebuild(source: Store, target: Store, embedder: Embedder, settings: IndexSettings | None = None,
            manifest: Manifest | None = None, *, doc_ids: Iterable[str] | None = None) -> GraphChange:
    """A fresh index in ``target`` from the live documents, readers, passages and extractions of
    ``source`` (as of ``manifest``, else its latest commit).

    No model call: the stored extractions are reused. Everything else is derived again from them,
    so the result is what a fresh build of the surviving documents gives. ``doc_ids``: only these
    live documents (their rows as the source holds them, read from their buckets alone), the fresh
    index of that subset that a reader's view is audited against; an id that is not a live
    document of the source is refused (IndexConfigError), so a subset is never smaller than asked.
    """
    settings = settings or IndexSettings()
    manifest = manifest or source.manifest()
    wanted = sorted(set(doc_ids)) if doc_ids is not None else None
    if wanted is not None:
        live = set(source.rows(DOCUMENTS.name, "doc_id", wanted, manifest).get_column("doc_id").to_list())
        missing = [d for d in wanted if d not in live]
        if missing:
            shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
            raise IndexConfigError(f"rebuild: {len(missing)} of the documents asked for are not live in "
                                   f"{source.uri} at commit {manifest.seq}: {shown}",
                                   hint="name live documents only (`lightfoot explain doc ID` says what became of one)")
    with target.transaction() as tx:
        if tx.manifest.seq:
            raise IndexConfigError(f"rebuild needs an empty target store; {target.uri} has commits")
        check_config(tx, settings, embedder)
        for spec in COPIED_BY_REBUILD:
            rows = (source.read(spec.name, manifest) if wanted is None
                    else source.rows(spec.name, "doc_id", wanted, manifest))
            tx.put(spec.name, with_buckets(rows, spec, target.n_buckets).cast(tx.table(spec.name).schema))
        derive_forms(tx, tx.table(DOCUMENTS.name).get_column("doc_id").to_list())
        change = reconcile_graph(tx, settings, name_vector_cache(target, embedder))
        details: dict[str, object] = {"source": source.uri, "source_seq": manifest.seq}
        if wanted is not None:
            details["documents"] = len(wanted)
        tx.commit("rebuild", details)
    return change


# What a migration keeps of a store: its documents, who may read them, their passages (with where
# each stands in its file) and their extractions, the deletion log, which batches added, replaced,
# kept or deleted each document, and what syncs recorded of their sources' files (so that a file
# whose document was deleted stays excluded, and unchanged files are not read again).
KEPT_BY_MIGRATION = (DOCUMENTS, DOCUMENT_READERS, PASSAGES, PASSAGE_SOURCES, EXTRACTIONS, TOMBSTONES,
                     BATCH_DOCUMENTS, SOURCE_FILES)


def migrate(store: Store, embedder: Embedder, settings: IndexSettings | None = None,
            n_buckets: int | None = None, linker: Linker | None = None) -> GraphChange:
    """Bring a store to this version's layout and index, in place and in one commit; no model call.

    The documents, readers, passages and their places in their files, extractions, deletion log,
    batch log and synced files' records (exclusions included) are kept, re-bucketed (into
    ``n_buckets``, else the store's own count); everything else is derived again from them with
    ``settings``, as :func:`rebuild` does, so the store then equals a fresh build of its live
    documents. Name vectors come from the store's cache, and the embedder computes only the ones
    it lacks. Works on any earlier layout (``lightfoot migrate``). ``linker``: the names' links
    computed elsewhere (link_pieces.PrecomputedLinks, see relink.py) instead of in this process.
    """
    settings = settings or IndexSettings()
    with store.transaction(relayout=n_buckets or 0) as tx:  # 0: the store's own bucket count
        if not tx.manifest.seq:
            raise IndexConfigError(f"no store at {store.uri} to migrate")
        tx.config = {}
        check_config(tx, settings, embedder)
        kept = {spec.name for spec in KEPT_BY_MIGRATION}
        for spec in all_specs():
            if spec.name not in tx.manifest.versions:
                continue
            rows = tx.table(spec.name) if spec.name in kept else spec.empty()
            tx.put(spec.name, with_buckets(rows, spec, tx.n_buckets).cast(spec.empty().schema))
        derive_forms(tx, tx.table(DOCUMENTS.name).get_column("doc_id").to_list())
        change = reconcile_graph(tx, settings, name_vector_cache(store, embedder), linker=linker)
        tx.commit("migrate", {"from_layout": tx.manifest.details.get("layout"), "n_buckets": tx.n_buckets})
    _drop_retired_tables(store)
    return change


def _drop_retired_tables(store: Store) -> list[str]:
    """Delete the tables that earlier layouts kept and this one does not (after a migration)."""
    dropped = []
    for name in RETIRED_TABLES:
        if delete_folder_quietly(*open_filesystem(store.table_uri(name), store.connection_options())):
            dropped.append(name)
    return dropped
