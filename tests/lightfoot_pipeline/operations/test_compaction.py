"""Compaction: buckets made of several files rewritten as one, no row changed."""

from __future__ import annotations

import json

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.cli import main as cli_main
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.operations.compaction import compact
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store


@pytest.mark.slow  # 6 s: four ingests, a compaction, another ingest and a vacuum
def test_a_store_grown_batch_by_batch_is_compacted_without_a_changed_row(tmp_path, sample_documents, sample_records,
                                                                        capsys):
    store = Store(str(tmp_path / "store"), n_buckets=4)
    for start in range(0, 24, 6):  # four batches: the buckets that only grew get a file each
        operations.ingest(Store(store.uri), sample_documents[start:start + 6], ReplayExtractor(sample_records),
                          HashingEmbedder(dim=32))
    before, digest = store.manifest(), fingerprint(store).digest
    crowded = {name: sum(1 for n in store.files_per_bucket(name, before).values() if n > 1)
               for name in ("forms", "mentions", "fact_sources")}
    assert all(crowded.values()), crowded

    done = compact(Store(store.uri))
    after = Store(store.uri)
    assert after.manifest().seq == before.seq + 1 and after.manifest().operation == "compact"
    assert {name: done[name] for name in crowded} == crowded
    for name in done:
        assert set(after.files_per_bucket(name, after.manifest()).values()) == {1}, name
    assert fingerprint(after).digest == digest
    assert after.manifest().details["rows"]["forms"] == before.details["rows"]["forms"]
    assert compact(after) == {} and Store(store.uri).manifest().seq == before.seq + 1  # nothing left: no commit
    with pytest.raises(ValueError, match="min_files is 2"):
        compact(after, min_files=1)

    # The command line: compaction, then a vacuum that removes the files it replaced.
    operations.ingest(Store(store.uri), sample_documents[24:30], ReplayExtractor(sample_records),
                      HashingEmbedder(dim=32))
    assert cli_main(["vacuum", "--store", store.uri, "--compact", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["buckets_compacted"] and sum(report["files_vacuumed"].values()) > 0
