"""Provenance as a principal sees it: the store of the documents it may read, and nothing else.

The provenance functions (provenance/: ``explain_entity``, ``explain_fact``,
``explain_document``, and the batches of a source) read a store through a small interface:
``read``, ``rows``, ``manifest`` and ``uri``. :class:`ViewStore` gives that interface over a
reader view: the index tables (forms, fact_sources, name_links, aliases, entities, mentions,
synonym_edges, facts) are the view's, derived as a store of the readable documents would hold
them (permissions/views.py); the per-document tables (documents, document_readers, passages,
passage_sources, extractions, document_keys, batch_documents, source_files) are the real
store's rows of the readable documents only; the deletion log is empty, since a store of those
documents never held the others (and a deleted document is one nobody but the operator reads). So
an unreadable or deleted document, entity or fact is answered exactly as one the store never held:
the same error, and hints ("names that contain it") computed from the view alone. A principal
who reads every live document gets a ViewStore too, of the store's own tables but the deletion
log. Any other table is refused (AssertionError): a provenance function that starts reading
one must say here what its view is.

:func:`provenance_store` chooses, for a principal at one store commit, between the store itself
(the operator) and a ViewStore.
Provenance reads the store's latest commit, which may be newer than the snapshot being served, so
the view is that of the commit: when the commit is the snapshot's, the snapshot's view is reused;
otherwise the access tables are read from the store (snapshot/collect.py ``read_access``) and the
view derived from them, so that a document restricted or added since the snapshot is answered as
its readers say now. :class:`ProvenanceStores` keeps the few most recent of them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

import polars as pl

from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.permissions.views import ReaderView, readable_in, tables_of, view_key
from lightfoot_pipeline.snapshot.collect import read_access
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    ALIASES,
    BATCH_DOCUMENTS,
    DOCUMENT_KEYS,
    DOCUMENT_READERS,
    DOCUMENTS,
    ENTITIES,
    EXTRACTIONS,
    FACT_SOURCES,
    FACTS,
    FORMS,
    MENTIONS,
    NAME_LINKS,
    PASSAGE_SOURCES,
    PASSAGES,
    SOURCE_FILES,
    SYNONYM_EDGES,
    TOMBSTONES,
    spec_for,
)

GRAPH_TABLES = frozenset(spec.name for spec in (FORMS, FACT_SOURCES, NAME_LINKS, ALIASES, ENTITIES, MENTIONS,
                                                SYNONYM_EDGES, FACTS))
PER_DOCUMENT_TABLES = frozenset(spec.name for spec in (DOCUMENTS, DOCUMENT_READERS, PASSAGES, PASSAGE_SOURCES,
                                                       EXTRACTIONS, DOCUMENT_KEYS, BATCH_DOCUMENTS, SOURCE_FILES))
NEVER_HELD = frozenset({TOMBSTONES.name})  # a store of the readable documents deleted none of the others
STORES_KEPT = 16  # (commit, reader groups) whose provenance stores are kept


class ViewStore:
    """The read side of a store of ``documents`` alone, over the real ``store`` and the view's
    index ``tables`` (see the module docstring); both None: every live document, the store's own
    index tables. ``key`` names the view in caches (views.py view_key)."""

    def __init__(self, store: Store, tables: dict[str, pl.DataFrame] | None = None,
                 documents: frozenset[str] | None = None) -> None:
        assert (tables is None) == (documents is None), "a part of the store has its own tables"
        missing = GRAPH_TABLES - set(tables or GRAPH_TABLES)
        assert not missing, f"a view's tables lack {sorted(missing)}"
        self.store = store
        self.tables = tables
        self.documents = documents
        self.key = view_key(documents)
        self._wanted = None if documents is None else pl.Series("doc_id", sorted(documents), dtype=pl.String).implode()

    @property
    def uri(self) -> str:
        return self.store.uri  # messages name the store as a store of these documents would

    def manifest(self) -> Manifest:
        return self.store.manifest()

    def read(self, name: str, manifest: Manifest | None = None, columns: list[str] | None = None,
             *, remember: bool = True) -> pl.DataFrame:
        """The table as a store of the readable documents holds it (its columns, no bucket)."""
        if name in GRAPH_TABLES and self.tables is not None:
            frame = self.tables[name]
        elif name in GRAPH_TABLES or name in PER_DOCUMENT_TABLES:
            frame = self._readable(self.store.read(name, manifest, remember=remember))
        else:
            frame = self._never_held(name)
        return self._columns(name, frame, columns)

    def rows(self, name: str, column: str, values: Iterable[str], manifest: Manifest | None = None) -> pl.DataFrame:
        """The rows whose ``column`` is one of ``values``, as :meth:`read` holds them."""
        wanted = pl.Series(column, sorted(set(values)), dtype=pl.String).implode()
        if name in GRAPH_TABLES and self.tables is not None:
            frame = self.tables[name].filter(pl.col(column).is_in(wanted))
        elif name in GRAPH_TABLES or name in PER_DOCUMENT_TABLES:
            frame = self._readable(self.store.rows(name, column, values, manifest))
        else:
            frame = self._never_held(name)
        return self._columns(name, frame, None)

    def _readable(self, frame: pl.DataFrame) -> pl.DataFrame:
        if self._wanted is None or "doc_id" not in frame.columns:  # every live document; the view's own tables
            return frame
        return frame.filter(pl.col("doc_id").is_in(self._wanted))

    @staticmethod
    def _never_held(name: str) -> pl.DataFrame:
        assert name in NEVER_HELD, f"a view's provenance does not read the table {name!r}"
        return spec_for(name).empty()

    @staticmethod
    def _columns(name: str, frame: pl.DataFrame, columns: list[str] | None) -> pl.DataFrame:
        return frame.select(columns or [c for c in spec_for(name).columns if c in frame.columns])


def provenance_store(store: Store, principal: Principal, manifest: Manifest,
                     view: ReaderView | None = None) -> Store | ViewStore:
    """What ``principal``'s provenance reads at ``manifest``: the store itself for the operator,
    else a :class:`ViewStore` of the documents it reads then (of every live one, when it reads
    them all). ``view``: its view of the snapshot being served, reused when that snapshot is of
    this commit."""
    if principal.is_operator:
        return store
    if view is not None and view.snapshot.info.store_seq == manifest.seq:
        return ViewStore(store, view.tables, view.documents)
    access = read_access(store, manifest)
    documents = readable_in(access, principal)
    if access is None or documents is None:
        return ViewStore(store)
    return ViewStore(store, tables_of(access, documents), documents)


def source_key(source: Store | ViewStore) -> str:
    """The name of what provenance reads, for caches of its answers: ``store`` for the store itself
    (whose deletion log a view of every live document does not show)."""
    return source.key if isinstance(source, ViewStore) else "store"


class ProvenanceStores:
    """:func:`provenance_store` of the most recent (commit, reader groups), at most ``size``;
    two principals of the same groups share one. Thread-safe; a store derived twice at once by two
    threads is the same store."""

    def __init__(self, store: Store, size: int = STORES_KEPT) -> None:
        self.store = store
        self.size = size
        self._kept: OrderedDict[tuple, Store | ViewStore] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, principal: Principal, manifest: Manifest, view: ReaderView | None = None) -> Store | ViewStore:
        if principal.is_operator:
            return self.store
        key = (manifest.seq, manifest.log_version, principal.groups)
        with self._lock:
            held = self._kept.get(key)
            if held is not None:
                self._kept.move_to_end(key)
                return held
        held = provenance_store(self.store, principal, manifest, view)
        with self._lock:
            self._kept[key] = held
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        return held
