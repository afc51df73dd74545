"""Hard erasure: after ``delete --erase`` no file under the store root holds the deleted text."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lightfoot_pipeline import pipeline
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.extraction import ReplayExtractor

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
                if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                    if any(v and needle.casefold() in v.casefold() for v in column.to_pylist()):
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
    pipeline.ingest(store, documents, ReplayExtractor(records), hashing_embedder)
    # A second commit, so the text also sits in older table versions and log entries.
    pipeline.ingest(store, [Document("late", "Late", "Copenhagen again.")], ReplayExtractor({}), hashing_embedder)
    root = Path(store.uri)

    report = pipeline.delete(store, ["secret"])
    assert report.deleted == ["secret"]
    assert _holders(root, CANARY), "before the erase, history still holds the text (or the detector is blind)"
    assert all(CANARY not in str(v) for spec in ("passages", "forms", "aliases")
               for v in store.read(spec).rows())

    erased = pipeline.delete(store, ["secret"], erase=True)
    assert erased.deleted == [] and erased.not_found == ["secret"]
    from lightfoot_pipeline.erase import erase_history

    erase_history(store, ["secret"])
    assert _holders(root, CANARY) == []
    tombstones = store.read("tombstones")
    assert tombstones.filter(tombstones["doc_id"] == "secret")["erased_at"].null_count() == 0


def test_delete_with_erase_in_one_step(store, hashing_embedder):
    documents, records = _corpus()
    pipeline.ingest(store, documents, ReplayExtractor(records), hashing_embedder)
    before = pipeline.fingerprint(store)
    report = pipeline.delete(store, ["secret"], erase=True)
    assert report.erase is not None and report.erase["vectors_purged"]
    assert _holders(Path(store.uri), CANARY) == []
    # The rest of the index is intact and still readable after the vacuum.
    assert pipeline.counts(store)["documents"] == 5
    assert pipeline.fingerprint(store).digest != before.digest
    pipeline.ingest(store, [documents[0]], ReplayExtractor(records), hashing_embedder)
    assert pipeline.fingerprint(store).digest == before.digest
