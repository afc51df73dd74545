"""Table digests compose over any split of the rows, and the store fingerprint kept per bucket
equals the one that reads every row, after every kind of change and whatever its cache file holds."""

from __future__ import annotations

import datetime as dt
import json
import random
import shutil

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

from lightfoot_pipeline import pipeline
from lightfoot_pipeline.erase import vacuum
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder
from lightfoot_pipeline.store import fingerprint as fingerprint_module
from lightfoot_pipeline.store.digests import _column_tokens, column_tokens, combine, digest_by_bucket
from lightfoot_pipeline.store.fingerprint import CACHE_FILE, digest_frame, fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import ALIASES, DOCUMENTS, EXTRACTIONS, INDEX_TABLES, PASSAGES

EMBEDDER = HashingEmbedder(dim=32)
BUCKETS = 16
STEMS = ["Orvel Tanning", "Mirabel Stoke", "Kasimir Dunn", "Halvard Press", "Ostrava Mills", "Lindqvist Hall",
         "Peder Sand", "Quill Harbour", "Tessaly Road", "Brannock Fen", "Iver Castell", "Saffron Weald"]


def test_digest_ignores_row_order_and_sees_every_value():
    frame = pl.DataFrame({"a": ["x", "y", None], "b": [1.0, 2.5, float("nan")], "c": [1, 2, 3]})
    base = digest_frame(frame, ["a", "b", "c"])
    assert digest_frame(frame.reverse(), ["a", "b", "c"]) == base
    assert digest_frame(frame.with_columns(pl.col("b") + 1e-12), ["a", "b", "c"]) != base
    assert digest_frame(frame.with_columns(pl.Series("a", ["x", "y", ""])), ["a", "b", "c"]) != base
    assert digest_frame(frame.head(2), ["a", "b", "c"]).rows == 2


def test_values_cannot_run_into_each_other():
    left = pl.DataFrame({"a": ["ab"], "b": ["c"]})
    right = pl.DataFrame({"a": ["a"], "b": ["bc"]})
    assert digest_frame(left, ["a", "b"]) != digest_frame(right, ["a", "b"])


def test_a_repeated_row_counts_twice():
    one = pl.DataFrame({"a": ["x"]})
    assert digest_frame(pl.concat([one, one]), ["a"]) != digest_frame(one, ["a"])
    assert digest_frame(pl.concat([one, one]), ["a"]).rows == 2


@pytest.mark.parametrize("series", [
    pl.Series(["a", None, "", "héllo", "\x00N", "a:b"]),
    pl.Series([1.0, None, float("nan"), -0.0, 1e300, float("-inf")]),
    pl.Series([1.5, None, 2.0, -3.25, 4.0, 0.0], dtype=pl.Float32),
    pl.Series([1, None, -5, 2**62, 0, -(2**63)]),
    pl.Series([1, None, -5, 7, 0, 2**31 - 1], dtype=pl.Int32),
    pl.Series([True, None, False, True, False, None]),
    pl.Series([dt.date(2024, 1, 2), None, dt.date(999, 1, 1), dt.date(1, 1, 1), dt.date(9999, 12, 31), None]),
    pl.Series([[1.0, 2.0], None, [], [3.0], [0.5, 0.25], [-1.0]], dtype=pl.List(pl.Float32)),
    pl.Series([[1.0, 2.0], None, [0.0, 1.0], [3.0, -1.0], [0.5, 0.25], None], dtype=pl.Array(pl.Float32, 2)),
    pl.Series([b"x", None, b"", b"\x00", b"yy", b"z"]),
])
def test_column_tokens_are_the_canonical_encoding(series):
    assert column_tokens(series).to_pylist() == _column_tokens(series)
    assert column_tokens(series.slice(2, 3)).to_pylist() == _column_tokens(series.slice(2, 3))


rows = st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=8)),
                          st.one_of(st.none(), st.floats(allow_nan=False, width=64)),
                          st.integers(-(2**63), 2**63 - 1), st.integers(0, 5)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(rows)
def test_the_digest_of_a_split_is_the_digest_of_the_whole(values):
    frame = pl.DataFrame(values, schema={"a": pl.String, "b": pl.Float64, "c": pl.Int64, "part": pl.Int32},
                         orient="row")
    columns = ["a", "b", "c"]
    whole = digest_frame(frame, columns)
    parts = [digest_frame(frame.filter(pl.col("part") == p), columns) for p in range(6)]
    assert combine(parts) == whole
    assert combine(digest_by_bucket(frame, columns, "part").values()) == whole
    assert sum(parts[1:], parts[0]) == whole
    if frame.height:  # a row taken out changes the digest
        assert digest_frame(frame.slice(1), columns) != whole


# -- the store fingerprint ----------------------------------------------------------------------


def _corpus(n: int, seed: int = 0) -> tuple[list[Document], dict[str, dict]]:
    rng = random.Random(seed)
    vocabulary = [f"{stem} {i}" if i else stem for stem in STEMS for i in range(12)]
    documents, records = [], {}
    for d in range(n):
        names = [name + "s" if rng.random() < 0.2 else name for name in rng.sample(vocabulary, 4)]
        facts = [[names[0], "is part of", names[1], None], [names[2], "founded", names[3], None]]
        doc_id = f"doc-{d:04d}"
        documents.append(Document(doc_id=doc_id, title=names[0], text="Mentions " + "; ".join(names) + "."))
        records[doc_id] = {"doc_id": doc_id, "entities": [{"name": x, "type": "entity"} for x in names], "facts": facts}
    return documents, records


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    documents, records = _corpus(70)
    root = tmp_path_factory.mktemp("fingerprint")
    store = Store(str(root / "store"), n_buckets=BUCKETS)
    pipeline.ingest(store, documents[:60], ReplayExtractor(records), EMBEDDER)
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


def test_the_kept_fingerprint_equals_every_row_after_each_kind_of_change(built):
    root, uri, documents, records = built
    uri = _copy(root, uri, "changes")
    digests = [_agree(uri)]
    pipeline.ingest(Store(uri), documents[60:], ReplayExtractor(records), EMBEDDER)
    digests.append(_agree(uri))
    pipeline.delete(Store(uri), [documents[3].doc_id])
    digests.append(_agree(uri))
    pipeline.delete(Store(uri), [documents[4].doc_id], erase=True)
    digests.append(_agree(uri))
    vacuum(Store(uri))
    digests.append(_agree(uri))
    pipeline.migrate(Store(uri), EMBEDDER, n_buckets=8)
    assert _agree(uri) == digests[-1]  # the same rows in other buckets and files
    assert len(set(digests)) == 4  # every change but the vacuum changed the rows
    fresh = Store(str(root / "changes-fresh"), n_buckets=4)
    live = [d for d in documents if d.doc_id not in {documents[3].doc_id, documents[4].doc_id}]
    pipeline.ingest(fresh, live, ReplayExtractor(records), EMBEDDER)
    assert fingerprint(fresh).digest == digests[-1]


def test_a_one_document_deletion_reads_only_the_buckets_it_rewrote(built):
    root, uri, documents, _ = built
    uri = _copy(root, uri, "one-deletion")
    before = Store(uri)
    fingerprint(before)
    files_before = {spec.name: before.bucket_files(spec.name, before.manifest()) for spec in INDEX_TABLES}
    pipeline.delete(Store(uri), [documents[11].doc_id])

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
