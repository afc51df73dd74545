"""The serving snapshot: what it holds, atomic publishing, pruning, erasure."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.retrieval.graph import walk_graph
from lightfoot_pipeline.snapshot import codes, export
from lightfoot_pipeline.snapshot.export import erase_from_snapshots, export_snapshot, publish_checked
from lightfoot_pipeline.snapshot.format import (
    SnapshotDirectory,
    SnapshotError,
    latest_snapshot,
    list_snapshots,
    load_snapshot,
    passage_text,
)
from lightfoot_pipeline.store.fingerprint import counts, fingerprint

CANARY = "Zanzibarquux-canary-7d1f"

CORPUS = {
    "d-ada": ("Ada Lovelace", "Ada Lovelace was born in London. She worked with Charles Babbage.",
              [["Ada Lovelace", "born in", "London"], ["Ada Lovelace", "worked with", "Charles Babbage"]]),
    "d-babbage": ("Charles Babbage", "Charles Babbage designed the Analytical Engine in London.",
                  [["Charles Babbage", "designed", "Analytical Engine"], ["Charles Babbage", "lived in", "London"]]),
    "d-engine": ("Analytical Engine", "The Analytical Engine was a proposed mechanical computer.",
                 [["Analytical Engine", "is a", "mechanical computer"]]),
    "d-paris": ("Paris", "Paris is the capital of France and lies on the Seine.",
                [["Paris", "capital of", "France"], ["Paris", "lies on", "Seine"]]),
    "d-secret": ("Secret", f"The {CANARY} society met in Paris every spring.",
                 [[f"{CANARY} society", "met in", "Paris"]]),
    "d-lonely": ("Nothing", "A passage that names nothing in particular.", []),
}


def documents(ids=None) -> list[Document]:
    return [Document(doc_id=d, title=t, text=x) for d, (t, x, _) in CORPUS.items() if ids is None or d in ids]


def records() -> dict[str, dict]:
    out = {}
    for doc_id, (title, _, facts) in CORPUS.items():
        names = sorted({n for f in facts for n in (f[0], f[2])} | {title})
        out[doc_id] = {"doc_id": doc_id, "entities": [{"name": n, "type": None, "description": None} for n in names],
                       "facts": facts}
    return out


def build(store, embedder, ids=None):
    return operations.ingest(store, documents(ids), ReplayExtractor(records()), embedder)


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


@pytest.mark.slow
def test_export_writes_graph_tables_vectors_and_manifest(store, hashing_embedder):
    build(store, hashing_embedder)
    info = export_snapshot(store, hashing_embedder)
    folder = Path(info.uri)
    assert sorted(p.name for p in folder.iterdir()) == sorted([
        "graph_indptr.npy", "graph_indices.npy", "graph_weights.npy", "entities.arrow", "passages.arrow", "facts.arrow", "fact_evidence.arrow",
        "passage_vectors.npy", "fact_vectors.npy", "manifest.json", "verdict.json"])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["fingerprint"] == fingerprint(store).digest
    assert manifest["store_seq"] == store.manifest().seq
    assert manifest["models"]["embedder"] == hashing_embedder.model_id
    assert json.loads((folder.parent / "latest").read_text()) == {"snapshot_id": info.snapshot_id}

    snap = load_snapshot(store)
    table_counts = counts(store)
    assert snap.entities.height == table_counts["entities"] and snap.passages.height == table_counts["passages"] == 6
    assert snap.facts.height == table_counts["facts"]
    assert snap.passage_vectors.shape == (6, hashing_embedder.dim)
    assert snap.fact_vectors.shape == (table_counts["facts"], hashing_embedder.dim)
    # Vectors are those of the passage's retrieval text (title line, then text).
    row = snap.passages.filter(pl.col("doc_id") == "d-paris").row(0, named=True)
    expected = hashing_embedder.embed([f"{row['title']}\n{row['text']}"])[0]
    # stored at half precision
    np.testing.assert_array_equal(snap.passage_vectors[row["node"] - snap.entities.height], expected.astype(np.float16))

    adjacency = snap.adjacency
    assert (adjacency != adjacency.T).nnz == 0  # undirected
    n_e = snap.entities.height
    # Passage–entity edges come from mentions, one per (entity, passage), weight 1.
    assert adjacency[:n_e, n_e:].nnz == table_counts["mentions"]
    assert set(adjacency[:n_e, n_e:].data.tolist()) == {1.0}
    # Passages are linked only to entities: the lonely passage has no edge at all.
    lonely = snap.passages.filter(pl.col("doc_id") == "d-lonely").get_column("node")[0]
    title_entity = snap.entities.filter(pl.col("display_name").str.to_lowercase() == "nothing")
    assert adjacency[lonely].nnz == title_entity.height
    assert adjacency[n_e:, n_e:].nnz == 0
    # Entity–entity weights count the facts linking the pair: Ada–London is asserted once.
    names = dict(zip(snap.entities.get_column("display_name").str.to_lowercase(), snap.entities.get_column("node"), strict=True))
    assert adjacency[names["ada lovelace"], names["london"]] == 1.0


def test_an_unchanged_store_keeps_its_snapshot(store, hashing_embedder):
    build(store, hashing_embedder)
    first = export_snapshot(store, hashing_embedder)
    again = export_snapshot(store, hashing_embedder)
    assert again == first
    assert len(list_snapshots(store)) == 1


@pytest.mark.slow
def test_publish_prunes_to_keep_and_points_at_the_newest(store, hashing_embedder):
    ids = list(CORPUS)
    infos = []
    for n in range(2, 6):
        build(store, hashing_embedder, ids[:n])
        infos.append(export_snapshot(store, hashing_embedder, keep=2))
    assert [s.snapshot_id for s in list_snapshots(store)] == [i.snapshot_id for i in infos[-2:]]
    assert latest_snapshot(store) == infos[-1]
    assert load_snapshot(store).passages.height == 5
    assert load_snapshot(store, infos[-2].snapshot_id).passages.height == 4
    with pytest.raises(SnapshotError, match="does not exist"):
        load_snapshot(store, infos[0].snapshot_id)
    with pytest.raises(ValueError, match="keep"):
        export_snapshot(store, hashing_embedder, keep=0)


def test_a_failed_export_leaves_the_published_snapshot_in_place(store, hashing_embedder, monkeypatch):
    build(store, hashing_embedder, ["d-ada", "d-babbage"])
    published = export_snapshot(store, hashing_embedder)
    build(store, hashing_embedder)
    real = SnapshotDirectory.write_file
    calls = []

    def failing(location, path, local, *args):
        calls.append(path)
        if len(calls) == 3:
            raise OSError("disk full")
        real(location, path, local, *args)

    monkeypatch.setattr(SnapshotDirectory, "write_file", failing)
    with pytest.raises(OSError, match="disk full"):
        export_snapshot(store, hashing_embedder)
    monkeypatch.setattr(SnapshotDirectory, "write_file", real)
    assert latest_snapshot(store) == published
    assert load_snapshot(store).passages.height == 2
    unfinished = [p for p in (Path(store.uri) / "snapshots").iterdir() if p.is_dir() and p.name != published.snapshot_id]
    assert len(unfinished) == 1 and not (unfinished[0] / "manifest.json").exists()
    # The next export publishes a complete snapshot and clears the unfinished one away.
    fresh = export_snapshot(store, hashing_embedder, keep=1)
    assert [s.snapshot_id for s in list_snapshots(store)] == [fresh.snapshot_id]
    assert sorted(p.name for p in (Path(store.uri) / "snapshots").iterdir() if p.is_dir()) == [fresh.snapshot_id]


def test_no_snapshot_is_a_clear_error(store, hashing_embedder):
    with pytest.raises(SnapshotError, match="no index"):
        export_snapshot(store, hashing_embedder)
    build(store, hashing_embedder, ["d-ada"])
    assert latest_snapshot(store) is None
    with pytest.raises(SnapshotError, match="no snapshot has been exported"):
        load_snapshot(store)


@pytest.mark.slow
def test_an_erased_canary_is_in_no_file_even_after_snapshots(store, hashing_embedder):
    build(store, hashing_embedder, [d for d in CORPUS if d != "d-secret"])
    export_snapshot(store, hashing_embedder)  # an older snapshot without the secret
    build(store, hashing_embedder)
    with_secret = export_snapshot(store, hashing_embedder)
    root = Path(store.uri)
    holders = [p for p in files_under(root / "snapshots") if CANARY.encode() in p.read_bytes()]
    assert holders, "the canary must be findable in a snapshot before the erase, or this test proves nothing"

    report = operations.delete(store, ["d-secret"], erase=True)

    assert report.erase["snapshots_removed"] == 1
    leaks = [str(p) for p in files_under(root) if CANARY.encode() in p.read_bytes()
             or CANARY.lower().encode() in p.read_bytes()]
    assert leaks == []
    published = latest_snapshot(store)
    assert published is not None and published.snapshot_id != with_secret.snapshot_id
    assert published.fingerprint == fingerprint(store).digest
    snap = load_snapshot(store)
    assert "d-secret" not in snap.passages.get_column("doc_id").to_list()
    assert snap.passages.height == 5


def test_erase_from_snapshots_leaves_snapshots_without_the_documents(store, hashing_embedder):
    build(store, hashing_embedder, ["d-ada", "d-babbage"])
    older = export_snapshot(store, hashing_embedder)
    build(store, hashing_embedder, ["d-ada", "d-babbage", "d-paris"])
    export_snapshot(store, hashing_embedder)
    assert erase_from_snapshots(store, ["d-paris"]) == 1  # only the newer holds it
    # The published one had to go. The store still holds d-paris (nothing was deleted here), so
    # no replacement can be made without it: nothing is published until the next export.
    assert [s.snapshot_id for s in list_snapshots(store)] == [older.snapshot_id]
    assert latest_snapshot(store) is None
    assert erase_from_snapshots(store, ["not-a-document"]) == 0


class CountingEmbedder:
    """The hashing embedder, counting the texts it embeds."""

    def __init__(self, inner) -> None:
        self.inner, self.model_id, self.dim, self.embedded = inner, inner.model_id, inner.dim, 0

    def embed(self, texts):
        self.embedded += len(texts)
        return self.inner.embed(texts)

    def embed_query(self, text):
        return self.inner.embed_query(text)


def mapped_files() -> set[str]:
    """The files this process has memory-mapped (Linux: /proc/self/maps)."""
    return {line.split(maxsplit=5)[5].strip() for line in Path("/proc/self/maps").read_text().splitlines()
            if len(line.split(maxsplit=5)) == 6}


def test_tables_and_vectors_are_memory_mapped_and_formats_1_and_2_still_load(store, hashing_embedder):
    build(store, hashing_embedder)
    info = export_snapshot(store, hashing_embedder)
    snap = load_snapshot(store)
    folder = Path(info.uri)
    assert isinstance(snap.fact_vectors, np.memmap) and snap.fact_vectors.dtype == np.float16
    assert isinstance(snap.passage_vectors, np.memmap) and snap.passage_vectors.dtype == np.float16
    # The tables are Arrow IPC files mapped, not read: their columns are the files' pages; so are
    # the graph's arrays, which the local walk reads without a copy.
    tables = ("entities", "passages", "facts", "fact_evidence")
    graph = ("graph_indptr.npy", "graph_indices.npy", "graph_weights.npy")
    assert {str(folder / f"{name}.arrow") for name in tables} | {str(folder / name) for name in graph} <= mapped_files()
    assert not snap.adjacency.indices.flags.writeable and not snap.adjacency.data.flags.writeable
    walks = walk_graph(snap)
    walk = walks.local
    assert np.shares_memory(walk.indices, snap.adjacency.indices) and np.shares_memory(walk.weights, snap.adjacency.data)
    # The exact walk's row blocks are views of the same arrays: no reordered or scaled copy of the graph.
    walks.prepare()
    products, _ = walks.exact_operator
    assert sum(block.nnz for _, block in products.blocks) == snap.adjacency.nnz
    assert all(np.shares_memory(block.indices, snap.adjacency.indices) and np.shares_memory(block.data, snap.adjacency.data)
               for _, block in products.blocks)
    rows = snap.passages[[1, 0]]
    assert snap.passage_texts([1, 0]) == [passage_text(t, x) for t, x in rows.select("title", "text").iter_rows()]
    frames = {"entities": snap.entities, "passages": snap.passages, "facts": snap.facts, "fact_evidence": snap.evidence}
    location = SnapshotDirectory(store)
    held = snap.passages.get_column("doc_id")[0]
    assert export._holds_any(location, info.snapshot_id, {held})
    assert not export._holds_any(location, info.snapshot_id, {"d-none"})

    # A format 2 snapshot (the tables in Parquet, the graph in graph.npz) is read whole, the same.
    sp.save_npz(folder / "graph.npz", sp.csr_matrix(snap.adjacency), compressed=False)
    for name in graph:
        (folder / name).unlink()
    for name in tables:
        table = ipc.open_file(pa.memory_map(str(folder / f"{name}.arrow"))).read_all()
        pq.write_table(table, folder / f"{name}.parquet")
        (folder / f"{name}.arrow").unlink()
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": 2}))
    older = load_snapshot(store)
    for name, frame in zip(tables, (older.entities, older.passages, older.facts, older.evidence), strict=True):
        assert frame.equals(frames[name]), name
    assert (older.adjacency != snap.adjacency).nnz == 0
    assert export._holds_any(location, info.snapshot_id, {held})
    assert not export._holds_any(location, info.snapshot_id, {"d-none"})

    # A format 1 snapshot (float32 vectors) is read, its vectors converted. (Written as new files:
    # the loaded snapshot maps the old ones.)
    expected = np.array(snap.fact_vectors)
    for name in ("passage_vectors.npy", "fact_vectors.npy"):
        np.save(folder / f"{name}.tmp.npy", np.load(folder / name).astype(np.float32))
        (folder / f"{name}.tmp.npy").rename(folder / name)
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": 1}))
    old = load_snapshot(store)
    assert old.passage_vectors.dtype == np.float16
    np.testing.assert_array_equal(old.fact_vectors, expected)
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": 99}))
    with pytest.raises(SnapshotError, match=r"format 99.*export a new one"):
        load_snapshot(store)


@pytest.mark.slow
def test_a_re_export_after_a_deletion_embeds_nothing_and_equals_a_fresh_export(store, hashing_embedder, tmp_path):
    from lightfoot_pipeline.store.store import Store

    build(store, hashing_embedder)
    export_snapshot(store, hashing_embedder, index_min_rows=1)
    operations.delete(store, ["d-paris"])
    counting = CountingEmbedder(hashing_embedder)
    steps = []
    after = export_snapshot(store, counting, index_min_rows=1, progress=lambda *step: steps.append(step))
    assert counting.embedded == 0 and after.counts["embedded"] == 0
    # four tables, three graph arrays, the fact index, two matrices and the facts' codes and scales
    assert ("writing the snapshot", 12, 12) in steps

    fresh_store = Store(str(tmp_path / "fresh"))
    build(fresh_store, hashing_embedder, [d for d in CORPUS if d != "d-paris"])
    export_snapshot(fresh_store, hashing_embedder, index_min_rows=1)
    reused, fresh = load_snapshot(store), load_snapshot(fresh_store)
    assert reused.facts.equals(fresh.facts) and reused.passages.equals(fresh.passages)
    np.testing.assert_array_equal(reused.fact_vectors, fresh.fact_vectors)
    np.testing.assert_array_equal(reused.passage_vectors, fresh.passage_vectors)
    np.testing.assert_array_equal(reused.fact_index.centroids, fresh.fact_index.centroids)
    np.testing.assert_array_equal(reused.fact_index.offsets, fresh.fact_index.offsets)
    assert (reused.adjacency != fresh.adjacency).nnz == 0
    # The facts' codes are mapped like the vectors, and are the codes of the stored rows.
    assert isinstance(reused.fact_codes.codes, np.memmap) and isinstance(reused.fact_codes.scales, np.memmap)
    assert {str(Path(reused.info.uri) / name) for name in (codes.CODES_FILE, codes.SCALES_FILE)} <= mapped_files()
    np.testing.assert_array_equal(reused.fact_codes.codes, codes.in_memory(reused.fact_vectors).codes)
    np.testing.assert_array_equal(reused.fact_codes.codes, fresh.fact_codes.codes)
    np.testing.assert_array_equal(reused.fact_codes.scales, fresh.fact_codes.scales)


def test_an_export_reports_its_embedding_as_progress(store, hashing_embedder):
    build(store, hashing_embedder)
    steps = []
    export_snapshot(store, CountingEmbedder(hashing_embedder), progress=lambda *step: steps.append(step))
    names = [step for step, _, _ in steps]
    assert names[:3] == ["fingerprinting the store", "fingerprinting the store", "assembling the graph"]
    order = list(dict.fromkeys(names))
    assert order.index("assembling the graph") < order.index("reading who may read") < order.index("passage vectors")
    assert names[-1] == "writing the snapshot"
    passages = [(done, total) for step, done, total in steps if step == "passage vectors"]
    assert passages[0] == (0, 6) and passages[-1] == (6, 6)
    # The published snapshot holds the store's state: kept, unless restaged (after an upgrade)
    published = latest_snapshot(store)
    assert publish_checked(store, hashing_embedder).kept
    restaged = publish_checked(store, CountingEmbedder(hashing_embedder), restage=True)
    assert restaged.staged and restaged.published and restaged.info.snapshot_id != published.snapshot_id
    assert restaged.info.fingerprint == published.fingerprint and restaged.info.counts["embedded"] == 0


def test_a_re_export_after_a_deletion_fingerprints_only_the_buckets_it_rewrote(store, hashing_embedder):
    from lightfoot_pipeline.store.store import Store

    build(store, hashing_embedder)
    export_snapshot(store, hashing_embedder)
    operations.delete(Store(store.uri), ["d-paris"])
    fresh = Store(store.uri)  # a new process: the fingerprint's cache is the store's file
    info = export_snapshot(fresh, hashing_embedder)
    assert info.fingerprint == fingerprint(Store(store.uri), use_cache=False).digest
    # The tables only the fingerprint reads are read by bucket, and only where the deletion wrote.
    assert not {"documents", "extractions", "forms", "name_links"} & set(fresh.tables_read)
    assert fresh.buckets_read.get("documents", 0) <= 1  # its bucket, unless the deletion emptied it
    assert 0 < sum(fresh.buckets_read.values()) < 16 * 4


@pytest.mark.slow
def test_an_export_made_two_rows_at_a_time_writes_the_same_files_and_leaves_no_scratch(
        store, hashing_embedder, tmp_path, monkeypatch):
    """The export's vectors are filled, assigned to groups, reordered and copied a chunk of rows
    at a time (snapshot/spill.py): with chunks and blocks of two and three rows, a first export and
    a re-export that reuses the previous snapshot's vectors write the bytes that whole-matrix
    chunks write, and the scratch folder that held the vectors is gone once each export ends."""
    from lightfoot_pipeline.snapshot import fact_index, spill
    from lightfoot_pipeline.store.store import Store

    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
    whole = Store(str(tmp_path / "whole"))
    build(store, hashing_embedder)
    build(whole, hashing_embedder)

    def vector_files(at) -> dict[str, object]:
        """The vector files' bytes, and the facts in their stored order (an Arrow IPC file's bytes
        follow how its string buffers were built, not only what they hold)."""
        folder = Path(at.uri) / "snapshots" / latest_snapshot(at).snapshot_id
        files: dict[str, object] = {name: (folder / name).read_bytes()
                                    for name in ("passage_vectors.npy", "fact_vectors.npy", "fact_index.npz",
                                                 codes.CODES_FILE, codes.SCALES_FILE)}
        facts = ipc.open_file(pa.memory_map(str(folder / "facts.arrow"))).read_all()
        return {**files, "facts.arrow": facts.to_pylist()}

    export_snapshot(whole, hashing_embedder, index_min_rows=1)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 2)
    monkeypatch.setattr(spill, "GATHER_ROWS", 2)
    monkeypatch.setattr(fact_index, "BLOCK_ROWS", 3)
    export_snapshot(store, hashing_embedder, index_min_rows=1)
    assert vector_files(store) == vector_files(whole)
    assert load_snapshot(store).fact_vectors.shape[0] > 2 * spill.CHUNK_ROWS  # more than one chunk each

    operations.delete(store, ["d-paris"])  # the re-export takes most vectors from the previous snapshot
    operations.delete(whole, ["d-paris"])
    export_snapshot(store, CountingEmbedder(hashing_embedder), index_min_rows=1)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 1 << 20)
    monkeypatch.setattr(spill, "GATHER_ROWS", 1 << 20)
    export_snapshot(whole, hashing_embedder, index_min_rows=1)
    assert vector_files(store) == vector_files(whole)
    assert not [p.name for p in scratch_root.iterdir() if p.name.startswith("lightfoot-export-")]


def test_an_export_holds_its_assembled_tables_as_mapped_files_and_copies_them(store, hashing_embedder, tmp_path,
                                                                             monkeypatch):
    """Once assembled, the node tables and the graph leave the export's memory for files of its
    scratch folder (spill.py): while it embeds, the tables are mappings of those files, and the
    snapshot's files are copies of them."""
    build(store, hashing_embedder)
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
    seen: dict[str, set[str]] = {}

    def progress(step, done, total):
        if step == "passage vectors" and not seen:
            folder = next(p for p in scratch_root.iterdir() if p.name.startswith("lightfoot-export-"))
            seen["scratch"] = {p.name for p in folder.iterdir()}
            seen["mapped"] = {Path(line).name for line in mapped_files() if line.startswith(str(folder))}

    info = export_snapshot(store, hashing_embedder, progress=progress, index_min_rows=1)
    tables = {"entities.arrow", "passages.arrow", "facts.arrow", "fact_evidence.arrow"}
    assert tables <= seen["mapped"]  # facts by id until the index orders them
    assert tables | {f"graph_{name}.npy" for name in ("indptr", "indices", "weights")} <= seen["scratch"]
    snapshot = load_snapshot(store, info.snapshot_id)
    assert snapshot.fact_index is not None  # the facts were written again, in group order
    folder = Path(info.uri)
    for name in tables:  # one record batch each: a served table is one piece
        assert ipc.open_file(pa.memory_map(str(folder / name))).num_record_batches <= 1
    assert snapshot.entities.height == info.counts["entities"] and snapshot.adjacency.nnz == info.counts["stored_entries"]
    assert not [p.name for p in scratch_root.iterdir() if p.name.startswith("lightfoot-export-")]


def _advised_random(path: Path) -> bool:
    """Whether this process maps ``path`` with the kernel told to read it at random (smaps' ``rr``)."""
    entries = Path("/proc/self/smaps").read_text().split("\n")
    flags = []
    for i, line in enumerate(entries):
        if line.rstrip().endswith(str(path)):
            flags += [e for e in entries[i + 1:i + 40] if e.startswith("VmFlags:")][:1]
    assert flags, f"{path} is not mapped"
    return all("rr" in f.split() for f in flags)


def test_a_replica_reads_the_float16_fact_rows_at_random_when_it_has_their_codes(store, hashing_embedder):
    """Read at random, a mapping brings in the pages of the rows read, not their neighbours': a
    replica re-scores a few float16 rows spread over the file."""
    build(store, hashing_embedder)
    coded = load_snapshot(store, export_snapshot(store, hashing_embedder, index_min_rows=1).snapshot_id)
    assert coded.fact_codes is not None
    assert _advised_random(Path(coded.info.uri) / "fact_vectors.npy")
    assert not _advised_random(Path(coded.info.uri) / "passage_vectors.npy")  # scored whole, in order
    operations.delete(store, ["d-paris"])
    plain = load_snapshot(store, export_snapshot(store, hashing_embedder).snapshot_id)  # no index, no codes
    assert plain.fact_codes is None and not _advised_random(Path(plain.info.uri) / "fact_vectors.npy")


def test_release_lets_go_of_a_mapping_s_pages_and_keeps_its_rows(tmp_path):
    from lightfoot_pipeline.snapshot import spill

    written = spill.new_matrix(tmp_path / "m.npy", 4096, 384)
    written[:] = np.arange(4096, dtype=np.float16)[:, None]
    spill.release(written)  # flushed first: the rows are in the file
    del written
    mapped = spill.opened(tmp_path / "m.npy")
    np.testing.assert_array_equal(mapped[:, 0], np.arange(4096, dtype=np.float16))

    def resident_kb(path: Path) -> int:  # this process's resident pages of the file's mapping
        smaps = Path("/proc/self/smaps").read_text().split("\n")
        at = next(i for i, line in enumerate(smaps) if line.endswith(str(path)))
        return int(next(line.split()[1] for line in smaps[at:] if line.startswith("Rss:")))

    assert resident_kb(tmp_path / "m.npy") >= 3 * 1024  # 3 MB of the 3 MB read just now
    spill.release(mapped)
    assert resident_kb(tmp_path / "m.npy") == 0
    np.testing.assert_array_equal(mapped[:, 0], np.arange(4096, dtype=np.float16))  # read again from the file
    spill.release(np.ones(3))  # an array in memory is left as it is
