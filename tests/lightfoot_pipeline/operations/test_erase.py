"""Hard erasure: after ``delete --erase`` (or a vacuum after a re-ingest) no file under the store root
holds the deleted or replaced text."""

from __future__ import annotations

import datetime as dt
import warnings
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.operations.erase import vacuum
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import latest_snapshot, load_snapshot
from lightfoot_pipeline.store.fingerprint import counts, fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.vectors import lance_table_names

CANARY = "Quorvexian-canary-41b7"


def _holders(root: Path, needle: str) -> list[Path]:
    """Files that hold the needle, as raw bytes or inside any Parquet string column."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if needle.encode() in data or needle.casefold().encode() in data:
            found.append(path)
            continue
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            for column in table.columns:
                is_text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
                if is_text and any(v and needle.casefold() in v.casefold() for v in column.to_pylist()):
                    found.append(path)
                    break
    return found


def _corpus():
    secret = Document("secret", f"The {CANARY} affair", f"{CANARY} met Carl Rogers in 1963 in Copenhagen.")
    others = [Document(f"d{i}", f"Title {i}", f"Carl Rogers worked in Copenhagen in {1950 + i}.") for i in range(5)]
    records = {
        "secret": {"entities": [{"name": CANARY, "type": "person"}, {"name": "Carl Rogers", "type": "person"}],
                   "facts": [[CANARY, "met", "Carl Rogers"]]},
        **{f"d{i}": {"entities": [{"name": "Carl Rogers", "type": "person"}, {"name": "Copenhagen"}],
                     "facts": [["Carl Rogers", "worked in", "Copenhagen"]]} for i in range(5)},
    }
    return [secret, *others], records


def test_plain_delete_leaves_history_and_erase_removes_it(store, hashing_embedder):
    documents, records = _corpus()
    operations.ingest(store, documents, ReplayExtractor(records), hashing_embedder)
    # A second commit, so the text also sits in older table versions and log entries.
    operations.ingest(store, [Document("late", "Late", "Copenhagen again.")], ReplayExtractor({}), hashing_embedder)
    root = Path(store.uri)

    report = operations.delete(store, ["secret"])
    assert report.deleted == ["secret"]
    assert _holders(root, CANARY), "before the erase, history still holds the text (or the detector is blind)"
    assert all(CANARY not in str(v) for spec in ("passages", "forms", "aliases")
               for v in store.read(spec).rows())

    erased = operations.delete(store, ["secret"], erase=True)
    assert erased.deleted == [] and erased.not_found == ["secret"]
    from lightfoot_pipeline.operations.erase import erase_history

    erase_history(store, ["secret"])
    assert _holders(root, CANARY) == []
    tombstones = store.read("tombstones")
    assert tombstones.filter(tombstones["doc_id"] == "secret")["erased_at"].null_count() == 0


@pytest.mark.slow
def test_delete_with_erase_in_one_step(store, hashing_embedder):
    documents, records = _corpus()
    operations.ingest(store, documents, ReplayExtractor(records), hashing_embedder)
    before = fingerprint(store)
    report = operations.delete(store, ["secret"], erase=True)
    assert report.erase is not None and report.erase["vectors_purged"]
    assert _holders(Path(store.uri), CANARY) == []
    # The rest of the index is intact and still readable after the vacuum.
    assert counts(store)["documents"] == 5
    assert fingerprint(store).digest != before.digest
    operations.ingest(store, [documents[0]], ReplayExtractor(records), hashing_embedder)
    assert fingerprint(store).digest == before.digest


@pytest.mark.slow
def test_reingest_is_reported_as_a_replacement_and_vacuum_purges_the_old_text(tmp_path, store, hashing_embedder):
    documents, records = _corpus()
    operations.ingest(store, documents, ReplayExtractor(records), hashing_embedder)
    old_snapshot = export_snapshot(store, hashing_embedder)  # serving copies of the old text too
    rewritten = Document("secret", "The quiet affair", "Ada Lovelace met Carl Rogers in 1963 in Copenhagen.")
    new_records = {"secret": {"entities": [{"name": "Ada Lovelace", "type": "person"}],
                              "facts": [["Ada Lovelace", "met", "Carl Rogers"]]}}

    report = operations.ingest(store, [rewritten, documents[1]], ReplayExtractor(records | new_records), hashing_embedder)

    assert (report.ingested, report.replaced, report.unchanged) == (0, 1, 1)
    assert report.replaced_doc_ids == ["secret"] and report.extracted == 1
    root = Path(store.uri)
    assert all(CANARY not in str(v) for spec in ("documents", "passages", "forms", "aliases", "facts")
               for v in store.read(spec).rows())
    assert _holders(root, CANARY), "history and the snapshot still hold the replaced text (or the detector is blind)"

    erased = vacuum(store)

    assert _holders(root, CANARY) == []
    assert erased.snapshots_removed == 1 and erased.documents == []
    published = latest_snapshot(store)
    assert published is not None and published.snapshot_id != old_snapshot.snapshot_id
    passages = load_snapshot(store).passages
    assert passages.filter(passages["doc_id"] == "secret")["text"].to_list() == [rewritten.text]
    # What is left is exactly a fresh build of the documents as they are now.
    fresh = Store(str(tmp_path / "fresh"))
    operations.ingest(fresh, [rewritten, *documents[1:]], ReplayExtractor(records | new_records), hashing_embedder)
    assert fingerprint(store).digest == fingerprint(fresh).digest


@pytest.mark.slow
def test_a_title_change_is_a_replacement_whose_old_title_is_purged(store, hashing_embedder):
    documents, records = _corpus()
    titled = Document("d0", f"{CANARY} notes", documents[1].text)
    operations.ingest(store, [titled, *documents[2:]], ReplayExtractor(records), hashing_embedder)
    export_snapshot(store, hashing_embedder)
    report = operations.ingest(store, [documents[1]], ReplayExtractor(records), hashing_embedder)
    assert (report.replaced, report.extracted, report.already_extracted) == (1, 0, 1)  # same text: no new extraction
    assert operations.ingest(store, [documents[1]], ReplayExtractor(records), hashing_embedder).unchanged == 1
    assert _holders(Path(store.uri), CANARY)

    assert vacuum(store).snapshots_removed == 1
    assert _holders(Path(store.uri), CANARY) == []
    assert load_snapshot(store).passages.filter(pl.col("doc_id") == "d0")["title"].to_list() == ["Title 0"]


@pytest.mark.slow
def test_erasing_a_document_deleted_earlier_erases_it_everywhere(store, hashing_embedder):
    documents, records = _corpus()
    operations.ingest(store, documents, ReplayExtractor(records), hashing_embedder)
    export_snapshot(store, hashing_embedder)
    operations.delete(store, ["secret"])

    report = operations.delete(store, ["secret", "never-there"], erase=True)

    assert report.deleted == [] and report.not_found == ["never-there", "secret"]
    assert report.already_deleted == ["secret"]
    assert report.erase["documents"] == ["secret"] and report.erase["snapshots_removed"] == 1
    assert _holders(Path(store.uri), CANARY) == []
    tombstones = store.read("tombstones")
    assert tombstones.filter(tombstones["doc_id"] == "secret")["erased_at"].null_count() == 0


@pytest.mark.slow
def test_an_erase_raises_no_lancedb_warning(store, hashing_embedder):
    documents, records = _corpus()
    operations.ingest(store, documents, ReplayExtractor(records), hashing_embedder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        operations.delete(store, ["secret"], erase=True)
        vacuum(store)
    assert [str(w.message) for w in caught] == []
    # Only that warning is silenced: LanceDB's other warnings still reach the caller.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store.lance().open_table(lance_table_names(store.lance())[0]).optimize(cleanup_older_than=dt.timedelta(0))
    assert any("cleanup_older_than" in str(w.message) for w in caught)


@pytest.mark.parametrize("finisher", ["vacuum", "plain delete"])
@pytest.mark.slow
def test_an_erasure_that_fails_before_it_is_marked_stays_pending_and_the_next_run_finishes_it(
        store, hashing_embedder, monkeypatch, finisher):
    from lightfoot_pipeline.operations import erase
    from lightfoot_pipeline.operations.erase import pending_erasures

    documents, records = _corpus()
    operations.ingest(store, documents, ReplayExtractor(records), hashing_embedder)
    export_snapshot(store, hashing_embedder)
    marked = erase.mark_erased

    def fails(*args, **kwargs):
        raise OSError("the store went away before the tombstones were marked")

    monkeypatch.setattr(erase, "mark_erased", fails)
    try:
        operations.delete(store, ["secret"], erase=True)
    except OSError:
        pass
    else:
        raise AssertionError("the erasure was to fail")
    # Cleaned, but not marked: the tombstone says the erasure is still owed.
    assert pending_erasures(store) == ["secret"]
    tombstones = store.read("tombstones").filter(pl.col("doc_id") == "secret")
    assert tombstones["erased_at"].null_count() == 1

    monkeypatch.setattr(erase, "mark_erased", marked)
    if finisher == "vacuum":
        report = vacuum(store)
        assert report.documents == ["secret"] and report.erased_at
    else:  # a delete without an erase of its own finishes the erasure owed, and erases nothing more
        deleted = operations.delete(store, ["d0"])
        assert deleted.erase["documents"] == ["secret"] and deleted.erase["erased_at"]
        assert store.read("tombstones").filter(pl.col("doc_id") == "d0")["erased_at"].null_count() == 1
    assert pending_erasures(store) == []
    assert store.read("tombstones").filter(pl.col("doc_id") == "secret")["erased_at"].null_count() == 0
    assert _holders(Path(store.uri), CANARY) == []


@pytest.mark.slow  # five deletions, three of them erasing
def test_the_store_log_counts_the_erasures_owed_and_a_deletion_reads_no_tombstone_when_none_is(
        store, hashing_embedder, monkeypatch):
    from lightfoot_pipeline.operations import erase
    from lightfoot_pipeline.operations.erase import pending_erasures
    from lightfoot_pipeline.store.transaction import Transaction

    documents, records = _corpus()
    operations.ingest(store, documents, ReplayExtractor(records), hashing_embedder)

    def owed():
        return store.tally("tombstones", "erasures_owed", store.manifest())

    def fails(*args, **kwargs):
        raise OSError("the store went away before the tombstones were marked")

    assert owed() == 0, "no tombstone yet"
    operations.delete(store, ["d0"])
    assert owed() == 0, "a plain deletion owes no erasure"
    store.columns_read.clear()
    assert pending_erasures(store) == [] and "tombstones" not in store.columns_read

    # A store last written by a version that kept no tally: the log does not say, so the tombstones
    # are read, and the next commit of the deletion log counts them from storage.
    monkeypatch.setattr(Transaction, "_tallies", lambda self, name: {})
    monkeypatch.setattr(erase, "mark_erased", fails)
    with pytest.raises(OSError):
        operations.delete(store, ["secret"], erase=True)
    monkeypatch.undo()
    assert owed() is None
    store.columns_read.clear()
    assert pending_erasures(store) == ["secret"] and store.columns_read["tombstones"] == 1
    operations.delete(store, ["d1"], erase=True)  # counts one owed, then erases it with its own
    assert owed() == 0
    assert store.read("tombstones").filter(pl.col("erase"))["erased_at"].null_count() == 0

    # A failed erasure is counted as owed, and a plain deletion finishes it.
    monkeypatch.setattr(erase, "mark_erased", fails)
    with pytest.raises(OSError):
        operations.delete(store, ["d2"], erase=True)
    monkeypatch.undo()
    assert owed() == 1 and pending_erasures(store) == ["d2"]
    operations.delete(store, ["d3"])
    assert owed() == 0 and pending_erasures(store) == []


@pytest.mark.slow
def test_the_mark_of_an_erasure_leaves_no_earlier_version_of_the_deletion_log(store, hashing_embedder):
    documents, records = _corpus()
    operations.ingest(store, documents, ReplayExtractor(records), hashing_embedder)
    operations.delete(store, ["secret"], erase=True)
    tombstones = Path(store.uri) / "tables" / "tombstones"
    held = [p for p in tombstones.rglob("*.parquet") if "_delta_log" not in p.parts]
    # Only the current version's data files remain: each holds the erased tombstone.
    assert held and all(pq.read_table(p).column("erased_at").null_count == 0 for p in held)



@pytest.mark.slow  # a few seconds: an ingest and a vacuum
def test_an_erasure_sweeps_the_scratch_copies_a_killed_check_left(store, hashing_embedder, tmp_path, monkeypatch):
    import json
    import socket
    import subprocess
    import tempfile

    from lightfoot_pipeline.store.scratch import MARKER

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    documents, records = _corpus()
    operations.ingest(store, documents[:1], ReplayExtractor(records), hashing_embedder)
    ended = subprocess.Popen(["true"])
    ended.wait()  # its pid now names no process, as a killed check's does
    left = tmp_path / "lightfoot-rebuild-check-killed"
    (left / "store").mkdir(parents=True)
    (left / "store" / "passages.parquet").write_text(CANARY)
    (left / MARKER).write_text(json.dumps({"host": socket.gethostname(), "pid": ended.pid, "started": None}))
    assert vacuum(store).scratch_removed == 1 and not left.exists()
