"""The serving snapshot: everything retrieval needs, exported from the store in one directory.

A snapshot is a versioned directory under ``<store root>/snapshots/<snapshot_id>/`` (a prefix on an
object store) holding

    graph_indptr.npy      the CSR adjacency over entity and passage nodes (see adjacency.py):
    graph_indices.npy     its row pointers, column indices (sorted in each row) and weights, in
    graph_weights.npy     the dtypes scipy gives them, so that a mapped graph is a matrix unconverted
    entities.arrow        entity nodes: node, entity_id, type, display_name, n_passages
    passages.arrow        passage nodes: node, chunk_id, doc_id, title, text, location (a file's
                          passage: path and page or section; null otherwise; absent in older snapshots)
    facts.arrow           fact_id, subject, predicate, object, subject_entity, object_entity, n_sources
    fact_evidence.arrow   fact_id, chunk_id, doc_id, evidence (which passage asserted it, quoting what)
    passage_vectors.npy   (#passages, dim) float16, rows in passages.arrow order
    fact_vectors.npy      (#facts, dim) float16, rows in facts.arrow order
    fact_index.npz        only for large fact tables: the inverted-file index's centroids, the
                          row offsets of its groups (facts.arrow holds the facts group by
                          group) and its training sample's digest (fact_index.py)
    fact_codes.npy        with the index: (#facts, dim rounded up to 8) int8 codes of the fact
    fact_code_scales.npy  vectors and each row's float32 scale, what a query scores the probed
                          groups with before re-scoring the best rows from fact_vectors.npy
                          (codes.py; a snapshot without them scores the float16 rows)
    manifest.json         store fingerprint and commit, models, creation time, counts

and, only when some live document is not public, what reader views are derived from
(permissions/views.py)::

    readers.arrow         doc_id, readers: who may read each document (ingest/readers.py)
    forms.arrow           the store's forms: chunk_id, doc_id, name, type, surface
    fact_sources.arrow    the store's fact assertions, with their subjects, objects and evidence
    name_links.arrow      the store's name links: type, name_a, name_b, similarity
    access.json           the thresholds and the number rule that make entities and synonym edges

**Tables, graph and vectors are memory-mapped.** The tables are Arrow IPC files, uncompressed, the
graph and the vectors ``.npy`` files: on a local disk all are mapped read-only, not read, so query processes
on one node share their pages through the page cache, and a process's memory holds only the
pages its queries touch (a passage's text when it is cited or reranked, a fact's row when it is
seeded), not a decoded copy of every table. From an object store they are read whole. Snapshots
of formats 1 and 2 (the tables in Parquet and the graph in ``graph.npz``, read and decoded whole;
format 1 with float32 vectors and no index, converted to float16 in memory) are still read.

**Publishing is checked, then atomic.** Every file is written first (the snapshot is staged),
then its checks run on the staged copy and their verdict is kept beside it as ``verdict.json``
(verdict.py); only when none fails is ``snapshots/latest`` (a one-line JSON pointer) replaced, in
one step: a rename on a local disk, a single PUT on an object store. Readers follow the pointer,
so they see the previous snapshot or the new one, never a partial or an unchecked one. Older
snapshots are pruned after publishing (export.py: ``_prune`` says which stay).

This module holds the format, where snapshots live and how one is loaded; export.py writes,
publishes, prunes and erases them.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import scipy.sparse as sp

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.models.embedder import Embedder, EmbedderUnavailable, HashingEmbedder, load_embedder
from lightfoot_pipeline.snapshot.codes import CODES_FILE, SCALES_FILE, RowCodes
from lightfoot_pipeline.snapshot.shared_rows import SharedRows
from lightfoot_pipeline.snapshot.spill import read_at_random
from lightfoot_pipeline.store.filesystem import open_filesystem
from lightfoot_pipeline.store.store import Store, local_file_lock

SNAPSHOTS_DIR = "snapshots"
POINTER = "latest"
MANIFEST_FILE = "manifest.json"
FACT_INDEX_FILE = "fact_index.npz"
ACCESS_FILE = "access.json"
ACCESS_TABLES = ("readers", "forms", "fact_sources", "name_links")
FORMAT_VERSION = 3
READABLE_FORMATS = (1, 2, 3)
TABLE_SUFFIX = ".arrow"  # format 3: Arrow IPC files, memory-mapped
PARQUET_SUFFIX = ".parquet"  # formats 1 and 2
GRAPH_ARRAYS = ("indptr", "indices", "weights")  # format 3: graph_<name>.npy each
LEGACY_GRAPH_FILE = "graph.npz"  # formats 1 and 2
MISSING = object()  # what SnapshotDirectory.read_json returns for a file that is not there
_ID_PATTERN = re.compile(r"^\d{8}T\d{12}Z-[0-9a-f]{12}$")


class SnapshotError(LightfootError, RuntimeError):
    """A snapshot cannot be exported or loaded; the message says why."""


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: str
    uri: str
    fingerprint: str
    store_seq: int
    created_at: str
    counts: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def passage_text(title: str | None, text: str) -> str:
    """The text a passage is embedded and reranked as (``Passage.retrieval_text``)."""
    return f"{title}\n{text}" if title else text


# -- storage ------------------------------------------------------------------------------------


class SnapshotDirectory:
    """The snapshots directory of a store, on a local disk or an object store, via pyarrow.fs."""

    def __init__(self, store: Store) -> None:
        self.store = store
        root = store.local_root()
        if root is not None:
            self.fs: pafs.FileSystem = pafs.LocalFileSystem()
            self.base = str(root / SNAPSHOTS_DIR)
            self.local = True
        else:
            self.fs, path = open_filesystem(store.uri, store.storage_options)
            self.base = f"{path.rstrip('/')}/{SNAPSHOTS_DIR}"
            self.local = False
        self.uri_base = store.path(SNAPSHOTS_DIR)

    def path(self, *parts: str) -> str:
        return "/".join([self.base, *parts])

    def uri(self, snapshot_id: str) -> str:
        return f"{self.uri_base}/{snapshot_id}"

    def write_bytes(self, path: str, data: bytes) -> None:
        with self.fs.open_output_stream(path) as out:
            out.write(data)

    def write_file(self, path: str, local: Path, piece: int = 64 << 20) -> None:
        """Copy the local file ``local`` to ``path``, ``piece`` bytes at a time."""
        with local.open("rb") as src, self.fs.open_output_stream(path) as out:
            while data := src.read(piece):
                out.write(data)

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_stream(path) as src:
            return src.read()

    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def snapshot_ids(self) -> list[str]:
        """Every snapshot directory, complete or not, oldest first (ids sort by creation time)."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.base, allow_not_found=True))
        names = [i.base_name for i in infos if i.type == pafs.FileType.Directory]
        return sorted(n for n in names if _ID_PATTERN.match(n))

    def remove(self, snapshot_id: str) -> None:
        self.fs.delete_dir(self.path(snapshot_id))

    def publish_pointer(self, snapshot_id: str) -> None:
        payload = json.dumps({"snapshot_id": snapshot_id}).encode() + b"\n"
        target = self.path(POINTER)
        if self.local:
            staging = self.path(f".{POINTER}.{snapshot_id}.tmp")
            self.write_bytes(staging, payload)
            self.fs.move(staging, target)  # rename(2): readers see the old pointer or the new one
        else:
            self.write_bytes(target, payload)  # one PUT replaces an object atomically

    def clear_pointer(self) -> None:
        if self.exists(self.path(POINTER)):
            self.fs.delete_file(self.path(POINTER))

    def read_json(self, path: str, what: str):
        """The JSON value of a file, or MISSING when there is none (or it was removed while read)."""
        try:
            return json.loads(self.read_bytes(path))
        except FileNotFoundError:
            return MISSING
        except (OSError, ValueError) as err:
            if not self.exists(path):
                return MISSING
            raise SnapshotError(f"{what}: {err}") from err

    def pointer(self) -> str | None:
        payload = self.read_json(self.path(POINTER), f"cannot read the snapshot pointer {self.uri_base}/{POINTER}")
        if payload is MISSING:
            return None
        snapshot_id = payload.get("snapshot_id") if isinstance(payload, dict) else None
        if not isinstance(snapshot_id, str) or not _ID_PATTERN.match(snapshot_id):
            raise SnapshotError(f"the snapshot pointer {self.uri_base}/{POINTER} names no valid snapshot: {payload!r}")
        return snapshot_id

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """One snapshot writer at a time (local stores; on object stores the orchestrator's pool)."""
        root = self.store.local_root()
        return contextlib.nullcontext() if root is None else local_file_lock(root / "_lightfoot" / "snapshot.lock")


def read_info(location: SnapshotDirectory, snapshot_id: str) -> SnapshotInfo | None:
    """A snapshot's manifest, or None when it has none (an export that did not finish)."""
    payload = location.read_json(location.path(snapshot_id, MANIFEST_FILE),
                                 f"snapshot {snapshot_id} has an unreadable manifest")
    if payload is MISSING:
        return None
    if payload.get("format") not in READABLE_FORMATS:
        raise SnapshotError(f"snapshot {snapshot_id} has format {payload.get('format')!r}; this version reads "
                            f"formats {', '.join(map(str, READABLE_FORMATS))}: export a new one (`lightfoot snapshot`)")
    return SnapshotInfo(
        snapshot_id=snapshot_id, uri=location.uri(snapshot_id), fingerprint=payload["fingerprint"],
        store_seq=int(payload["store_seq"]), created_at=payload["created_at"], counts=payload.get("counts", {}),
        models=payload.get("models", {}),
    )


def latest_snapshot(store: Store) -> SnapshotInfo | None:
    """The published snapshot (the one ``latest`` points to), or None if none was published."""
    location = SnapshotDirectory(store)
    snapshot_id = location.pointer()
    if snapshot_id is None:
        return None
    info = read_info(location, snapshot_id)
    if info is None:
        raise SnapshotError(f"the snapshot pointer names {snapshot_id}, which has no manifest")
    return info


def list_snapshots(store: Store) -> list[SnapshotInfo]:
    """Every complete snapshot, oldest first."""
    location = SnapshotDirectory(store)
    infos = [read_info(location, i) for i in location.snapshot_ids()]
    return [i for i in infos if i is not None]


# -- loading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactIndex:
    """The inverted-file index of a snapshot's fact vectors (fact_index.py builds it, retrieval/seeding.py reads it)."""

    centroids: np.ndarray  # (#groups, dim) float32
    offsets: np.ndarray  # (#groups + 1,) rows of group g: offsets[g]:offsets[g + 1]
    sample_digest: str  # which facts trained the centroids

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        np.savez(buffer, centroids=self.centroids, offsets=self.offsets, sample_digest=np.array(self.sample_digest))
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> FactIndex:
        with np.load(io.BytesIO(data), allow_pickle=False) as stored:
            return cls(centroids=stored["centroids"], offsets=stored["offsets"],
                       sample_digest=str(stored["sample_digest"]))


@dataclass(frozen=True)
class Access:
    """What a snapshot keeps to derive reader views: who may read each document, the store's live
    forms, fact assertions and name links, and the settings that make entities and synonym edges
    of them (``entity_threshold``, ``synonym_threshold``, ``numbers_must_agree``)."""

    readers: pl.DataFrame  # doc_id, readers (ingest/readers.py: readers_text)
    forms: pl.DataFrame  # the forms table's columns
    fact_sources: pl.DataFrame  # the fact_sources table's columns
    name_links: pl.DataFrame  # type, name_a, name_b, similarity
    settings: dict

    def frames(self) -> dict[str, pl.DataFrame]:
        return {"readers": self.readers, "forms": self.forms, "fact_sources": self.fact_sources,
                "name_links": self.name_links}


@dataclass(eq=False)  # one snapshot is one object: identity, so the walk operators can be kept per snapshot
class Snapshot:
    """A snapshot in memory, ready to query."""

    info: SnapshotInfo
    entities: pl.DataFrame
    passages: pl.DataFrame
    facts: pl.DataFrame
    evidence: pl.DataFrame
    adjacency: sp.csr_matrix
    passage_vectors: np.ndarray  # (#passages, dim) float16, usually memory-mapped
    fact_vectors: np.ndarray  # (#facts, dim) float16, usually memory-mapped
    fact_index: FactIndex | None = None
    # int8 codes of the rows of the matrix the fact vectors are (a view's: of its snapshot's), codes.py
    fact_codes: RowCodes | None = None
    access: Access | None = None  # None: every document is public, and every reader's view is the whole

    def __post_init__(self) -> None:
        n_entities, n_passages = self.entities.height, self.passages.height
        if self.adjacency.shape != (n_entities + n_passages,) * 2:
            raise SnapshotError(f"snapshot {self.info.snapshot_id}: graph shape {self.adjacency.shape} does not "
                                f"match {n_entities} entities and {n_passages} passages")
        if self.passage_vectors.shape[0] != n_passages or self.fact_vectors.shape[0] != self.facts.height:
            raise SnapshotError(f"snapshot {self.info.snapshot_id}: vector rows do not match its tables")
        if self.fact_index is not None and int(self.fact_index.offsets[-1]) != self.facts.height:
            raise SnapshotError(f"snapshot {self.info.snapshot_id}: the fact index does not cover its facts")
        if self.fact_codes is not None:
            base = self.fact_vectors.matrix if isinstance(self.fact_vectors, SharedRows) else self.fact_vectors
            if self.fact_codes.rows != base.shape[0] or not self.fact_codes.fits(base.shape[1]):
                raise SnapshotError(f"snapshot {self.info.snapshot_id}: the fact codes are not those of its fact "
                                    "vectors")

    @property
    def n_entities(self) -> int:
        return self.entities.height

    @property
    def n_nodes(self) -> int:
        """Graph nodes: the entities, then the passages (adjacency.py)."""
        return self.entities.height + self.passages.height

    @property
    def snapshot_id(self) -> str:
        return self.info.snapshot_id

    @cached_property
    def entity_passage_counts(self) -> np.ndarray:
        return self.entities.get_column("n_passages").to_numpy()  # (#entities,)

    @cached_property
    def fact_subjects(self) -> np.ndarray:
        return self.facts.get_column("subject_entity").to_numpy()  # (#facts,)

    @cached_property
    def fact_objects(self) -> np.ndarray:
        return self.facts.get_column("object_entity").to_numpy()  # (#facts,)

    def prime(self, evidence_ranges: tuple[np.ndarray, np.ndarray]) -> None:
        """Give the snapshot its evidence ranges (the property below), derived by the caller as it
        would compute them: a view narrowed from a base takes its base's rows of them
        (permissions/narrowed_graph.py) instead of computing them again."""
        self.__dict__["evidence_ranges"] = evidence_ranges

    def passage_texts(self, rows: Sequence[int] | np.ndarray) -> list[str]:
        """The texts the passages of rows ``rows`` are embedded and reranked as, in that order: read
        from those rows only, so a memory-mapped passage table gives the pages of those passages."""
        picked = self.passages.select("title", "text")[np.asarray(rows, dtype=np.int64)]
        return [passage_text(t, x) for t, x in picked.iter_rows()]

    @cached_property
    def evidence_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """(#facts,) first row in ``evidence`` of each fact's evidence, and how many rows it has
        (the evidence is sorted by fact id)."""
        spans = (
            self.evidence.select("fact_id").with_row_index("row")
            .group_by("fact_id").agg(pl.col("row").min().alias("start"), pl.len().alias("count"))
        )
        joined = self.facts.select("fact_id").join(spans, on="fact_id", how="left", maintain_order="left")
        return (joined.get_column("start").fill_null(0).to_numpy().astype(np.int64),
                joined.get_column("count").fill_null(0).to_numpy().astype(np.int64))

    def fact_evidence(self, row: int) -> list[dict]:
        """The evidence rows of the fact in row ``row``: {fact_id, chunk_id, doc_id, evidence}."""
        starts, counts = self.evidence_ranges
        return self.evidence.slice(int(starts[row]), int(counts[row])).to_dicts()


def read_table_file(location: SnapshotDirectory, folder: Callable[[str], str], name: str,
                    columns: list[str] | None = None) -> pa.Table:
    """A snapshot table (some of its columns): its Arrow IPC file (format 3) memory-mapped from a
    local disk, or read whole from an object store; the Parquet file of an earlier format, read and
    decoded whole. FileNotFoundError when the snapshot has neither."""
    path = folder(name + TABLE_SUFFIX)
    if not location.exists(path):
        return pq.read_table(io.BytesIO(location.read_bytes(folder(name + PARQUET_SUFFIX))), columns=columns)
    source = pa.memory_map(path, "r") if location.local else pa.BufferReader(location.read_bytes(path))
    table = ipc.open_file(source).read_all()
    return table if columns is None else table.select(columns)


def _read_table(location: SnapshotDirectory, folder: Callable[[str], str], name: str) -> pl.DataFrame:
    frame = pl.from_arrow(read_table_file(location, folder, name), rechunk=False)  # a mapped file's columns, uncopied
    assert isinstance(frame, pl.DataFrame), "an Arrow table converts to a DataFrame"
    return frame


def _with_location(passages: pl.DataFrame) -> pl.DataFrame:
    """Passages of a snapshot exported before locations were kept get a null location."""
    if "location" in passages.columns:
        return passages
    return passages.with_columns(pl.lit(None, dtype=pl.String).alias("location"))


def _read_array(location: SnapshotDirectory, path: str) -> np.ndarray:
    """A ``.npy`` file's array: memory-mapped from a local disk, read from an object store."""
    if location.local:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    return np.load(io.BytesIO(location.read_bytes(path)), allow_pickle=False)


def _read_vectors(location: SnapshotDirectory, path: str) -> np.ndarray:
    """A (rows, dim) float16 array: memory-mapped from a local disk, read from an object store."""
    vectors = _read_array(location, path)
    if vectors.ndim != 2:
        raise ValueError(f"{path} holds a {vectors.ndim}-dimensional array, not a matrix")
    return vectors if vectors.dtype == np.float16 else vectors.astype(np.float16)  # format 1: float32


def _read_codes(location: SnapshotDirectory, folder: Callable[[str], str]) -> RowCodes | None:
    """The fact vectors' int8 codes (codes.py), mapped like the vectors; None in a snapshot without them."""
    if not location.exists(folder(CODES_FILE)):
        return None
    return RowCodes(_read_array(location, folder(CODES_FILE)), _read_array(location, folder(SCALES_FILE)))


def _fact_vectors(location: SnapshotDirectory, folder: Callable[[str], str], codes: RowCodes | None) -> np.ndarray:
    """The fact vectors; with codes, a query reads only its best candidates' float16 rows, spread
    over the file, so their mapping is read at random (spill.py: ``read_at_random``): a fault
    brings in its own page, not its neighbours', and a replica holds the pages of the rows its
    queries re-scored rather than most of the file."""
    vectors = _read_vectors(location, folder("fact_vectors.npy"))
    if codes is not None:
        read_at_random(vectors)
    return vectors


def graph_file(name: str) -> str:
    """The file of one of the graph's CSR arrays (GRAPH_ARRAYS) in a format 3 snapshot."""
    return f"graph_{name}.npy"


def _read_graph(location: SnapshotDirectory, folder: Callable[[str], str], n_nodes: int) -> sp.csr_matrix:
    """The (n_nodes, n_nodes) adjacency: its arrays mapped from a local disk (read from an object
    store), or an earlier format's ``graph.npz`` read whole."""
    if not location.exists(folder(graph_file("indptr"))):
        return sp.load_npz(io.BytesIO(location.read_bytes(folder(LEGACY_GRAPH_FILE)))).tocsr()
    indptr, indices, weights = (_read_array(location, folder(graph_file(name))) for name in GRAPH_ARRAYS)
    if indptr.shape != (n_nodes + 1,) or indices.shape != weights.shape or indices.shape != (int(indptr[-1]),):
        raise ValueError(f"the graph's arrays ({indptr.shape}, {indices.shape}, {weights.shape}) do not make "
                         f"an adjacency of {n_nodes} nodes")
    return sp.csr_matrix((weights, indices, indptr), shape=(n_nodes, n_nodes), copy=False)


def _read_access(location: SnapshotDirectory, folder) -> Access | None:
    """The snapshot's access tables, or None when it has none (every document public)."""
    if not location.exists(folder(ACCESS_FILE)):
        return None
    settings = json.loads(location.read_bytes(folder(ACCESS_FILE)))
    frames = {name: _read_table(location, folder, name) for name in ACCESS_TABLES}
    return Access(settings=settings, **frames)


def load_snapshot(store: Store, snapshot_id: str | None = None) -> Snapshot:
    """Load a snapshot (the published one by default) into memory."""
    location = SnapshotDirectory(store)
    snapshot_id = snapshot_id or location.pointer()
    if snapshot_id is None:
        raise SnapshotError(f"no snapshot has been exported for {store.uri}: run `lightfoot snapshot` "
                            "(or `lightfoot query`, which exports one when none exists)")
    info = read_info(location, snapshot_id)
    if info is None:
        raise SnapshotError(f"snapshot {snapshot_id} does not exist under {location.uri_base}")
    folder = lambda name: location.path(snapshot_id, name)  # noqa: E731
    try:
        entities = _read_table(location, folder, "entities")
        passages = _with_location(_read_table(location, folder, "passages"))
        fact_codes = _read_codes(location, folder)
        return Snapshot(
            info=info,
            entities=entities,
            passages=passages,
            facts=_read_table(location, folder, "facts"),
            evidence=_read_table(location, folder, "fact_evidence"),
            adjacency=_read_graph(location, folder, entities.height + passages.height),
            passage_vectors=_read_vectors(location, folder("passage_vectors.npy")),
            fact_vectors=_fact_vectors(location, folder, fact_codes),
            fact_index=(FactIndex.from_bytes(location.read_bytes(folder(FACT_INDEX_FILE)))
                        if location.exists(folder(FACT_INDEX_FILE)) else None),
            fact_codes=fact_codes,
            access=_read_access(location, folder),
        )
    except FileNotFoundError as err:
        raise SnapshotError(f"snapshot {snapshot_id} is missing a file (removed while loading?): {err}") from err
    except (OSError, ValueError, KeyError, pa.ArrowException) as err:
        raise SnapshotError(f"snapshot {snapshot_id} cannot be read ({type(err).__name__}: {err})") from err


def embedder_for_models(models: dict) -> Embedder | None:
    """The embedder a snapshot's vectors came from, if it can be loaded here (None otherwise)."""
    model_id, dim = models.get("embedder"), models.get("dim")
    if not model_id or not dim:
        return None
    match = re.fullmatch(r"hashing-(\d+)gram-(\d+)d", model_id)
    if match:
        return HashingEmbedder(dim=int(match.group(2)), ngram=int(match.group(1)))
    try:
        embedder = load_embedder(model_id)  # a recorded id loads with the geometry it names
    except (EmbedderUnavailable, OSError, ValueError):
        return None
    return embedder if embedder.model_id == model_id else None
