"""Writers racing on one store on an S3-compatible server lose no commit and no row.

On an object store nothing serialises writers inside the engine (that is the orchestrator's
pool), so these tests let two writers run into each other on purpose: both pass the store's
"nobody committed since I read" check, then both write. Exactly one commit may win; the other
must fail with ConcurrentCommitError (never succeed over the winner), and running it again must
bring its rows in.
"""

from __future__ import annotations

import random
import threading
import time

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.index.documents import upsert_documents
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.log import ConcurrentCommitError
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENTS, PASSAGES, with_buckets
from lightfoot_pipeline.store.transaction import Transaction

SETTINGS = IndexSettings()


def doc(doc_id: str) -> Document:
    return Document(doc_id=doc_id, title=f"Title of {doc_id}", text=f"The text of {doc_id}, which is short.")


def add_documents(store: Store, doc_ids: list[str]) -> int:
    """Stage documents and their passages through the document stage, and commit."""
    with store.transaction() as tx:
        upsert_documents(tx, [doc(d) for d in doc_ids], SETTINGS)
        return tx.commit("ingest").seq


def race(writers: list, attempts: int = 1) -> list[object]:
    """Run the writers at once; each result is its return value or the exception it raised."""
    results: list[object] = [None] * len(writers)

    def run(i: int) -> None:
        try:
            results[i] = writers[i]()
        except Exception as err:
            results[i] = err

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(writers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return results


def gate_once(monkeypatch, owner, attribute: str, parties: int, when=lambda *args: True) -> threading.Barrier:
    """Make the first ``parties`` calls of ``owner.attribute`` (where ``when`` holds) wait for each other."""
    barrier = threading.Barrier(parties, timeout=60)
    original = getattr(owner, attribute)
    passed = {"n": 0}
    lock = threading.Lock()

    def gated(*args, **kwargs):
        if when(*args):
            with lock:
                wait = passed["n"] < parties
                passed["n"] += 1
            if wait:
                barrier.wait()
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, attribute, gated)
    return barrier


def documents_of(store: Store) -> list[str]:
    return sorted(store.read(DOCUMENTS.name).get_column("doc_id").to_list())


def assert_log_is_a_sequence(store: Store) -> None:
    seqs = store.history().get_column("seq").to_list()
    assert seqs == list(range(1, len(seqs) + 1)), f"store log seqs {seqs}: a seq was committed twice"


@pytest.mark.parametrize("table_exists", [False, True], ids=["new-table", "existing-table"])
def test_two_writers_on_the_same_table_one_wins_and_the_retry_loses_no_row(object_store, monkeypatch, table_exists):
    store = Store(object_store.uri("race"))
    before = ["d-0"] if table_exists else []
    if before:
        add_documents(store, before)
    # Both writers pass the seq check, then write the documents table on top of the same version.
    gate_once(monkeypatch, Transaction, "_write_table", 2, when=lambda tx, spec, *rest: spec.name == DOCUMENTS.name)

    results = race([lambda: add_documents(Store(store.uri), ["d-a"]),
                    lambda: add_documents(Store(store.uri), ["d-b"])])

    failed = [r for r in results if isinstance(r, Exception)]
    assert len(failed) == 1 and isinstance(failed[0], ConcurrentCommitError), results
    winner = "d-a" if isinstance(results[0], int) else "d-b"
    loser = "d-b" if winner == "d-a" else "d-a"
    assert documents_of(store) == sorted([*before, winner])
    add_documents(store, [loser])  # what an orchestrator's retry does
    assert documents_of(store) == sorted([*before, "d-a", "d-b"])
    assert_log_is_a_sequence(store)


def test_two_writers_on_different_tables_cannot_both_commit_the_next_seq(object_store, monkeypatch):
    store = Store(object_store.uri("race"))
    add_documents(store, ["d-0"])
    # Both writers pass the seq check and write their tables; then both append the store log.
    gate_once(monkeypatch, Transaction, "_append_log", 2)

    def stage(table: str, doc_id: str):
        def write() -> int:
            with Store(store.uri).transaction() as tx:
                rows = pl.DataFrame([{"doc_id": doc_id, "title": "t", "source": "", "content_hash": doc_id,
                                      "n_passages": 1, "retention_until": None}] if table == DOCUMENTS.name else
                                    [{"chunk_id": f"{doc_id}#0", "doc_id": doc_id, "ordinal": 0, "title": "t",
                                      "text": "x", "text_hash": doc_id}])
                spec = DOCUMENTS if table == DOCUMENTS.name else PASSAGES
                current = tx.table(spec.name)
                tx.put(spec.name, pl.concat([current, with_buckets(rows, spec, tx.n_buckets).cast(current.schema)]))
                return tx.commit(f"write {table}").seq
        return write

    results = race([stage(DOCUMENTS.name, "d-a"), stage(PASSAGES.name, "d-b")])

    failed = [r for r in results if isinstance(r, Exception)]
    assert len(failed) == 1 and isinstance(failed[0], ConcurrentCommitError), results
    assert [r for r in results if isinstance(r, int)] == [2]
    assert_log_is_a_sequence(store)
    # The loser's table write reached storage but not the log: readers do not see it.
    loser_table = PASSAGES.name if isinstance(results[0], int) else DOCUMENTS.name
    loser_rows = store.read(loser_table).filter(pl.col("doc_id") == ("d-b" if loser_table == PASSAGES.name else "d-a"))
    assert loser_rows.height == 0
    # The next writer undoes it, and running the loser again commits it.
    retry = stage(loser_table, "d-b" if loser_table == PASSAGES.name else "d-a")
    assert retry() == 3
    assert store.read(DOCUMENTS.name).filter(pl.col("doc_id") == "d-a").height == 1
    assert store.read(PASSAGES.name).filter(pl.col("doc_id") == "d-b").height == 1
    assert_log_is_a_sequence(store)


def test_two_writers_of_different_sizes_on_the_same_tables_one_wins(object_store, monkeypatch):
    """Writers that change the same tables start on the same table, whatever their sizes. Here one
    adds a row to documents and three to passages, the other three to documents and one to
    passages, so each one's smallest write is a different table. Both pass the seq check and start
    writing at once: exactly one must lose, at its first write, and the other commit."""
    store = Store(object_store.uri("race"))
    add_documents(store, ["d-0"])
    gate_once(monkeypatch, Transaction, "_write_table", 2)  # the first write of each, at once

    def stage(doc_ids: list[str], chunk_ids: list[str]):
        def write() -> int:
            with Store(store.uri).transaction() as tx:
                documents = pl.DataFrame([{"doc_id": d, "title": "t", "source": "", "content_hash": d,
                                           "n_passages": 1, "retention_until": None} for d in doc_ids])
                passages = pl.DataFrame([{"chunk_id": c, "doc_id": c.split("#")[0], "ordinal": 0, "title": "t",
                                          "text": "x", "text_hash": c} for c in chunk_ids])
                for spec, rows in ((DOCUMENTS, documents), (PASSAGES, passages)):
                    current = tx.table(spec.name)
                    tx.put(spec.name, pl.concat([current, with_buckets(rows, spec, tx.n_buckets).cast(current.schema)]))
                return tx.commit("ingest").seq
        return write

    first = (["d-a"], ["d-a#0", "d-a#1", "d-a#2"])
    second = (["d-b", "d-c", "d-d"], ["d-b#0"])
    results = race([stage(*first), stage(*second)])

    failed = [r for r in results if isinstance(r, Exception)]
    assert len(failed) == 1 and isinstance(failed[0], ConcurrentCommitError), results
    assert [r for r in results if isinstance(r, int)] == [2]
    assert_log_is_a_sequence(store)
    won = first if isinstance(results[0], int) else second
    assert documents_of(store) == sorted(["d-0", *won[0]])
    passages = store.read(PASSAGES.name).filter(pl.col("doc_id") != "d-0")
    assert sorted(passages.get_column("chunk_id").to_list()) == sorted(won[1])


@pytest.mark.parametrize("where", ["local", "s3"])
def test_racing_ingests_lose_no_document(where, object_store, tmp_path, sample_documents, sample_records,
                                         hashing_embedder):
    """Two ingests of different documents at once, each run again on a conflict as an
    orchestrator would: the store ends up holding both, identical to one ingest of all of them."""
    uri = object_store.uri("ingests") if where == "s3" else str(tmp_path / "store")
    slices = [sample_documents[0:12], sample_documents[12:24]]
    extractor = ReplayExtractor(sample_records)
    start = threading.Barrier(len(slices), timeout=60)
    conflicts: list[list[str]] = [[] for _ in slices]

    def writer(i: int):
        def run():
            start.wait()
            for attempt in range(10):
                try:
                    return operations.ingest(Store(uri), slices[i], extractor, hashing_embedder, SETTINGS).seq
                except ConcurrentCommitError as lost:
                    conflicts[i].append(f"{time.monotonic():.3f} {lost}")
                    # Random pauses that grow, as an orchestrator's retries do; every conflict is
                    # kept with its reason, for the failure message.
                    time.sleep(random.uniform(0.05, 0.5) * 2 ** min(attempt, 4))
            raise AssertionError(f"writer {i} kept conflicting: " + "; ".join(conflicts[i]))
        return run

    results = race([writer(i) for i in range(len(slices))])

    assert all(isinstance(r, int) for r in results), results
    store = Store(uri)
    assert documents_of(store) == sorted(d.doc_id for part in slices for d in part)
    assert_log_is_a_sequence(store)
    if where == "local":
        assert conflicts == [[], []], "the local writer lock serialises writers"
    fresh = Store(str(tmp_path / "fresh"))
    operations.ingest(fresh, [d for part in slices for d in part], extractor, hashing_embedder, SETTINGS)
    assert fingerprint(store).digest == fingerprint(fresh).digest


def test_two_writers_creating_the_same_vector_cache_both_store_their_vectors(object_store, monkeypatch,
                                                                             hashing_embedder):
    """Both writers list the LanceDB tables before either creates the cache; both must then add
    their vectors to the one table (the loser of the creation opens the winner's)."""
    import lightfoot_pipeline.store.vectors as vectors

    store = Store(object_store.uri("vectors"))
    listed = threading.Barrier(2, timeout=60)
    real = vectors.lance_table_names
    first_call = threading.local()

    def listing_before_either_creates(db):
        names = real(db)
        if not getattr(first_call, "done", False):
            first_call.done = True
            listed.wait()
        return names

    monkeypatch.setattr(vectors, "lance_table_names", listing_before_either_creates)
    texts = [["alpha", "beta"], ["gamma", "delta"]]

    def writer(i: int):
        return lambda: vectors.VectorCache(Store(store.uri), "name", hashing_embedder).vectors(texts[i]).shape

    results = race([writer(0), writer(1)])

    assert results == [(2, hashing_embedder.dim)] * 2, results
    monkeypatch.setattr(vectors, "lance_table_names", real)
    cache = vectors.VectorCache(store, "name", hashing_embedder)
    stored = cache.stored_vectors(["alpha", "beta", "gamma", "delta"])
    assert all(v is not None for v in stored)
