"""A commit appends to a read bucket that only grew, and rewrites one that lost or changed a row.

What is stored is the staged rows either way; the difference is how many files a bucket is made
of, which stays within MAX_FILES_PER_BUCKET. A commit writes first, alone, the same table as any
other commit that changes it.
"""

from __future__ import annotations

import polars as pl
import pytest

from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENTS, bucket_changes, with_buckets
from lightfoot_pipeline.store.write_plan import HEAVY_WRITE_ROWS, MAX_FILES_PER_BUCKET, WriteOrder, write_order

SCHEMA = pl.from_arrow(DOCUMENTS.schema.empty_table()).schema


def documents(*ids: str, title: str = "t") -> pl.DataFrame:
    frame = pl.DataFrame({"doc_id": list(ids), "title": title, "source": "s", "content_hash": "h",
                          "n_passages": 1, "retention_until": None}, schema=SCHEMA)
    return with_buckets(frame, DOCUMENTS, 1)


def stored(store: Store) -> list[tuple]:
    return sorted(Store(store.uri).read(DOCUMENTS.name).drop("bucket").rows())


def files(store: Store) -> int:
    reader = Store(store.uri)
    return reader.files_per_bucket(DOCUMENTS.name, reader.manifest())[0]


def test_bucket_changes_finds_the_rows_a_bucket_only_gained():
    old = documents("a", "b")
    new = pl.concat([old, documents("c")])
    changed, added = bucket_changes(old, new, DOCUMENTS)
    assert changed == {0} and added.get_column("doc_id").to_list() == ["c"]
    # A changed row: the bucket did not only grow, nothing is offered for appending.
    changed, added = bucket_changes(old, pl.concat([documents("a"), documents("b", title="u"), documents("c")]),
                                    DOCUMENTS)
    assert changed == {0} and added.height == 0
    # A row staged twice: the count gives it away, so the bucket is rewritten, not appended to.
    changed, added = bucket_changes(old, pl.concat([old, documents("a")]), DOCUMENTS)
    assert changed == {0} and added.height == 0
    assert bucket_changes(old, old.reverse(), DOCUMENTS)[0] == set()


def test_a_read_bucket_that_only_grew_is_appended_to_and_one_that_changed_is_rewritten(tmp_path):
    store = Store(str(tmp_path / "store"), n_buckets=1)
    with store.transaction() as tx:
        tx.update(DOCUMENTS.name, add=documents("a", "b"))
        tx.commit("seed")
    assert files(store) == 1
    with Store(store.uri).transaction() as tx:
        assert tx.rows(DOCUMENTS.name, "doc_id", ["a"]).height == 1  # the bucket is read
        tx.update(DOCUMENTS.name, add=documents("c"))
        plan = tx._plan()[DOCUMENTS.name]
        assert plan.rewrite == [] and plan.append == [0] and plan.added.get_column("doc_id").to_list() == ["c"]
        tx.commit("grow")
    assert files(store) == 2
    assert [r[0] for r in stored(store)] == ["a", "b", "c"]
    with Store(store.uri).transaction() as tx:
        tx.rows(DOCUMENTS.name, "doc_id", ["b"])
        tx.update(DOCUMENTS.name, remove=pl.col("doc_id") == "b", add=documents("b", title="u"))
        assert tx._plan()[DOCUMENTS.name].rewrite == [0]
        tx.commit("change")
    assert files(store) == 1
    assert stored(store) == sorted(documents("a", "c").drop("bucket").rows() + documents("b", title="u").drop("bucket").rows())


@pytest.mark.slow
def test_a_read_bucket_grown_again_and_again_stays_within_the_file_bound(tmp_path):
    store = Store(str(tmp_path / "store"), n_buckets=1)
    counts = []
    for i in range(2 * MAX_FILES_PER_BUCKET):
        with Store(store.uri).transaction() as tx:
            tx.rows(DOCUMENTS.name, "doc_id", [f"d{i}"])
            tx.update(DOCUMENTS.name, add=documents(f"d{i}"))
            tx.commit(f"add {i}")
        counts.append(files(store))
    assert max(counts) == MAX_FILES_PER_BUCKET - 1 and counts.count(1) >= 2
    assert [r[0] for r in stored(store)] == sorted(f"d{i}" for i in range(2 * MAX_FILES_PER_BUCKET))


def test_net_changes_cancel_a_row_removed_and_added_again_and_count_copies():
    from lightfoot_pipeline.store.tables import net_changes

    a, b = documents("a"), documents("b")
    assert net_changes(a, a, DOCUMENTS)[0] == set()  # recomputed to the same values
    changed, shrunk, gained = net_changes(DOCUMENTS.empty(), pl.concat([b, b]), DOCUMENTS)
    assert changed == {0} and shrunk == set() and gained.height == 2  # added twice is added twice
    # Removed once and added twice: its bucket is rewritten rather than sorted out copy by copy.
    changed, shrunk, gained = net_changes(a, pl.concat([a, a]), DOCUMENTS)
    assert changed == shrunk == {0} and gained.height == 0
    changed, shrunk, _ = net_changes(a, documents("a", title="u"), DOCUMENTS)
    assert changed == shrunk == {0}


def test_a_transaction_that_recomputes_rows_to_the_same_values_writes_nothing(tmp_path):
    store = Store(str(tmp_path / "store"), n_buckets=1)
    with store.transaction() as tx:
        tx.update(DOCUMENTS.name, add=documents("a", "b"))
        tx.commit("seed")
    with Store(store.uri).transaction() as tx:
        tx.rows(DOCUMENTS.name, "doc_id", ["a", "b"])
        tx.update(DOCUMENTS.name, remove=pl.col("doc_id").is_in(["a", "b"]), add=documents("a", "b"))
        tx.update(DOCUMENTS.name, add=documents("z"))
        tx.update(DOCUMENTS.name, remove=pl.col("doc_id") == "z")  # added and removed again
        assert tx.pending() == {}


def test_a_lookup_of_values_held_in_nearly_every_bucket_reads_them_without_the_column(tmp_path):
    from lightfoot_pipeline.store.tables import PROBE_EVERY

    ids = [f"d{i}" for i in range(640)]
    store = Store(str(tmp_path / "store"), n_buckets=64)
    with store.transaction() as tx:
        tx.update(DOCUMENTS.name, add=with_buckets(documents(*ids).drop("bucket"), DOCUMENTS, 64))
        tx.commit("seed")
    dense = Store(store.uri)
    with dense.transaction() as tx:
        assert tx.rows(DOCUMENTS.name, "doc_id", [*ids[::3], "new-1"]).height == len(ids[::3])
        assert tx.rows(DOCUMENTS.name, "doc_id", ids[1::3]).height == len(ids[1::3])
    assert dense.columns_read.get(DOCUMENTS.name, 0) == 0 and dense.buckets_read[DOCUMENTS.name] == 64
    # Values the table mostly lacks: after the probe, the column is read once, for both lookups.
    sparse = Store(store.uri)
    wanted = [f"new-{i}" for i in range(300)] + ["d7"]
    with sparse.transaction() as tx:
        assert tx.rows(DOCUMENTS.name, "doc_id", wanted).height == 1
        assert tx.rows(DOCUMENTS.name, "doc_id", wanted[100:]).height == 1
    assert sparse.columns_read[DOCUMENTS.name] == 1
    assert sparse.buckets_read[DOCUMENTS.name] <= -(-64 // PROBE_EVERY) + 1


def test_the_first_table_written_is_fixed_by_name_and_the_heavy_ones_go_in_turn():
    # Whatever the sizes, documents comes first of the tables a batch changes; a graph commit
    # starts on the earliest of its tables; tables outside the index come after them, by name.
    assert write_order({"passages": 1, "documents": 500, "forms": 90, "facts": 700}) == \
        WriteOrder("documents", [], ["facts", "forms", "passages"])
    assert write_order({"facts": 3, "entities": 10, "forms": 10_000, "aliases": 10}) == \
        WriteOrder("forms", [], ["aliases", "entities", "facts"])
    assert write_order({"tombstones": 1, "graph_queue": 2, "entities": 0}).first == "entities"
    assert write_order({"tombstones": 5, "graph_queue": 2}) == WriteOrder("graph_queue", [], ["tombstones"])
    assert write_order({}) == WriteOrder(None, [], [])
    # Writes of more than HEAVY_WRITE_ROWS rows go one after another, largest first, beside the rest.
    heavy = HEAVY_WRITE_ROWS + 1
    assert write_order({"documents": 2 * heavy, "aliases": heavy, "entities": 3 * heavy, "facts": 7, "forms": 9}) == \
        WriteOrder("documents", ["entities", "aliases"], ["forms", "facts"])


def test_a_rewrite_removes_and_adds_rows_counted_by_their_hash():
    from lightfoot_pipeline.store.write_plan import rewritten

    committed = pl.concat([documents("a", "b", "c"), documents("b")])  # "b" held twice
    removed = pl.concat([documents("b"), documents("c")])
    added = pl.concat([documents("c"), documents("d", title="u")])  # "c" removed and added again
    rows = sorted(rewritten(committed, removed, added, DOCUMENTS).select("doc_id", "title").rows())
    assert rows == [("a", "t"), ("b", "t"), ("c", "t"), ("d", "u")]
    assert rewritten(committed, removed.clear(), added, DOCUMENTS).height == 6


def test_rows_looked_up_past_what_is_kept_are_read_alone_on_an_object_store(object_store, monkeypatch):
    from lightfoot_pipeline.store import transaction

    monkeypatch.setattr(transaction, "KEPT_ROWS", 0)  # every lookup scans for its rows alone
    monkeypatch.setattr(transaction, "REWRITE_ROWS", 5)
    ids = [f"d{i}" for i in range(40)]
    store = Store(object_store.uri("rows"), n_buckets=8)
    with store.transaction() as tx:
        tx.update(DOCUMENTS.name, add=with_buckets(documents(*ids).drop("bucket"), DOCUMENTS, 8))
        tx.commit("seed")
    reader = Store(store.uri)
    with reader.transaction() as tx:
        assert sorted(tx.rows(DOCUMENTS.name, "doc_id", ["d1", "d2", "nope"]).get_column("doc_id").to_list()) == ["d1", "d2"]
        assert tx.staged(DOCUMENTS.name).height == 2  # the rows found, not their buckets
        tx.rows(DOCUMENTS.name, "doc_id", ids[::2])
        tx.update(DOCUMENTS.name, remove=pl.col("doc_id").is_in(ids[::2]),
                  add=with_buckets(documents("d0", title="u").drop("bucket"), DOCUMENTS, 8))
        tx.commit("drop half")
    assert sorted(Store(store.uri).read(DOCUMENTS.name).select("doc_id", "title").rows()) == sorted(
        [("d0", "u"), *((d, "t") for d in ids[1::2])])
