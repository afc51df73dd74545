"""Transactions read only the buckets of what they touch; the layout is recorded and migrates.

A one-document deletion or ingest on a built store reads the buckets of that document, its names,
their entities and facts, and no whole table but the (empty) graph queue and, for an ingest, the
names' band keys; what it leaves is still what a fresh build of the survivors gives.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.cli import main as cli_main
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.log import StoreLayoutError
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    BUCKET,
    DOCUMENTS,
    FORMS,
    INDEX_TABLES,
    LAYOUT_VERSION,
    PROBE_EVERY,
    all_specs,
    bucket_of,
    with_buckets,
)
from lightfoot_pipeline.store.transaction import Transaction

EMBEDDER = HashingEmbedder(dim=32)
BUCKETS = 64


@pytest.fixture(scope="module")
def built(tmp_path_factory, names_corpus):
    documents, records = names_corpus(160)
    root = tmp_path_factory.mktemp("buckets")
    store = Store(str(root / "store"), n_buckets=BUCKETS)
    operations.ingest(store, documents[:150], ReplayExtractor(records), EMBEDDER)
    return root, store.uri, documents, records


def _copy(root, uri: str, name: str) -> str:
    import shutil

    target = root / name
    shutil.copytree(uri, target)
    return str(target)


def _fresh_fingerprint(root, documents, records, live: set[str]) -> str:
    fresh = Store(str(root / f"fresh-{len(live)}-{random.random():.6f}"), n_buckets=8)
    operations.ingest(fresh, [d for d in documents if d.doc_id in live], ReplayExtractor(records), EMBEDDER)
    return fingerprint(fresh).digest


@pytest.mark.slow
def test_a_one_document_deletion_reads_only_the_buckets_it_touches(built):
    root, uri, documents, records = built
    uri = _copy(root, uri, "delete-one")
    doomed = documents[7].doc_id
    before = Store(uri)
    forms = before.read(FORMS.name).filter(pl.col("doc_id") == doomed)
    rows_before = sum(before.read(spec.name).height for spec in INDEX_TABLES)

    store = Store(uri)
    operations.delete(store, [doomed])

    assert set(store.tables_read) <= {"graph_queue"}  # no index table is read whole
    for name in ("documents", "passages", "extractions", "document_keys"):
        assert store.buckets_read[name] == 1
    name_buckets = {bucket_of(n, BUCKETS) for n in forms.get_column("name").to_list()}
    assert store.buckets_read[FORMS.name] == len(name_buckets)
    assert sum(store.buckets_read.values()) < BUCKETS * len(INDEX_TABLES) / 2
    assert sum(store.rows_read.values()) < rows_before / 3
    written = store.manifest().details["buckets_written"]
    assert all(written[name] <= store.buckets_read.get(name, 0) for name in written if name != "tombstones")

    live = {d.doc_id for d in documents[:150]} - {doomed}
    assert fingerprint(Store(uri)).digest == _fresh_fingerprint(root, documents, records, live)


@pytest.mark.slow
def test_a_one_document_ingest_reads_only_its_buckets_and_the_band_keys(built):
    root, uri, documents, records = built
    uri = _copy(root, uri, "ingest-one")
    store = Store(uri)
    report = operations.ingest(store, [documents[155]], ReplayExtractor(records), EMBEDDER)

    assert report.ingested == 1
    assert set(store.tables_read) <= {"graph_queue", "name_sketches"}
    assert store.buckets_read["documents"] == 1
    assert sum(store.rows_read.values()) < sum(Store(uri).read(s.name).height for s in INDEX_TABLES) / 3
    live = {d.doc_id for d in documents[:150]} | {documents[155].doc_id}
    assert fingerprint(Store(uri)).digest == _fresh_fingerprint(root, documents, records, live)


@pytest.mark.slow
def test_a_batch_of_new_documents_reads_none_of_their_buckets_and_appends_its_rows(built, names_corpus):
    """Sixty new documents land in most of the 64 buckets: the store reads a probe of one bucket in
    PROBE_EVERY, finds none of them there, so reads the doc_id column once instead of the rest,
    finds none of them, and appends their rows to the buckets it never read."""
    root, uri, documents, records = built
    uri = _copy(root, uri, "ingest-batch")
    more, more_records = names_corpus(60, seed=5)
    more = [dataclasses.replace(d, doc_id="new-" + d.doc_id) for d in more]
    more_records = {"new-" + k: {**r, "doc_id": "new-" + k} for k, r in more_records.items()}
    store = Store(uri)
    report = operations.ingest(store, more, ReplayExtractor(more_records), EMBEDDER)

    assert report.ingested == 60
    probe = -(-BUCKETS // PROBE_EVERY)
    for name in ("documents", "passages", "extractions", "document_keys"):
        assert store.buckets_read.get(name, 0) <= probe, name
        assert store.columns_read.get(name, 0) >= 1, name
    assert Store(uri).read(DOCUMENTS.name).height == 210
    every, every_records = [*documents[:150], *more], {**records, **more_records}
    live = {d.doc_id for d in every}
    assert fingerprint(Store(uri)).digest == _fresh_fingerprint(root, every, every_records, live)


def test_rows_added_to_an_unread_bucket_keep_the_rows_already_there(tmp_path):
    store = Store(str(tmp_path / "store"), n_buckets=4)
    rows = pl.DataFrame({"doc_id": [f"d{i}" for i in range(40)], "title": "t", "source": "s", "content_hash": "h",
                         "n_passages": 1, "retention_until": None},
                        schema=pl.from_arrow(DOCUMENTS.schema.empty_table()).schema)
    with store.transaction() as tx:
        tx.update(DOCUMENTS.name, add=with_buckets(rows, DOCUMENTS, tx.n_buckets))
        tx.commit("seed")
    extra = with_buckets(rows.head(1).with_columns(pl.lit("d-new").alias("doc_id")), DOCUMENTS, 4)
    adding = Store(store.uri)
    with adding.transaction() as tx:
        tx.update(DOCUMENTS.name, add=extra)  # nothing read: the row is appended to its bucket
        assert tx.loaded(DOCUMENTS.name) == set()
        assert tx.pending() == {DOCUMENTS.name: [extra.get_column(BUCKET).item()]}
        tx.commit("add one")
        assert tx.staged(DOCUMENTS.name).height == 0  # what was appended is stored, not held
    assert adding.buckets_read.get(DOCUMENTS.name, 0) == 0 and not adding.tables_read
    stored = Store(store.uri).read(DOCUMENTS.name)
    assert stored.height == 41 and stored.filter(pl.col("doc_id") == "d-new").height == 1
    # Read afterwards, the bucket holds its earlier rows and the appended one, once each.
    with Store(store.uri).transaction() as tx:
        assert tx.rows(DOCUMENTS.name, "doc_id", ["d-new", "d0"]).height == 2
        tx.update(DOCUMENTS.name, remove=pl.col("doc_id") == "d0")
        tx.commit("remove one")
    assert sorted(Store(store.uri).read(DOCUMENTS.name).get_column("doc_id").to_list()) == sorted(
        [f"d{i}" for i in range(1, 40)] + ["d-new"])
    # A whole-table read after an add holds the stored rows and the added one.
    with Store(store.uri).transaction() as tx:
        tx.update(DOCUMENTS.name, add=extra.with_columns(pl.lit("d-later").alias("doc_id")))
        assert tx.table(DOCUMENTS.name).height == 41 and tx.count(DOCUMENTS.name) == 41


@pytest.mark.slow
def test_appends_never_leave_a_bucket_in_more_files_than_the_bound(tmp_path):
    from lightfoot_pipeline.store.write_plan import MAX_FILES_PER_BUCKET

    store = Store(str(tmp_path / "store"), n_buckets=1)
    schema = pl.from_arrow(DOCUMENTS.schema.empty_table()).schema
    for i in range(3 * MAX_FILES_PER_BUCKET):
        row = pl.DataFrame({"doc_id": [f"d{i}"], "title": "t", "source": "s", "content_hash": "h", "n_passages": 1,
                            "retention_until": None}, schema=schema)
        writer = Store(store.uri)
        with writer.transaction() as tx:
            tx.update(DOCUMENTS.name, add=with_buckets(row, DOCUMENTS, 1))
            tx.commit(f"add {i}")
        files = writer.files_per_bucket(DOCUMENTS.name, writer.manifest())
        assert 1 <= files[0] <= MAX_FILES_PER_BUCKET
    assert sorted(Store(store.uri).read(DOCUMENTS.name).get_column("doc_id").to_list()) == sorted(
        f"d{i}" for i in range(3 * MAX_FILES_PER_BUCKET))


def test_a_removal_mask_of_the_wrong_length_is_refused(tmp_path):
    store = Store(str(tmp_path / "store"))
    with store.transaction() as tx:
        tx.rows(DOCUMENTS.name, "doc_id", ["x"])
        with pytest.raises(ValueError, match="removal mask over 3 rows"):
            tx.update(DOCUMENTS.name, remove=pl.Series([True, False, True]))
        with pytest.raises(ValueError, match="bucketed by 'doc_id'"):
            tx.rows(DOCUMENTS.name, "title", ["x"])


def _as_earlier_layout(uri: str) -> None:
    """Append a log row without the layout, as stores written before it was recorded have."""
    store = Store(uri)
    manifest = store.manifest()
    details = {k: v for k, v in manifest.details.items() if k not in ("layout", "rows")}
    Transaction(store, manifest)._append_log(manifest.seq + 1, "earlier", dict(manifest.versions), details,
                                             read_at=manifest.log_version)


@pytest.mark.slow
def test_an_earlier_layout_is_refused_until_migrate_rewrites_it(built, capsys):
    root, uri, documents, records = built
    uri = _copy(root, uri, "earlier")
    digest = fingerprint(Store(uri)).digest
    _as_earlier_layout(uri)

    with pytest.raises(StoreLayoutError, match="layout of an earlier version") as refused:
        operations.delete(Store(uri), [documents[0].doc_id])
    assert f"lightfoot migrate --store {uri}" in refused.value.line()
    assert fingerprint(Store(uri)).digest == digest  # readers still read it

    assert cli_main(["migrate", "--store", uri, "--buckets", "16", "--json"]) == 0
    assert '"n_buckets": 16' in capsys.readouterr().out
    migrated = Store(uri)
    assert migrated.manifest().details["layout"] == {"version": LAYOUT_VERSION, "n_buckets": 16}
    assert fingerprint(migrated).digest == digest
    for spec in all_specs():
        if spec.name in migrated.manifest().versions:
            frame = migrated.read(spec.name)
            expected = [bucket_of(v, 16) for v in frame.get_column(spec.bucket_by).to_list()]
            assert frame.get_column(BUCKET).to_list() == expected, spec.name

    operations.delete(Store(uri), [documents[0].doc_id])
    live = {d.doc_id for d in documents[:150]} - {documents[0].doc_id}
    assert fingerprint(Store(uri)).digest == _fresh_fingerprint(root, documents, records, live)


def test_migrate_refuses_a_store_that_does_not_exist(tmp_path, capsys):
    assert cli_main(["migrate", "--store", str(tmp_path / "none")]) == 2
    assert "no store at" in capsys.readouterr().err
    # A batch size only means something with --pieces, and is never negative.
    for argv in (["--batch", "100"], ["--pieces", "--batch", "-1"]):
        assert cli_main(["migrate", "--store", str(tmp_path / "none"), *argv]) == 2
        assert "--batch must be 0 or more documents, with --pieces" in capsys.readouterr().err


def test_ingest_sets_a_new_stores_bucket_count_and_refuses_a_bad_one(tmp_path, capsys):
    from lightfoot_pipeline.ingest.dataset import bundled_sample_dir

    dataset = tmp_path / "data"
    dataset.mkdir()
    lines = (bundled_sample_dir() / "corpus.jsonl").read_text().splitlines()[:3]
    (dataset / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    extractions = (bundled_sample_dir() / "extractions.jsonl").read_text().splitlines()
    (dataset / "extractions.jsonl").write_text("\n".join(extractions) + "\n")
    store = str(tmp_path / "store")
    assert cli_main(["ingest", "--store", store, "--dataset", str(dataset), "--embedder", "hashing",
                     "--buckets", "0"]) == 2
    assert "--buckets must be a whole number of at least 1" in capsys.readouterr().err
    assert cli_main(["ingest", "--store", store, "--dataset", str(dataset), "--embedder", "hashing",
                     "--buckets", "5", "--json"]) == 0
    assert Store(store).manifest().details["layout"]["n_buckets"] == 5
    assert set(Store(store).read(DOCUMENTS.name).get_column(BUCKET).to_list()) <= set(range(5))


def test_a_transaction_opened_on_a_manifest_finds_rows_in_the_stores_own_buckets(built):
    _, uri, documents, _ = built
    manifest = Store(uri).manifest()
    tx = Transaction(Store(uri, n_buckets=3), manifest)  # another count than the store's 64
    assert tx.n_buckets == BUCKETS
    assert tx.rows(DOCUMENTS.name, "doc_id", [documents[3].doc_id]).height == 1


@pytest.mark.slow
def test_a_layout_2_store_is_refused_with_the_migrate_hint_and_migrate_drops_its_name_keys(built):
    """Layout 2 kept each name's whole band keys in ``name_keys``; layout 3 keeps sketches."""
    root, uri, documents, _records = built
    uri = _copy(root, uri, "layout-2")
    digest = fingerprint(Store(uri)).digest
    store = Store(uri)
    manifest = store.manifest()
    details = {**manifest.details, "layout": {"version": 2, "n_buckets": BUCKETS}}
    Transaction(store, manifest)._append_log(manifest.seq + 1, "layout 2", dict(manifest.versions), details,
                                             read_at=manifest.log_version)
    old_keys = Path(uri) / "tables" / "name_keys"
    old_keys.mkdir(parents=True)
    (old_keys / "part-0.parquet").write_bytes(b"earlier band keys")

    with pytest.raises(StoreLayoutError, match="has layout 2") as refused:
        operations.delete(Store(uri), [documents[0].doc_id])
    assert f"lightfoot migrate --store {uri}" in refused.value.line()

    operations.migrate(Store(uri), EMBEDDER)
    assert not old_keys.exists()
    assert Store(uri).manifest().details["layout"]["version"] == LAYOUT_VERSION
    assert fingerprint(Store(uri)).digest == digest


def test_kept_buckets_answer_as_files_do_and_stay_within_their_bound(built):
    """A Store that keeps what it reads (the query service's) answers every bucket and column read
    as a fresh one does, reads each piece's files once, and holds no more than its byte bound."""
    _, uri, documents, _ = built
    fresh, keeping = Store(uri), Store(uri)
    keeping.keep_buckets(64 * 1024 * 1024)
    manifest = fresh.manifest()
    doc_ids = [d.doc_id for d in documents[:150]]
    for batch in (doc_ids[:5], doc_ids[3:40], doc_ids[:5]):
        for name, order in ((DOCUMENTS.name, ["doc_id"]), ("passages", ["doc_id", "chunk_id"])):
            expected = fresh.rows(name, "doc_id", batch, manifest).sort(order)
            assert keeping.rows(name, "doc_id", batch, manifest).sort(order).equals(expected), name
    once = dict(keeping.rows_read)
    keeping.rows(DOCUMENTS.name, "doc_id", doc_ids[:40], manifest)  # every bucket of these is kept
    assert keeping.rows_read == once
    column = keeping.read_columns(FORMS.name, manifest, ["name"])
    assert column.equals(fresh.read_columns(FORMS.name, manifest, ["name"]))
    reads = dict(keeping.columns_read)
    assert keeping.read_columns(FORMS.name, manifest, ["name"]).equals(column) and keeping.columns_read == reads

    tight = Store(uri)
    tight.keep_buckets(4 * 1024)  # a few small buckets at most
    for doc_id in doc_ids:
        assert tight.rows(DOCUMENTS.name, "doc_id", [doc_id], manifest).get_column("doc_id").to_list() == [doc_id]
    held = tight._buckets
    assert held is not None and sum(int(f.estimated_size()) for f in held.values()) <= 4 * 1024 + max(
        int(f.estimated_size()) for f in held.values())


@pytest.mark.slow  # 1.7 s; the fast tier keeps write_plan.rewritten's own test
def test_a_change_past_what_a_transaction_keeps_holds_its_rows_and_rewrites_buckets_in_groups(built, monkeypatch):
    """With nothing kept whole (a store far larger than KEPT_ROWS), a deletion of a tenth of the
    documents holds only the rows it looks up, rewrites the buckets that lost rows a few at a time
    (several table versions under one store commit), and leaves what a fresh build of the
    survivors gives."""
    from lightfoot_pipeline.index import name_sketches
    from lightfoot_pipeline.store import transaction

    root, uri, documents, records = built
    uri = _copy(root, uri, "delete-tenth-in-groups")
    monkeypatch.setattr(transaction, "KEPT_ROWS", 0)
    monkeypatch.setattr(transaction, "REWRITE_ROWS", 40)
    before = Store(uri).manifest()
    doomed = [d.doc_id for d in documents[:150:10]]
    held: dict[str, int] = {}
    committed = Transaction.commit

    def noting(tx, operation, details=None):
        held.update({name: tx.staged(name).height for name in (FORMS.name, "aliases")})
        return committed(tx, operation, details)

    monkeypatch.setattr(Transaction, "commit", noting)
    store = Store(uri)
    operations.delete(store, doomed)
    after = store.manifest()
    assert after.seq == before.seq + 1
    assert after.versions[FORMS.name] - before.versions[FORMS.name] > 2  # a group of buckets at a time
    assert held[FORMS.name] < Store(uri).read(FORMS.name).height / 2
    live = {d.doc_id for d in documents[:150]} - set(doomed)
    assert fingerprint(Store(uri)).digest == _fresh_fingerprint(root, documents, records, live)
    # New names linked against the stored sketches a bucket at a time: the same links as at once.
    monkeypatch.setattr(name_sketches, "SKETCH_PART_ROWS", 1)
    parts = list(name_sketches.sketch_parts(Transaction(Store(uri), Store(uri).manifest())))
    assert len(parts) == BUCKETS
    operations.ingest(Store(uri), documents[150:], ReplayExtractor(records), EMBEDDER)
    live |= {d.doc_id for d in documents[150:]}
    assert fingerprint(Store(uri)).digest == _fresh_fingerprint(root, documents, records, live)


def test_column_pieces_read_every_row_once_a_few_files_at_a_time(built):
    _, uri, _, _ = built
    store = Store(uri)
    manifest = store.manifest()
    whole = store.read_columns(FORMS.name, manifest, ["chunk_id", "name"])
    files = sum(store.files_per_bucket(FORMS.name, manifest).values())
    assert files > 8
    one_file_each = list(store.column_pieces(FORMS.name, manifest, ["chunk_id", "name"], rows_per_piece=1))
    assert len(one_file_each) == files
    for pieces in (one_file_each, list(store.column_pieces(FORMS.name, manifest, ["chunk_id", "name"],
                                                           rows_per_piece=whole.height // 4))):
        assert all(piece.columns == ["chunk_id", "name"] for piece in pieces)
        assert pl.concat(pieces).sort(["chunk_id", "name"]).equals(whole.sort(["chunk_id", "name"]))
    assert 1 < len(pieces) <= 5  # a quarter of the rows or more a piece (whole files), the last the rest
