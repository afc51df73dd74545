"""Table digests compose over any split of the rows, and the store fingerprint kept per bucket
equals the one that reads every row, after every kind of change and whatever its cache file holds."""

from __future__ import annotations

import json
import shutil

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.operations.erase import vacuum
from lightfoot_pipeline.store import fingerprint as fingerprint_module
from lightfoot_pipeline.store.fingerprint import CACHE_FILE, fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import ALIASES, DOCUMENTS, EXTRACTIONS, INDEX_TABLES, PASSAGES

EMBEDDER = HashingEmbedder(dim=32)
BUCKETS = 16


@pytest.fixture(scope="module")
def built(tmp_path_factory, names_corpus):
    documents, records = names_corpus(70)
    root = tmp_path_factory.mktemp("fingerprint")
    store = Store(str(root / "store"), n_buckets=BUCKETS)
    operations.ingest(store, documents[:60], ReplayExtractor(records), EMBEDDER)
    return root, store.uri, documents, records


def _copy(root, uri: str, name: str) -> str:
    target = root / name
    shutil.copytree(uri, target)
    return str(target)


def _cache_file(uri: str):
    from pathlib import Path

    return Path(uri).joinpath(*CACHE_FILE)


def _agree(uri: str) -> str:
    """The fingerprint from the cache file (a new Store), from memory, and from every row: all equal."""
    proof = fingerprint(Store(uri), use_cache=False)
    store = Store(uri)
    assert fingerprint(store) == proof
    read = dict(store.buckets_read)
    assert fingerprint(store) == proof  # from this Store's memory
    assert store.buckets_read == read  # the second time nothing is read
    from_file = Store(uri)
    assert fingerprint(from_file) == proof  # from the file the first one wrote
    assert from_file.buckets_read == {}
    return proof.digest


@pytest.mark.slow
def test_the_kept_fingerprint_equals_every_row_after_each_kind_of_change(built):
    root, uri, documents, records = built
    uri = _copy(root, uri, "changes")
    digests = [_agree(uri)]
    operations.ingest(Store(uri), documents[60:], ReplayExtractor(records), EMBEDDER)
    digests.append(_agree(uri))
    operations.delete(Store(uri), [documents[3].doc_id])
    digests.append(_agree(uri))
    operations.delete(Store(uri), [documents[4].doc_id], erase=True)
    digests.append(_agree(uri))
    vacuum(Store(uri))
    digests.append(_agree(uri))
    operations.migrate(Store(uri), EMBEDDER, n_buckets=8)
    assert _agree(uri) == digests[-1]  # the same rows in other buckets and files
    assert len(set(digests)) == 4  # every change but the vacuum changed the rows
    fresh = Store(str(root / "changes-fresh"), n_buckets=4)
    live = [d for d in documents if d.doc_id not in {documents[3].doc_id, documents[4].doc_id}]
    operations.ingest(fresh, live, ReplayExtractor(records), EMBEDDER)
    assert fingerprint(fresh).digest == digests[-1]


@pytest.mark.slow
def test_a_one_document_deletion_reads_only_the_buckets_it_rewrote(built):
    root, uri, documents, _ = built
    uri = _copy(root, uri, "one-deletion")
    before = Store(uri)
    fingerprint(before)
    files_before = {spec.name: before.bucket_files(spec.name, before.manifest()) for spec in INDEX_TABLES}
    operations.delete(Store(uri), [documents[11].doc_id])

    store = Store(uri)
    after = fingerprint(store)
    manifest = store.manifest()
    rewritten = {}
    for spec in INDEX_TABLES:
        files = store.bucket_files(spec.name, manifest)
        rewritten[spec.name] = sum(1 for b, paths in files.items() if files_before[spec.name].get(b) != paths)
    expected = {name: n for name, n in rewritten.items() if n}
    expected[ALIASES.name] = 2 * rewritten[ALIASES.name]  # its rows, then its names' vectors
    assert store.buckets_read == expected
    for name in (DOCUMENTS.name, PASSAGES.name, EXTRACTIONS.name):
        assert store.buckets_read[name] == 1  # the document's bucket
    assert sum(store.buckets_read.values()) < (len(INDEX_TABLES) + 1) * BUCKETS / 2
    assert store.tables_read == {}
    assert after == fingerprint(Store(uri), use_cache=False)
    # Only the entries of the state's buckets are kept: those of the files the deletion replaced are dropped.
    entries = json.loads(_cache_file(uri).read_text())["entries"]
    assert len(entries) == sum(len(store.bucket_files(spec.name, manifest)) for spec in INDEX_TABLES) + \
        len(store.bucket_files(ALIASES.name, manifest))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "altered digest", "other format", "not a list", "empty"])
def test_a_damaged_cache_is_recomputed_without_a_word(built, damage):
    root, uri, _, _ = built
    uri = _copy(root, uri, f"damaged-{damage.replace(' ', '-')}")
    proof = fingerprint(Store(uri), use_cache=False)
    fingerprint(Store(uri))
    path = _cache_file(uri)
    text = path.read_text()
    payload = json.loads(text)
    key = sorted(payload["entries"])[0]
    if damage == "garbage":
        path.write_bytes(b"\xff\x00 not json")
    elif damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "altered digest":
        payload["entries"][key][1] = "0" * 64
        path.write_text(json.dumps(payload))
    elif damage == "other format":
        payload["format"] = "an older one"
        path.write_text(json.dumps(payload))
    elif damage == "not a list":
        payload["entries"] = [1, 2]
        path.write_text(json.dumps(payload))
    else:
        path.write_text("")
    store = Store(uri)
    assert fingerprint(store) == proof
    assert sum(store.buckets_read.values()) > 0  # recomputed, not taken from the damaged file
    again = Store(uri)
    assert fingerprint(again) == proof and again.buckets_read == {}  # the file was written anew


def test_a_store_whose_cache_cannot_be_written_still_gets_its_fingerprint(built, monkeypatch):
    root, uri, _, _ = built
    uri = _copy(root, uri, "unwritable")

    def refuse(*args, **kwargs):
        raise PermissionError("read-only store")

    monkeypatch.setattr(fingerprint_module, "write_json", refuse)
    assert fingerprint(Store(uri)) == fingerprint(Store(uri), use_cache=False)
    assert not _cache_file(uri).exists()


def test_the_name_vectors_follow_the_vector_cache(built):
    root, uri, _, _ = built
    uri = _copy(root, uri, "vectors")
    store = Store(uri)
    names = store.read(ALIASES.name).get_column("name").unique().sort().to_list()
    digest = fingerprint(store).tables["name_vectors"]
    assert digest.rows == len(names)
    again = fingerprint(Store(uri), include_vectors=False)
    assert "name_vectors" not in again.tables
    assert fingerprint(Store(uri)).tables["name_vectors"] == digest  # the name entries were kept


def test_every_row_is_read_a_few_buckets_at_a_time(built, monkeypatch):
    """Reading every row holds a few buckets of one table at a time, never the store: the digest
    is the same however the buckets are grouped."""
    _, uri, _, _ = built
    whole = fingerprint(Store(uri), use_cache=False)  # READ_BUCKETS >= BUCKETS: one group a table
    sizes = []
    read_buckets = Store.read_buckets

    def spy(self, name, manifest, buckets):
        buckets = list(buckets)
        sizes.append(len(buckets))
        return read_buckets(self, name, manifest, buckets)

    monkeypatch.setattr(Store, "read_buckets", spy)
    monkeypatch.setattr(fingerprint_module, "READ_BUCKETS", 3)
    assert fingerprint(Store(uri), use_cache=False) == whole
    assert sizes and max(sizes) == 3
    store = Store(uri)
    stored = [len(store.bucket_files(spec.name, store.manifest())) for spec in (*INDEX_TABLES, ALIASES)]
    assert sum(sizes) == sum(stored)  # every bucket of every table once, and the names' buckets
