"""A sync source's readers: a sidecar's ``readers``, the source's ``lightfoot.json`` by path prefix
(the longest wins), else the default; a change of readers alone is picked up with no model call;
a settings file that cannot be used fails every file with its reason, never indexes one public."""

from __future__ import annotations

import json

import polars as pl
import pytest

from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.ingest.sources import MAX_SETTINGS_BYTES, SOURCE_FILES
from lightfoot_pipeline.operations.sync import sync
from lightfoot_pipeline.settings import ChunkSettings
from lightfoot_pipeline.store.tables import DOCUMENT_READERS, DOCUMENTS

CHUNKING = ChunkSettings(tokens=60, overlap=12)
FILES = {"readme.txt": "Harbor", "legal/contract.txt": "Quarry", "legal/public/notice.txt": "Orchard",
         "hr/review.txt": "Lantern"}


class CountingExtractor(ReplayExtractor):
    """Replays one recorded extraction per file and counts the passages it is asked for."""

    def __init__(self) -> None:
        super().__init__({f"src:{path}": {"entities": [{"name": word, "type": "place", "description": None}],
                                          "facts": []} for path, word in FILES.items()})
        self.asked = 0

    def extract(self, passages, progress=None):
        self.asked += len(passages)
        return super().extract(passages, progress)


@pytest.fixture
def source(tmp_path):
    folder = tmp_path / "src"
    for path, word in FILES.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(f"{word} is a place named in this short file about {word}.")
    return folder


def run(store, folder, embedder):
    extractor = CountingExtractor()
    report = sync(store, str(folder), extractor, embedder, chunking=CHUNKING)
    return report, extractor.asked


def readers(store) -> dict[str, str]:
    return dict(store.read(DOCUMENT_READERS.name).select("doc_id", "readers").iter_rows())


def settings_file(folder, value) -> None:
    (folder / "lightfoot.json").write_text(json.dumps(value))


def test_readers_come_from_the_sidecar_else_the_longest_prefix_else_the_default(store, source, hashing_embedder):
    settings_file(source, {"readers": {"legal/": ["legal"], "legal/public/": "public, legal", "hr": ["hr"]}})
    (source / "hr" / "review.txt.lightfoot.json").write_text(json.dumps({"readers": ["hr", "managers"]}))
    report, asked = run(store, source, hashing_embedder)
    assert not report.failed and asked == 4
    assert readers(store) == {"src:readme.txt": "public", "src:legal/contract.txt": "legal",
                              "src:legal/public/notice.txt": "legal,public", "src:hr/review.txt": "hr,managers"}
    assert "src:lightfoot.json" not in set(store.read(DOCUMENTS.name).get_column("doc_id")), "settings, not a document"


def test_a_change_of_readers_alone_is_picked_up_with_no_model_call(store, source, hashing_embedder):
    run(store, source, hashing_embedder)
    assert set(readers(store).values()) == {"public"}
    (source / "readme.txt.lightfoot.json").write_text(json.dumps({"readers": "staff"}))
    settings_file(source, {"readers": {"legal/": ["legal"]}})
    report, asked = run(store, source, hashing_embedder)
    assert asked == 0 and report.model_calls == 0
    assert sorted(report.readers_changed) == ["src:legal/contract.txt", "src:legal/public/notice.txt",
                                              "src:readme.txt"]
    assert readers(store)["src:readme.txt"] == "staff" and readers(store)["src:legal/contract.txt"] == "legal"
    # Narrowing the settings file gives the files it no longer covers the default again.
    settings_file(source, {"readers": {"legal/public/": ["legal"]}})
    report, asked = run(store, source, hashing_embedder)
    assert asked == 0 and report.readers_changed == ["src:legal/contract.txt"]
    assert readers(store)["src:legal/contract.txt"] == "public"
    report, asked = run(store, source, hashing_embedder)
    assert (asked, report.readers_changed, report.changed, report.new) == (0, [], [], [])


@pytest.mark.parametrize("content, reason", [
    ("{not json", "not valid JSON"),
    (json.dumps({"readers": {"legal/": ["Legal Team"]}}), "'Legal Team' is not a group name"),
    (json.dumps({"readers": {"legal/": ["legal"]}, "title": "x"}), "only readers"),
    (json.dumps({"readers": {f"p{i}/": ["a"] for i in range(300)}}), "at most 256"),
    (json.dumps({"readers": ["legal"]}), "an object of path prefixes"),
    ("x" * (MAX_SETTINGS_BYTES + 1), "over the limit of 65,536 bytes"),
])
def test_a_settings_file_that_cannot_be_used_fails_every_file_with_its_reason(store, source, hashing_embedder,
                                                                              content, reason):
    (source / "lightfoot.json").write_text(content)
    report, asked = run(store, source, hashing_embedder)
    assert asked == 0 and store.read(DOCUMENTS.name).height == 0
    assert len(report.failed) == 4
    assert all(f["reason"].startswith("the source's lightfoot.json cannot be used: ") and reason in f["reason"]
               for f in report.failed), report.failed
    records = store.read(SOURCE_FILES.name)
    assert set(records.get_column("status")) == {"failed"}


def test_a_broken_settings_file_takes_its_files_out_until_it_is_fixed(store, source, hashing_embedder):
    settings_file(source, {"readers": {"legal/": ["legal"]}})
    run(store, source, hashing_embedder)
    (source / "lightfoot.json").write_text('{"readers": {"legal/": ["legal"]')  # cut short
    report, _ = run(store, source, hashing_embedder)
    assert len(report.failed) == 4 and store.read(DOCUMENTS.name).height == 0, "never indexed public instead"
    again, asked = run(store, source, hashing_embedder)
    assert asked == 0 and len(again.failed) == 4 and again.commits == [], "the same broken file: nothing to do"
    settings_file(source, {"readers": {"legal/": ["legal"]}})
    fixed, _ = run(store, source, hashing_embedder)
    assert not fixed.failed and store.read(DOCUMENTS.name).height == 4
    assert readers(store)["src:legal/contract.txt"] == "legal"


def test_a_sidecar_with_readers_that_are_not_group_names_fails_its_file_alone(store, source, hashing_embedder):
    (source / "readme.txt.lightfoot.json").write_text(json.dumps({"readers": [3]}))
    report, _ = run(store, source, hashing_embedder)
    assert [f["doc_id"] for f in report.failed] == ["src:readme.txt"]
    assert "its sidecar's readers" in report.failed[0]["reason"]
    assert store.read(DOCUMENTS.name).filter(pl.col("doc_id") == "src:readme.txt").height == 0
    assert store.read(DOCUMENTS.name).height == 3
