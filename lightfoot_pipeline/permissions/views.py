"""A reader's view: the index of the documents a principal may read, derived from one snapshot.

For a principal P whose readable documents are D_P, the view is what a store built from D_P alone
would serve, exactly: every index record is a function of the live forms, fact assertions and
their passages (DESIGN.md), so the view takes the snapshot's access tables (snapshot/format.py:
Access), keeps the rows of D_P's passages, and derives from them what the graph stage would:

- names and their provenance (``name_statistics``), and the stored name links between two of
  them: a link is a function of its two names, so the links among D_P's names are those a store
  of D_P computes;
- entities as the connected components of those links at the entity threshold: an entity joined
  only through a name of an unreadable document splits, and its id, canonical and display names
  follow its members as in a store of D_P;
- mentions, per-entity passage counts (the seed weights), synonym edges at the synonym threshold
  with the number rule, facts from D_P's assertions only (a fact whose every source is unreadable
  is absent, and ``n_sources`` counts readable ones);
- the graph, by the same assembly as an export (snapshot/collect.py), and the passage and fact
  vectors of the snapshot's rows (a vector is a function of its text), with the fact index built
  as an export of D_P would build it;
- its own id and fingerprint (:func:`view_fingerprint`): the export's time, and a digest of the
  view's content, never the snapshot's.

A view holds no copy of its vectors: they are its rows of the snapshot's memory-mapped matrices
(snapshot/shared_rows.py ``SharedRows``), which every view and every process on the node share;
the seeding scorers read the snapshot's matrix and give, row for row, what a snapshot of D_P's
vectors alone gives (retrieval/seeding.py). Its tables, node tables and graph arrays, once
derived, are moved into files without a name under the scratch directory
(:func:`tables_in_files`, :func:`snapshot_in_files`: snapshot/spill.py ``UnnamedFiles``) and read
through their mappings, as a snapshot's own are: a reader set in use costs disk in proportion to
the documents it reads, pages that the kernel can reclaim, and 8 bytes a vector row of the
process's own memory. The files go with the view (a file without a name is freed with its last
mapping), so a view of an erased document leaves nothing behind once the service lets it go,
nor does a process that is killed (one killed while writing them leaves a scratch folder that
the next sweep removes).

Nothing of the view depends on history or on which principal asked first; :class:`ViewCache`
keeps the views of the most recently used reader sets per snapshot. A snapshot without access
tables (an export of an earlier version) holds public documents only, and every principal's view
of it is the snapshot itself.

**Narrowing before the next export.** A commit after the snapshot's may delete some of its
documents or narrow their readers. :func:`narrowing_of` compares the snapshot's readers with the
store's current ones (snapshot/collect.py ``live_readers``) and gives a :class:`Narrowing`: the
documents deleted since, which nobody reads (the operator neither), and those whose readers
narrowed, which a principal reads when both the snapshot's readers and the current ones let it.
A widening is not a narrowing: it waits for the next export. Under a narrowing every principal's
view, the operator's among them, is derived as above from the documents it still reads, so it is
exactly the index of those documents, from the snapshot's access tables (for a snapshot exported
without them, every document public, those the store holds for its documents: snapshot/collect.py
``access_since``). A view under a narrowing is derived from a base that held its documents (the
view before the commit, or the whole snapshot: :class:`ViewCache`): its tables by
:func:`narrowed_tables`, its graph by narrowing the base's (narrowed_graph.py), its fact index
the base's when the training sample is unchanged, so that the work follows what the narrowing
took, not the view.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl
import scipy.sparse as sp

from lightfoot_pipeline.index.components import components, entity_rows, mention_rows
from lightfoot_pipeline.index.facts import fact_rows
from lightfoot_pipeline.index.reconcile import name_statistics
from lightfoot_pipeline.index.synonyms import synonym_edges
from lightfoot_pipeline.ingest.readers import PUBLIC, readers_of_text
from lightfoot_pipeline.permissions.narrowed_graph import NarrowedGraph, narrow_graph
from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.snapshot.collect import GraphTables, assemble_graph, build_fact_index
from lightfoot_pipeline.snapshot.fact_index import INDEX_MIN_ROWS
from lightfoot_pipeline.snapshot.format import Access, Snapshot, SnapshotInfo
from lightfoot_pipeline.snapshot.shared_rows import SharedRows
from lightfoot_pipeline.snapshot.spill import UnnamedFiles
from lightfoot_pipeline.store.tables import ALIASES, ENTITIES, FACTS

VIEWS_KEPT = 16  # reader sets whose views a cache holds per snapshot
# The counts a view has (view_snapshot): a snapshot's manifest has these and the export's own.
VIEW_COUNTS = ("entities", "passages", "documents", "facts", "fact_evidence", "nodes", "stored_entries", "edges")


@dataclass(frozen=True)
class Narrowing:
    """What the store's commit ``seq`` takes from a snapshot's readers (see the module docstring):
    ``deleted``, the snapshot's documents no longer live; ``readers``, (doc_id, current readers
    text) of those whose current readers are narrower than the snapshot's, by doc id."""

    seq: int
    deleted: frozenset[str] = frozenset()
    readers: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.deleted or self.readers)

    def same_as(self, other: Narrowing | None) -> bool:
        """Whether ``other`` takes the same documents from the same principals (whatever its commit)."""
        if other is None:
            return not self
        return self.deleted == other.deleted and self.readers == other.readers

    def lost_by(self, principal: Principal) -> frozenset[str]:
        """The snapshot's documents ``principal`` no longer reads."""
        return self.deleted | {doc_id for doc_id, text in self.readers if not principal.may_read(readers_of_text(text))}

    def as_dict(self) -> dict:
        return {"store_seq": self.seq, "deleted": len(self.deleted), "readers_narrowed": len(self.readers)}

    def changed_since(self, other: Narrowing | None) -> frozenset[str]:
        """The documents this narrowing treats otherwise than ``other`` (None: the snapshot as exported)."""
        deleted, readers = (other.deleted, frozenset(other.readers)) if other else (frozenset(), frozenset())
        return self.deleted ^ deleted | {doc_id for doc_id, _ in frozenset(self.readers) ^ readers}


def narrows(before: tuple[str, ...], after: tuple[str, ...]) -> bool:
    """Whether some principal reads a document of readers ``before`` and not one of ``after``."""
    if PUBLIC in after:
        return False
    return PUBLIC in before or not set(before) <= set(after)


def narrowing_of(readers: pl.DataFrame, current: pl.DataFrame, seq: int) -> Narrowing:
    """What the store's readers at commit ``seq`` (``current``: doc_id, readers of every live
    document, snapshot/collect.py live_readers) take from a snapshot's (``readers``: doc_id,
    readers of each of its documents, its access tables' or every one public)."""
    joined = readers.select("doc_id", "readers").join(
        current.select("doc_id", pl.col("readers").alias("now")), on="doc_id", how="left")
    deleted = frozenset(joined.filter(pl.col("now").is_null()).get_column("doc_id").to_list())
    changed = joined.filter(pl.col("now").is_not_null() & (pl.col("now") != pl.col("readers"))).sort("doc_id")
    narrowed = tuple((doc_id, now) for doc_id, before, now in changed.select("doc_id", "readers", "now").iter_rows()
                     if narrows(readers_of_text(before), readers_of_text(now)))
    return Narrowing(seq, deleted, narrowed)


@dataclass(eq=False)
class ReaderView:
    """The index as one reader set sees it.

    ``documents`` is None when the reader reads every document of the snapshot: the view is then
    the snapshot itself and ``tables`` is None (provenance reads the store). Otherwise ``tables``
    holds the view's index tables by store table name (forms, fact_sources, name_links, aliases,
    entities, mentions, synonym_edges, facts), as a store of those documents would hold them.
    """

    key: str
    snapshot: Snapshot
    documents: frozenset[str] | None = None
    tables: dict[str, pl.DataFrame] | None = None
    build_s: float = 0.0
    counts: dict = field(default_factory=dict)
    file_bytes: int = 0  # the disk its tables and graph hold (files without a name: tables_in_files)

    @property
    def whole(self) -> bool:
        return self.documents is None

    def may_read(self, doc_id: str) -> bool:
        return self.documents is None or doc_id in self.documents


def readable_documents(snapshot: Snapshot, principal: Principal,
                       narrowing: Narrowing | None = None) -> frozenset[str] | None:
    """The documents of the snapshot that ``principal`` reads (under ``narrowing``, those it still
    reads); None when that is all of them."""
    documents = readable_in(snapshot.access, principal)
    if not narrowing:
        return documents
    assert snapshot.access is not None, "a narrowing is of a snapshot's access tables"
    held = documents if documents is not None else frozenset(snapshot.access.readers.get_column("doc_id").to_list())
    lost = narrowing.lost_by(principal)
    return documents if held.isdisjoint(lost) else held - lost


def readable_in(access: Access | None, principal: Principal) -> frozenset[str] | None:
    """The documents of these access tables (a snapshot's, or a store's at one commit:
    snapshot/collect.py read_access) that ``principal`` reads; None when that is all of them."""
    if access is None or principal.is_operator:
        return None
    texts = access.readers.get_column("readers")
    allowed = [text for text in texts.unique().to_list() if principal.may_read(readers_of_text(text))]
    readable = access.readers.filter(texts.is_in(pl.Series(allowed, dtype=pl.String).implode()))
    if readable.height == access.readers.height:
        return None
    return frozenset(readable.get_column("doc_id").to_list())


def view_key(documents: frozenset[str] | None) -> str:
    """A view's name in caches and logs: a digest of its document set (``all`` for every document)."""
    if documents is None:
        return "all"
    return "v-" + hashlib.sha256("\n".join(sorted(documents)).encode()).hexdigest()[:16]


def derive_tables(snapshot: Snapshot, documents: frozenset[str]) -> dict[str, pl.DataFrame]:
    """The index tables of a store of ``documents`` (see the module docstring)."""
    assert snapshot.access is not None, "a view of part of a snapshot needs its access tables"
    return tables_of(snapshot.access, documents)


def tables_of(access: Access, documents: frozenset[str]) -> dict[str, pl.DataFrame]:
    """The index tables of a store of ``documents``, derived from access tables (a snapshot's, or
    a store's at one commit, which is how provenance answers a view: permissions/provenance.py)."""
    settings = access.settings
    wanted = pl.Series("doc_id", sorted(documents), dtype=pl.String).implode()
    forms = access.forms.filter(pl.col("doc_id").is_in(wanted))
    names = name_statistics(forms)
    keys = names.select("type", "name")
    links = (access.name_links
             .join(keys.rename({"name": "name_a"}), on=["type", "name_a"], how="semi")
             .join(keys.rename({"name": "name_b"}), on=["type", "name_b"], how="semi"))
    labels = components(names.select("name", "type"), links, float(settings["entity_threshold"]))
    aliases = names.join(labels, on=["name", "type"]).select(ALIASES.columns)
    entities = entity_rows(aliases, forms).select(ENTITIES.columns)
    mentions = mention_rows(aliases, forms)
    edges = synonym_edges(links, aliases, float(settings["synonym_threshold"]), bool(settings["numbers_must_agree"]))
    fact_sources = access.fact_sources.filter(pl.col("doc_id").is_in(wanted))
    facts = fact_rows(fact_sources).select(FACTS.columns)
    return {"forms": forms, "fact_sources": fact_sources, "name_links": links, "aliases": aliases,
            "entities": entities, "mentions": mentions, "synonym_edges": edges, "facts": facts}


def _in(column: str, values: pl.DataFrame | pl.Series) -> pl.Expr:
    series = values if isinstance(values, pl.Series) else values.get_column(column)
    return pl.col(column).is_in(series.implode())


def narrowed_tables(base: dict[str, pl.DataFrame], lost: frozenset[str], settings: dict) -> dict[str, pl.DataFrame]:
    """The index tables of a store of the documents of ``base`` (tables as :func:`tables_of` gives
    them) less ``lost``, equal to ``tables_of`` of the remaining documents, in time that follows
    what ``lost`` touches rather than the view.

    Taking documents away only removes names and splits entities: an entity none of whose names
    has a form in ``lost`` keeps its members, their statistics, its mentions and its synonym
    edges, since each is a function of its members' live forms and links (DESIGN.md). Only the
    entities holding a name of ``lost`` are derived again, as components of their surviving
    names, with their rows, mentions and synonym edges; the facts asserted in ``lost`` are
    recounted from their remaining sources."""
    return narrowed_tables_and_entities(base, lost, settings)[0]


def narrowed_tables_and_entities(base: dict[str, pl.DataFrame], lost: frozenset[str],
                                 settings: dict) -> tuple[dict[str, pl.DataFrame], pl.Series]:
    """:func:`narrowed_tables`, and the ids of the entities it derived again (those of the
    entities that held a name of ``lost``, split as the remaining names link): what
    narrowed_graph.py takes from the view's tables rather than from its base's graph."""
    if not lost:
        return dict(base), pl.Series("entity_id", [], dtype=pl.String)
    gone = pl.Series("doc_id", sorted(lost), dtype=pl.String)
    forms = base["forms"].filter(~_in("doc_id", gone))
    touched = base["forms"].filter(_in("doc_id", gone)).select("type", "name").unique()
    aliases = base["aliases"]
    affected = aliases.join(touched, on=["type", "name"], how="semi").get_column("entity_id").unique()
    members = aliases.filter(_in("entity_id", affected)).select("type", "name")
    member_forms = forms.join(members, on=["type", "name"], how="semi")
    alive = name_statistics(member_forms)  # the affected entities' names that some document still uses
    dead = members.join(alive.select("type", "name"), on=["type", "name"], how="anti")
    links = base["name_links"]
    if dead.height:
        links = (links.join(dead.rename({"name": "name_a"}), on=["type", "name_a"], how="anti")
                 .join(dead.rename({"name": "name_b"}), on=["type", "name_b"], how="anti"))
    keys = alive.select("type", "name")
    from_a = links.join(keys.rename({"name": "name_a"}), on=["type", "name_a"], how="semi")
    from_b = links.join(keys.rename({"name": "name_b"}), on=["type", "name_b"], how="semi")
    within = from_a.join(keys.rename({"name": "name_b"}), on=["type", "name_b"], how="semi")
    labels = components(alive.select("name", "type"), within, float(settings["entity_threshold"]))
    split = alive.join(labels, on=["name", "type"]).select(ALIASES.columns)
    kept = ~_in("entity_id", affected)
    new_aliases = pl.concat([aliases.filter(kept), split], how="vertical_relaxed")
    # An edge of a split entity has a member link with an end among its names.
    touching = pl.concat([from_a, from_b]).unique()
    edges = base["synonym_edges"]
    edges = pl.concat([
        edges.filter(~_in("entity_a", affected) & ~_in("entity_b", affected)),
        synonym_edges(touching, new_aliases, float(settings["synonym_threshold"]), bool(settings["numbers_must_agree"])),
    ], how="vertical_relaxed")
    fact_sources = base["fact_sources"].filter(~_in("doc_id", gone))
    recounted = base["fact_sources"].filter(_in("doc_id", gone)).get_column("fact_id").unique()
    facts = pl.concat([
        base["facts"].filter(~_in("fact_id", recounted)),
        fact_rows(fact_sources.filter(_in("fact_id", recounted))).select(FACTS.columns),
    ], how="vertical_relaxed")
    tables = {
        "forms": forms, "fact_sources": fact_sources, "name_links": links, "aliases": new_aliases,
        "entities": pl.concat([base["entities"].filter(kept), entity_rows(split, member_forms).select(ENTITIES.columns)],
                              how="vertical_relaxed"),
        "mentions": pl.concat([base["mentions"].filter(kept), mention_rows(split, member_forms)],
                              how="vertical_relaxed"),
        "synonym_edges": edges, "facts": facts,
    }
    return tables, split.get_column("entity_id").unique()


def _rows_of(keys: pl.DataFrame, held: pl.DataFrame, on: list[str]) -> np.ndarray:
    """(len(keys),) row of each key's row in ``held`` (every key is there)."""
    matched = (keys.select(on).with_row_index("new")
               .join(held.select(on).with_row_index("old"), on=on, how="left", nulls_equal=True).sort("new"))
    rows = matched.get_column("old")
    assert rows.null_count() == 0, "a view's rows are rows of its snapshot"
    return rows.to_numpy().astype(np.int64)


def view_snapshot(snapshot: Snapshot, documents: frozenset[str], tables: dict[str, pl.DataFrame],
                  indexed: Snapshot | None = None, narrowed: NarrowedGraph | None = None) -> Snapshot:
    """The snapshot a store of ``documents`` would export: its graph assembled from ``tables`` (or
    ``narrowed``, the same graph narrowed from the base ``indexed``: narrowed_graph.py), its
    vectors the snapshot's rows of the same passages and facts, shared, not copied
    (snapshot/shared_rows.py). ``indexed``: a snapshot (or view) whose fact index to keep when its
    training sample is the view's (the snapshot's by default)."""
    assert narrowed is None or indexed is not None, "a graph is narrowed from a base"
    if narrowed is None:
        wanted = pl.Series("doc_id", sorted(documents), dtype=pl.String).implode()
        passages = snapshot.passages.filter(pl.col("doc_id").is_in(wanted)).drop("node")
        graph = assemble_graph(GraphTables(
            entities=tables["entities"], passages=passages, mentions=tables["mentions"], aliases=tables["aliases"],
            facts=tables["facts"], evidence=tables["fact_sources"], synonyms=tables["synonym_edges"],
        ))
        passage_vectors = SharedRows.of(snapshot.passage_vectors,
                                        _rows_of(graph.passages, snapshot.passages, ["chunk_id"]))
        fact_vectors = SharedRows.of(snapshot.fact_vectors, _rows_of(graph.facts, snapshot.facts, ["fact_id"]))
    else:
        graph, passage_vectors, fact_vectors = narrowed.graph, narrowed.passage_vectors, narrowed.fact_vectors
    view_facts, fact_index = graph.facts, None
    access = snapshot.access
    min_rows = int(access.settings.get("index_min_rows", INDEX_MIN_ROWS)) if access is not None else INDEX_MIN_ROWS
    if view_facts.height >= min_rows:
        # The snapshot's centroids when the view's training sample is the snapshot's (a view of
        # most documents, as after a deletion): the same sample gives the same centroids, and a
        # fact's group is a function of its vector and them (snapshot/collect.py build_fact_index).
        previous = indexed if indexed is not None else snapshot
        fact_index, order = build_fact_index(view_facts.get_column("fact_id"), fact_vectors, previous,
                                             lambda done, total: None,
                                             narrowed.fact_rows if narrowed is not None else None)
    else:  # by fact id, as the assembly orders them (a narrowed graph keeps its base's order)
        order = view_facts.get_column("fact_id").arg_sort().to_numpy() if narrowed is not None else None
    if order is not None:
        view_facts, fact_vectors = view_facts[order], SharedRows.of(fact_vectors, order)
    counts = {
        "entities": graph.entities.height, "passages": graph.passages.height,
        "documents": graph.passages.get_column("doc_id").n_unique(), "facts": view_facts.height,
        "fact_evidence": graph.evidence.height, "nodes": int(graph.adjacency.shape[0]),
        "stored_entries": int(graph.adjacency.nnz), "edges": graph.edge_counts,
    }
    digest = view_fingerprint(graph.passages, graph.entities, view_facts, graph.evidence)
    exported = snapshot.info.snapshot_id.split("-", 1)[0]
    info = SnapshotInfo(snapshot_id=f"{exported}-{digest[:12]}", uri=snapshot.info.uri, fingerprint=digest,
                        store_seq=snapshot.info.store_seq, created_at=snapshot.info.created_at, counts=counts,
                        models=snapshot.info.models)
    view = Snapshot(info=info, entities=graph.entities, passages=graph.passages, facts=view_facts,
                    evidence=graph.evidence, adjacency=graph.adjacency, passage_vectors=passage_vectors,
                    fact_vectors=fact_vectors, fact_index=fact_index, fact_codes=snapshot.fact_codes, access=None)
    if narrowed is not None:  # its base's evidence ranges, by row
        starts, counts = narrowed.evidence_ranges
        view.prime((starts, counts) if order is None else (starts[order], counts[order]))
    return view


# The node tables of a view's snapshot, which snapshot_in_files moves into files.
NODE_TABLES = ("entities", "passages", "facts", "evidence")


def tables_in_files(tables: dict[str, pl.DataFrame], files: UnnamedFiles) -> dict[str, pl.DataFrame]:
    """A view's tables moved into ``files`` (see the module docstring): equal frames, read through
    mappings. The caller lets go of the ones it passed."""
    return {name: files.table(frame) for name, frame in tables.items()}


def snapshot_in_files(view: Snapshot, files: UnnamedFiles) -> Snapshot:
    """A view's snapshot with its node tables and graph arrays moved into ``files``: the same
    snapshot, read through mappings (its vectors are the base's rows already)."""
    graph = view.adjacency
    indptr, indices, weights = (files.array(values) for values in (graph.indptr, graph.indices, graph.data))
    moved = replace(view, adjacency=sp.csr_matrix((weights, indices, indptr), shape=graph.shape, copy=False),
                    **{name: files.table(getattr(view, name)) for name in NODE_TABLES})
    if "evidence_ranges" in view.__dict__:  # primed from a base (narrowed_graph.py), or computed
        moved.prime(view.evidence_ranges)
    return moved


def view_fingerprint(*frames: pl.DataFrame) -> str:
    """A digest of a view's content alone. A view's id and fingerprint are its own, not the
    snapshot's: the snapshot's digest is a function of every document, those the reader may not
    read among them, and would let a reader confirm a guess of their content."""
    digest = hashlib.sha256()
    for frame in frames:
        digest.update(np.sort(frame.hash_rows(seed=27).to_numpy()).tobytes())
        digest.update(str(frame.height).encode())
    return digest.hexdigest()


def whole_view_names(snapshot: Snapshot) -> tuple[str, str, str]:
    """(key, id, fingerprint) of ``snapshot`` named as a view is: what a principal other than the
    operator is shown when it reads every document, so that whether a store holds documents it
    cannot read shows in nothing it is told. A view of the same documents in a store that also
    holds others is named the same (its tables equal these: tests/lightfoot_pipeline/permissions)."""
    documents = frozenset(snapshot.passages.get_column("doc_id").unique().to_list())
    digest = view_fingerprint(snapshot.passages, snapshot.entities, snapshot.facts, snapshot.evidence)
    exported = snapshot.info.snapshot_id.split("-", 1)[0]
    return view_key(documents), f"{exported}-{digest[:12]}", digest


# A view is derived from a base (another view's tables, or the whole snapshot's) that holds its
# documents and at most this share more; from the access tables otherwise.
BASE_EXTRA_SHARE = 0.25
# (documents, their tables as tables_of gives them, the snapshot or view of them: its fact index is
# kept when a narrowing leaves its training sample as it was)
Base = tuple[frozenset[str], dict[str, pl.DataFrame], Snapshot]


def reader_view(snapshot: Snapshot, principal: Principal, narrowing: Narrowing | None = None,
                base: Base | None = None) -> ReaderView:
    """``principal``'s view of ``snapshot`` (under ``narrowing``: of the documents it still reads;
    built now; :class:`ViewCache` keeps them). With a ``base`` that holds its documents, the
    tables are the base's less the documents it does not read (:func:`narrowed_tables`)."""
    started = time.perf_counter()
    documents = readable_documents(snapshot, principal, narrowing)
    if documents is None:
        return ReaderView(view_key(None), snapshot, counts=dict(snapshot.info.counts))
    indexed = None
    if base is not None and documents <= base[0]:
        assert snapshot.access is not None, "a view of part of a snapshot needs its access tables"
        lost = base[0] - documents
        tables, derived = narrowed_tables_and_entities(base[1], lost, snapshot.access.settings)
        indexed = base[2]
        narrowed = narrow_graph(base[2], lost, tables, derived)
    else:
        tables, narrowed = derive_tables(snapshot, documents), None
    view = view_snapshot(snapshot, documents, tables, indexed, narrowed)
    with UnnamedFiles("view") as files:
        tables, view = tables_in_files(tables, files), snapshot_in_files(view, files)
    return ReaderView(view_key(documents), view, documents, tables, round(time.perf_counter() - started, 4),
                      dict(view.info.counts), files.bytes)


class ViewCache:
    """The views of one snapshot, by reader set: built once each, the least recently used dropped
    beyond ``size``. Two principals who read the same documents share a view. Thread-safe: a view
    asked for by two threads at once is built once.

    Under a ``narrowing`` each principal's view is of the documents it still reads; ``inherit``, a
    cache of the same snapshot under an earlier narrowing, lends the views it holds of none of the
    documents the two narrowings treat otherwise: a view is a function of its document set, so a
    principal that lost nothing keeps its view as it was, without a build, and a view that may be
    no one's now is not kept.

    A view is derived again from a base when one holds its documents and not many more
    (:data:`BASE_EXTRA_SHARE`): the inherited views that lost documents, and the whole snapshot's
    tables (:meth:`prepare` derives them once, for a snapshot with access tables), so that a
    narrowing costs what it takes away, not a derivation of every view from the access tables."""

    def __init__(self, snapshot: Snapshot, size: int = VIEWS_KEPT, narrowing: Narrowing | None = None,
                 inherit: ViewCache | None = None) -> None:
        self.snapshot = snapshot
        self.size = size
        self.narrowing = narrowing
        self._views: OrderedDict[str, ReaderView] = OrderedDict()
        self._bases: list[Base] = []
        self.whole: Base | None = None  # every document of the snapshot and its tables (prepare)
        self.whole_file_bytes = 0  # the disk those tables hold (files without a name)
        if inherit is not None and inherit.snapshot is snapshot:
            changed = narrowing.changed_since(inherit.narrowing) if narrowing else (
                inherit.narrowing.changed_since(None) if inherit.narrowing else frozenset())
            self.whole, self.whole_file_bytes = inherit.whole, inherit.whole_file_bytes
            for key, view in inherit.held():
                if view.documents is None or view.tables is None:
                    continue
                if view.documents.isdisjoint(changed):
                    self._views[key] = view
                else:
                    self._bases.append((view.documents, view.tables, view.snapshot))
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}
        self._by_groups: dict[tuple[str, ...], tuple[str, frozenset[str] | None]] = {}

    def view(self, principal: Principal) -> ReaderView:
        known = self._by_groups.get(principal.groups)
        if known is None:  # which documents a set of groups reads, worked out once per snapshot
            documents = readable_documents(self.snapshot, principal, self.narrowing)
            known = self._by_groups[principal.groups] = (view_key(documents), documents)
        key, documents = known
        if documents is None:
            return ReaderView(key, self.snapshot, counts=dict(self.snapshot.info.counts))
        with self._lock:
            held = self._views.get(key)
            if held is not None:
                self._views.move_to_end(key)
                return held
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                held = self._views.get(key)
            if held is None:
                held = reader_view(self.snapshot, principal, self.narrowing, self._base(documents))
                with self._lock:
                    self._views[key] = held
                    while len(self._views) > self.size:
                        self._views.popitem(last=False)
            with self._lock:
                self._building.pop(key, None)
            return held

    def prepare(self) -> None:
        """Derive the whole snapshot's tables, the base of the views of a later narrowing (a
        snapshot without access tables has no view to derive)."""
        access = self.snapshot.access
        if self.whole is None and access is not None:
            documents = frozenset(access.readers.get_column("doc_id").to_list())
            with UnnamedFiles("view-base") as files:
                self.whole = (documents, tables_in_files(tables_of(access, documents), files), self.snapshot)
            self.whole_file_bytes = files.bytes

    def _base(self, documents: frozenset[str]) -> Base | None:
        """The base that holds ``documents`` with the fewest others, if few enough."""
        held = [*self._bases, *([self.whole] if self.whole is not None else [])]
        fits = [base for base in held if documents <= base[0]]
        best = min(fits, key=lambda base: len(base[0]), default=None)
        if best is None or len(best[0]) - len(documents) > BASE_EXTRA_SHARE * len(best[0]):
            return None
        return best

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._views)

    def file_bytes(self) -> int:
        """The disk that the views held and the whole snapshot's tables hold (files without a name)."""
        return sum(view.file_bytes for _, view in self.held()) + self.whole_file_bytes

    def held(self) -> list[tuple[str, ReaderView]]:
        """The views held now, least recently used first."""
        with self._lock:
            return list(self._views.items())
