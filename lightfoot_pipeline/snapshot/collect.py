"""What a snapshot holds, gathered from the store: node tables, the graph, vectors, the fact index.

Re-exporting after a small change costs what the change costs where it can: vectors of passages
and facts that the previous snapshot holds are copied from it (matched by chunk id and title, or
fact id, which fix the embedded text), the vector caches give the others, and only a text that
no cache holds is embedded. The fact index's centroids depend only on its training sample (the
smallest live fact ids); when the sample is the previous snapshot's, so are the centroids, and
only the new facts are assigned to groups.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import polars as pl
import scipy.sparse as sp

from lightfoot_pipeline.index.facts import fact_text
from lightfoot_pipeline.ingest.passages import location_label
from lightfoot_pipeline.ingest.readers import PUBLIC, readers_of_text
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.snapshot import codes, spill
from lightfoot_pipeline.snapshot.adjacency import build_adjacency
from lightfoot_pipeline.snapshot.fact_index import INDEX_MIN_ROWS, assign, n_lists, sample_rows, train_centroids
from lightfoot_pipeline.snapshot.format import (
    TABLE_SUFFIX,
    Access,
    FactIndex,
    Snapshot,
    SnapshotError,
    graph_file,
    passage_text,
)
from lightfoot_pipeline.snapshot.shared_rows import Vectors
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    ALIASES,
    DOCUMENT_READERS,
    DOCUMENTS,
    ENTITIES,
    FACT_SOURCES,
    FACTS,
    FORMS,
    MENTIONS,
    NAME_LINKS,
    PASSAGE_SOURCES,
    PASSAGES,
    SYNONYM_EDGES,
)
from lightfoot_pipeline.store.vectors import VectorCache

ExportProgress = Callable[[str, int, int], None]  # (step, done, total)


def _stepper(progress: ExportProgress | None) -> ExportProgress:
    return progress if progress is not None else (lambda step, done, total: None)


@dataclass
class Content:
    """What a snapshot holds, gathered from the store's committed state. Every large part is a file
    of the export's scratch folder, written in the snapshot's format already (spill.py): the
    tables are frames mapped from theirs (for the snapshot's counts), and writing the snapshot
    copies the files (snapshot/export.py)."""

    entities: pl.DataFrame
    passages: pl.DataFrame
    facts: pl.DataFrame
    evidence: pl.DataFrame
    files: dict[str, Path]  # the snapshot's file name -> the scratch file that holds it: tables, graph, vectors, codes
    nodes: int  # of the graph
    stored_entries: int  # of the graph's adjacency (both directions of an edge)
    edge_counts: dict
    fact_index: FactIndex | None = None
    embedded: int = 0  # texts embedded for this snapshot (no vector cached or in the previous one)
    access: Access | None = None  # what reader views are derived from; None when every document is public


def with_locations(passages: pl.DataFrame, sources: pl.DataFrame) -> pl.DataFrame:
    """The passages with their ``location`` for citations (``guide.pdf, page 2``); null for a
    passage of a corpus line, which has none but its doc id."""
    located = passages.join(sources.with_columns(pl.lit(True).alias("located")), on="chunk_id", how="left")
    labels = [location_label(doc_id, page, section) if known else None
              for doc_id, page, section, known in located.select("doc_id", "page", "section", "located").iter_rows()]
    return located.drop("page", "section", "located").with_columns(pl.Series("location", labels, dtype=pl.String))


@dataclass
class GraphTables:
    """The index tables a snapshot's graph is assembled from, held in memory: a reader view's
    (permissions/views.py), which derives them from the documents a principal may read."""

    entities: pl.DataFrame  # entity_id, type, display_name
    passages: pl.DataFrame  # chunk_id, doc_id, title, text, location
    mentions: pl.DataFrame  # entity_id, chunk_id
    aliases: pl.DataFrame  # name, type, entity_id
    facts: pl.DataFrame  # fact_id, subject, subject_type, predicate, object, object_type, n_sources
    evidence: pl.DataFrame  # fact_id, chunk_id, doc_id, evidence
    synonyms: pl.DataFrame  # entity_a, entity_b, similarity

    def take(self, name: str) -> pl.DataFrame:
        """The frame ``name``, left empty here: once the assembly has what it needs from a
        table, its rows are freed unless the caller holds them too."""
        frame = getattr(self, name)
        setattr(self, name, frame.clear())
        return frame


class TableSource(Protocol):
    """Where the assembly takes its tables from, one at a time (:class:`GraphTables`, :class:`StoreTables`)."""

    def take(self, name: str) -> pl.DataFrame: ...


@dataclass
class Graph:
    """A snapshot's node tables and adjacency, before vectors."""

    entities: pl.DataFrame
    passages: pl.DataFrame
    facts: pl.DataFrame
    evidence: pl.DataFrame
    adjacency: sp.csr_matrix
    edge_counts: dict


# The store's table and the columns of it that the assembly takes, by GraphTables' names.
_STORE_COLUMNS = {
    "entities": (ENTITIES, ["entity_id", "type", "display_name"]),
    "mentions": (MENTIONS, ["entity_id", "chunk_id"]),
    "aliases": (ALIASES, ["name", "type", "entity_id"]),
    "facts": (FACTS, ["fact_id", "subject", "subject_type", "predicate", "object", "object_type", "n_sources"]),
    "evidence": (FACT_SOURCES, ["fact_id", "chunk_id", "doc_id", "evidence"]),
    "synonyms": (SYNONYM_EDGES, ["entity_a", "entity_b", "similarity"]),
}


@dataclass
class StoreTables:
    """The store's committed index tables, as a snapshot assembles them, each read when the
    assembly takes it: only the columns it uses, none kept in the store's memory of whole tables
    (``Store.read_columns``), and never all at once, so that an export holds one table as read
    beside what it has assembled (a whole ``fact_sources`` row repeats its fact's strings; an
    ``aliases`` row holds a digest)."""

    store: Store
    manifest: Manifest

    def take(self, name: str) -> pl.DataFrame:
        if name == "passages":
            passages = self.store.read_columns(PASSAGES.name, self.manifest, ["chunk_id", "doc_id", "title", "text"])
            sources = self.store.read_columns(PASSAGE_SOURCES.name, self.manifest, ["chunk_id", "page", "section"])
            return with_locations(passages, sources)
        table, columns = _STORE_COLUMNS[name]
        return self.store.read_columns(table.name, self.manifest, columns)


Settle = Callable[[str, pl.DataFrame], pl.DataFrame]


def _kept(name: str, frame: pl.DataFrame) -> pl.DataFrame:
    return frame


def assemble_graph(tables: TableSource, settle: Settle = _kept) -> Graph:
    """Node tables (entities by id, then passages by chunk id) and the adjacency over them: a
    function of the tables' rows alone, whatever their order.

    The assembly takes the tables one at a time, and hands each node table, once it is final, to
    ``settle(name, frame)`` (``passages``, ``entities``, ``facts``, ``fact_evidence``), keeping
    what that returns: an export writes the table to a file and keeps the frame mapped from it
    (spill.py), so that it holds the table being made and not every one."""
    entities = tables.take("entities").select("entity_id", "type", "display_name").sort("entity_id")
    entities = entities.with_row_index("node").with_columns(pl.col("node").cast(pl.Int64))
    n_entities = entities.height
    entity_index = entities.select("entity_id", pl.col("node").alias("entity_node"))

    passages = tables.take("passages").select("chunk_id", "doc_id", "title", "text", "location").sort("chunk_id")
    passages = passages.with_row_index("node").with_columns(pl.col("node").cast(pl.Int64) + n_entities)
    passage_index = passages.select("chunk_id", (pl.col("node") - n_entities).alias("passage_row"))
    n_passages = passages.height
    passages = settle("passages", passages.select("node", "chunk_id", "doc_id", "title", "text", "location"))

    mention_pairs = (tables.take("mentions").select("entity_id", "chunk_id")
                     .join(entity_index, on="entity_id", how="left").join(passage_index, on="chunk_id", how="left")
                     .select("entity_node", "passage_row"))
    del passage_index
    if mention_pairs.filter(pl.col("entity_node").is_null() | pl.col("passage_row").is_null()).height:
        raise SnapshotError("mentions name entities or passages that the store does not hold; run the graph stage")
    per_entity = mention_pairs.group_by("entity_node").agg(pl.col("passage_row").n_unique().alias("n_passages"))
    entities = entities.join(per_entity, left_on="node", right_on="entity_node", how="left").with_columns(
        pl.col("n_passages").fill_null(0).cast(pl.Int64)).sort("node")
    del per_entity
    entities = settle("entities", entities.select("node", "entity_id", "type", "display_name", "n_passages"))

    ends = tables.take("aliases").join(entity_index, on="entity_id", how="left").select("name", "type", "entity_node")
    facts = (
        tables.take("facts")
        .select("fact_id", "subject", "subject_type", "predicate", "object", "object_type", "n_sources")
        .join(ends.rename({"name": "subject", "type": "subject_type", "entity_node": "subject_entity"}),
              on=["subject", "subject_type"], how="left")
        .join(ends.rename({"name": "object", "type": "object_type", "entity_node": "object_entity"}),
              on=["object", "object_type"], how="left")
        .sort("fact_id")
    )
    del ends
    if facts.filter(pl.col("subject_entity").is_null() | pl.col("object_entity").is_null()).height:
        raise SnapshotError("facts name subjects or objects that no alias holds; run the graph stage")
    facts = settle("facts", facts.select("fact_id", "subject", "predicate", "object", "subject_entity",
                                         "object_entity", "n_sources"))
    evidence = settle("fact_evidence", tables.take("evidence").select("fact_id", "chunk_id", "doc_id", "evidence")
                      .sort(["fact_id", "chunk_id"]))

    # Entity–entity edges: one per unordered pair, weighted by how many facts link the pair.
    linked = facts.filter(pl.col("subject_entity") != pl.col("object_entity")).select(
        "fact_id",
        pl.min_horizontal("subject_entity", "object_entity").alias("a"),
        pl.max_horizontal("subject_entity", "object_entity").alias("b"),
    )
    fact_edges = linked.group_by("a", "b").agg(pl.col("fact_id").n_unique().alias("w")).sort("a", "b")
    synonyms = (
        tables.take("synonyms").select("entity_a", "entity_b", "similarity")
        .join(entity_index.rename({"entity_id": "entity_a", "entity_node": "a"}), on="entity_a", how="left")
        .join(entity_index.rename({"entity_id": "entity_b", "entity_node": "b"}), on="entity_b", how="left")
        .sort("a", "b")
    )
    del entity_index
    if synonyms.filter(pl.col("a").is_null() | pl.col("b").is_null()).height:
        raise SnapshotError("synonym edges name entities that the store does not hold; run the graph stage")
    edge_counts = {"mention": mention_pairs.height, "fact": fact_edges.height, "synonym": synonyms.height}
    mention_pairs = mention_pairs.sort("entity_node", "passage_row")
    adjacency = build_adjacency(
        n_entities,
        n_passages,
        (mention_pairs.get_column("entity_node").to_numpy(), mention_pairs.get_column("passage_row").to_numpy()),
        (fact_edges.get_column("a").to_numpy(), fact_edges.get_column("b").to_numpy(),
         fact_edges.get_column("w").to_numpy()),
        (synonyms.get_column("a").to_numpy(), synonyms.get_column("b").to_numpy(),
         synonyms.get_column("similarity").to_numpy()),
    )
    return Graph(entities=entities, passages=passages, facts=facts, evidence=evidence, adjacency=adjacency,
                 edge_counts=edge_counts)


def collect(store: Store, manifest: Manifest, embedder: Embedder, scratch: Path, previous: Snapshot | None = None,
            progress: ExportProgress | None = None, index_min_rows: int = INDEX_MIN_ROWS) -> Content:
    """Node tables, graph and vectors of the store's committed state, as files of the snapshot's
    format under ``scratch`` (snapshot/spill.py), which the caller removes once it has copied them.
    The tables go to their files as soon as they are assembled, and are mapped from them after.

    Vectors of passages and facts that ``previous`` (a snapshot of the same embedder) holds are
    taken from it; the others come from the vector caches, embedded only when no cache holds them.
    A fact table of ``index_min_rows`` or more is ordered by inverted-file group (fact_index.py).
    When some live document is not public, the snapshot also holds what reader views are derived
    from (:func:`read_access`; without them, :func:`access_since` reads them when a service needs them).
    """
    step = _stepper(progress)
    files: dict[str, Path] = {}  # a snapshot file's name -> the scratch file that holds it

    def spilled(name: str, frame: pl.DataFrame, scratch_name: str | None = None) -> pl.DataFrame:
        files[name + TABLE_SUFFIX] = scratch / ((scratch_name or name) + TABLE_SUFFIX)
        return spill.table(frame, files[name + TABLE_SUFFIX])

    # Each node table leaves memory as soon as it is assembled: while the export assembles the
    # rest, embeds and indexes, the tables are pages of their files (spill.py).
    step("assembling the graph", 0, 1)
    graph = assemble_graph(StoreTables(store, manifest), settle=spilled)
    step("assembling the graph", 1, 1)
    entities, evidence, passages, facts = graph.entities, graph.evidence, graph.passages, graph.facts
    adjacency, edge_counts = graph.adjacency, graph.edge_counts
    for name, values in (("indptr", adjacency.indptr), ("indices", adjacency.indices), ("weights", adjacency.data)):
        files[graph_file(name)] = scratch / graph_file(name)
        spill.array(values, files[graph_file(name)])
    nodes, stored_entries = int(adjacency.shape[0]), int(adjacency.nnz)
    del graph, adjacency
    indexed = facts.height >= index_min_rows
    step("reading who may read", 0, 1)
    access = read_access(store, manifest)
    if access is not None:
        access.settings["index_min_rows"] = int(index_min_rows)  # a view builds its fact index as this export did
        access = Access(**{name: spilled(name, frame) for name, frame in access.frames().items()},
                        settings=access.settings)
    step("reading who may read", 1, 1)
    reuse = previous if previous is not None and previous.info.models.get("embedder") == embedder.model_id else None
    counter = [0]
    files["passage_vectors.npy"] = scratch / "passage_vectors.npy"
    _vectors(
        store, "passage", embedder, passages.select("chunk_id", "title", "text"), ["chunk_id", "title"],
        lambda frame: [passage_text(t, x) for t, x in frame.select("title", "text").iter_rows()],
        reuse.passages.select("chunk_id", "title") if reuse else None, reuse.passage_vectors if reuse else None,
        step, counter, files["passage_vectors.npy"])
    files["fact_vectors.npy"] = scratch / "fact_vectors.npy"
    fact_vectors = _vectors(
        store, "fact", embedder, facts.select("fact_id", "subject", "predicate", "object"), ["fact_id"],
        lambda frame: [fact_text(s, p, o) for s, p, o in frame.select("subject", "predicate", "object").iter_rows()],
        reuse.facts.select("fact_id") if reuse else None, reuse.fact_vectors if reuse else None, step, counter,
        scratch / "fact_vectors_by_id.npy" if indexed else files["fact_vectors.npy"])
    fact_index = None
    if indexed:
        fact_index, order = build_fact_index(facts.get_column("fact_id"), fact_vectors, reuse,
                                             lambda done, total: step("indexing facts", done, total))
        # In group order: gathered in memory (the served table stays one piece), then a file too.
        by_id, facts = files["facts" + TABLE_SUFFIX], spilled("facts", facts[order], "facts_by_group")
        by_id.unlink()
        unordered, fact_vectors = fact_vectors, spill.gathered(fact_vectors, order, files["fact_vectors.npy"])
        del unordered, order
        (scratch / "fact_vectors_by_id.npy").unlink()
        step("coding facts", 0, 1)
        codes.spilled(fact_vectors, scratch)
        files[codes.CODES_FILE], files[codes.SCALES_FILE] = scratch / codes.CODES_FILE, scratch / codes.SCALES_FILE
        step("coding facts", 1, 1)
    del fact_vectors
    return Content(
        entities=entities,
        passages=passages,
        facts=facts,
        evidence=evidence,
        files=files,
        nodes=nodes,
        stored_entries=stored_entries,
        edge_counts=edge_counts,
        fact_index=fact_index,
        embedded=counter[0],
        access=access,
    )


def live_readers(store: Store, manifest: Manifest) -> pl.DataFrame:
    """doc_id, readers of every live document at ``manifest`` (``public`` for one without a readers
    row), by doc id: two small columns, what a service reads to narrow its views (service/queries.py)."""
    readers = store.read_columns(DOCUMENT_READERS.name, manifest, ["doc_id", "readers"])
    documents = store.read_columns(DOCUMENTS.name, manifest, ["doc_id"])
    return documents.join(readers, on="doc_id", how="left").with_columns(
        pl.col("readers").fill_null(PUBLIC)).sort("doc_id")


def read_access(store: Store, manifest: Manifest, *, always: bool = False) -> Access | None:
    """What reader views are derived from: each document's readers, the live forms, fact assertions
    and name links, and the settings that turn them into entities and synonym edges. None when
    every document is public (every view is the whole), unless ``always`` (an export's: a later
    narrowing commit derives views from them)."""
    if not always:
        stored = store.read_columns(DOCUMENT_READERS.name, manifest, ["readers"])
        if all(PUBLIC in readers_of_text(text) for text in stored.get_column("readers").unique().to_list()):
            return None  # a document without a row is public too: nothing else to read
    readers = live_readers(store, manifest)
    shape = manifest.config.get("settings") or {}
    defaults = IndexSettings()
    settings = {
        "entity_threshold": float(shape.get("entity_threshold", defaults.entity_threshold)),
        "synonym_threshold": float(shape.get("synonym_threshold", defaults.synonym_threshold)),
        "numbers_must_agree": bool(shape.get("numbers_must_agree", defaults.numbers_must_agree)),
    }
    return Access(
        readers=readers,
        forms=store.read_columns(FORMS.name, manifest, list(FORMS.columns)).sort("chunk_id", "name", "type"),
        fact_sources=store.read_columns(FACT_SOURCES.name, manifest,
                                        list(FACT_SOURCES.columns)).sort("fact_id", "chunk_id"),
        name_links=store.read_columns(NAME_LINKS.name, manifest,
                                      list(NAME_LINKS.columns)).sort("type", "name_a", "name_b"),
        settings=settings,
    )


def access_since(store: Store, manifest: Manifest, passages: pl.DataFrame) -> tuple[Access, frozenset[str]]:
    """The access tables of a snapshot exported without them (every document public; ``passages``:
    its passages' chunk_id and doc_id), read from the store at a later commit ``manifest``, and the
    snapshot's documents that they cannot stand for: those deleted or replaced since.

    A document the store still holds with the snapshot's passages has the forms and fact
    assertions it had then, and the name links among live names are a function of the two names,
    so for the documents kept these are the tables the snapshot would have held. The readers are
    the snapshot's: every document public."""
    access = read_access(store, manifest, always=True)
    assert access is not None
    mine = passages.select("chunk_id", "doc_id")
    stored = store.read_columns(PASSAGES.name, manifest, ["chunk_id", "doc_id"])
    counts = (mine.group_by("doc_id").len("held")
              .join(stored.group_by("doc_id").len("now"), on="doc_id", how="left")
              .join(mine.join(stored, on=["chunk_id", "doc_id"], how="semi").group_by("doc_id").len("kept"),
                    on="doc_id", how="left"))
    kept = counts.filter((pl.col("held") == pl.col("now")) & (pl.col("held") == pl.col("kept"))).get_column("doc_id")
    documents = counts.get_column("doc_id").sort()
    wanted = kept.implode()
    return Access(
        readers=pl.DataFrame({"doc_id": documents, "readers": [PUBLIC] * len(documents)},
                             schema={"doc_id": pl.String, "readers": pl.String}),
        forms=access.forms.filter(pl.col("doc_id").is_in(wanted)),
        fact_sources=access.fact_sources.filter(pl.col("doc_id").is_in(wanted)),
        name_links=access.name_links,
        settings=access.settings,
    ), frozenset(documents.to_list()) - frozenset(kept.to_list())


def _vectors(store: Store, kind: str, embedder: Embedder, rows: pl.DataFrame, key: list[str],
             texts_of: Callable[[pl.DataFrame], list[str]], previous_keys: pl.DataFrame | None,
             previous_vectors: np.ndarray | None, step: ExportProgress, counter: list[int], path: Path) -> np.ndarray:
    """(len(rows), dim) float16 vectors of rows, in a file at ``path`` (snapshot/spill.py), mapped
    read-only: the previous snapshot's where it holds the same key, the cache's or newly embedded
    ones for the rest, a chunk of rows at a time."""
    out = spill.new_matrix(path, rows.height, embedder.dim)
    todo = np.arange(rows.height)
    if previous_keys is not None and previous_vectors is not None and previous_keys.height:
        matched = (
            rows.select(key).with_row_index("new")
            .join(previous_keys.with_row_index("old"), on=key, how="inner", nulls_equal=True)
            .sort("new")
        )
        new_rows = matched.get_column("new").to_numpy().astype(np.int64)
        old_rows = matched.get_column("old").to_numpy().astype(np.int64)
        for lo, hi in spill.chunks(new_rows.size, spill.GATHER_ROWS):  # rows from all over the previous file
            out[new_rows[lo:hi]] = previous_vectors[old_rows[lo:hi]]
            spill.release(out)
            spill.release(previous_vectors)
        todo = np.setdiff1d(todo, new_rows, assume_unique=True)
    if todo.size:
        cache = VectorCache(store, kind, embedder)
        label = f"{kind} vectors"
        step(label, 0, int(todo.size))
        for lo, hi in spill.chunks(todo.size):
            rows_now = todo[lo:hi]
            out[rows_now] = cache.vectors(texts_of(rows[rows_now]))
            spill.release(out)
            step(label, hi, int(todo.size))
        counter[0] += cache.computed
    del out
    return spill.opened(path)


def _sample_digest(ids: pl.Series) -> str:
    return hashlib.sha256("\n".join(map(str, ids.to_list())).encode()).hexdigest()


def build_fact_index(fact_ids: np.ndarray | pl.Series, vectors: Vectors, previous: Snapshot | None,
                     progress: Callable[[int, int], None],
                     previous_rows: np.ndarray | None = None) -> tuple[FactIndex, np.ndarray]:
    """The inverted-file index of the fact vectors, and the order (group, then fact id) that the
    snapshot stores the facts in. The ids are sorted as strings by polars (a byte order, the same
    as Python's for str), many times faster than NumPy on an array of objects.

    ``previous_rows``, when the facts are rows of ``previous`` (a view narrowed from it:
    permissions/narrowed_graph.py), is each fact's row there, increasing: the facts then keep
    their groups without matching their ids, and, the previous snapshot holding its facts in
    (group, fact id) order, they are in that order already."""
    ids = pl.Series("fact_id", fact_ids) if not isinstance(fact_ids, pl.Series) else fact_ids.rename("fact_id")
    lists = n_lists(ids.len())
    sample = sample_rows(ids, lists)
    digest = _sample_digest(ids.gather(sample))
    old = previous.fact_index if previous is not None else None
    groups = np.full(ids.len(), -1, dtype=np.int32)
    if old is not None and old.sample_digest == digest:
        centroids = old.centroids
        old_groups = np.repeat(np.arange(len(old.offsets) - 1, dtype=np.int32), np.diff(old.offsets))
        if previous_rows is not None and (previous_rows.size < 2 or bool(np.all(np.diff(previous_rows) > 0))):
            groups = old_groups[previous_rows]
            offsets = np.zeros(lists + 1, dtype=np.int64)
            np.cumsum(np.bincount(groups, minlength=lists), out=offsets[1:])
            index = FactIndex(centroids=centroids, offsets=offsets, sample_digest=digest)
            return index, np.arange(ids.len(), dtype=np.int64)
        matched = (
            ids.to_frame().with_row_index("new")
            .join(previous.facts.select("fact_id").with_row_index("old"), on="fact_id", how="inner")
        )
        groups[matched.get_column("new").to_numpy()] = old_groups[matched.get_column("old").to_numpy()]
    else:
        centroids = train_centroids(vectors, sample, lists)
    todo = np.flatnonzero(groups < 0)
    if todo.size:
        groups[todo] = assign(vectors if todo.size == groups.size else vectors[todo], centroids, progress)
    order = (pl.DataFrame({"group": groups, "fact_id": ids}).with_row_index("row")
             .sort(["group", "fact_id"], maintain_order=True).get_column("row").to_numpy().astype(np.int64))
    offsets = np.zeros(lists + 1, dtype=np.int64)
    np.cumsum(np.bincount(groups, minlength=lists), out=offsets[1:])
    return FactIndex(centroids=centroids, offsets=offsets, sample_digest=digest), order


def with_fact_index(snapshot: Snapshot) -> Snapshot:
    """The snapshot with an inverted-file index over its facts, built in memory whatever their
    number (to hold indexed seeding to exact seeding on a small corpus)."""
    index, order = build_fact_index(snapshot.facts.get_column("fact_id").to_numpy(),
                                    np.asarray(snapshot.fact_vectors), None, lambda done, total: None)
    fact_vectors = np.asarray(snapshot.fact_vectors)[order]
    return Snapshot(info=snapshot.info, entities=snapshot.entities, passages=snapshot.passages,
                    facts=snapshot.facts[order], evidence=snapshot.evidence, adjacency=snapshot.adjacency,
                    passage_vectors=snapshot.passage_vectors, fact_vectors=fact_vectors,
                    fact_index=index, fact_codes=codes.in_memory(fact_vectors))

