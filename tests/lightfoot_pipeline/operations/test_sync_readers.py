"""A sync source's readers: a sidecar's ``readers``, the source's ``lightfoot.json`` by path prefix
(the longest wins), else the default; a change of readers alone is picked up with no model call;
a settings file that cannot be used fails every file with its reason, never indexes one public."""

from __future__ import annotations

import json
import pathlib
import tempfile

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.ingest import sources
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.ingest.sources import MAX_SETTINGS_BYTES, MAX_SIDECAR_BYTES, SIDECAR_SUFFIX, SOURCE_FILES
from lightfoot_pipeline.operations.sync import sync
from lightfoot_pipeline.permissions.principals import Principal, principal_of
from lightfoot_pipeline.permissions.views import reader_view
from lightfoot_pipeline.retrieval.retrieve import Retriever
from lightfoot_pipeline.settings import ChunkSettings
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import DOCUMENT_READERS, DOCUMENTS

CHUNKING = ChunkSettings(tokens=60, overlap=12)
FILES = {"readme.txt": "Harbor", "legal/contract.txt": "Quarry", "legal/public/notice.txt": "Orchard",
         "hr/review.txt": "Lantern"}


class CountingExtractor(ReplayExtractor):
    """Replays one recorded extraction per file and counts the passages it is asked for."""

    def __init__(self, files: dict[str, str] = FILES) -> None:
        super().__init__({f"src:{path}": {"entities": [{"name": word, "type": "place", "description": None}],
                                          "facts": []} for path, word in files.items()})
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


def run(store, folder, embedder, files=FILES, link=True):
    """A sync with an extractor that counts the passages it is asked for; ``link=False`` leaves
    the graph to the graph stage (readers are the per-document stage's), which is quicker."""
    extractor = CountingExtractor(files)
    report = sync(store, str(folder), extractor, embedder if link else None, chunking=CHUNKING, link=link)
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


def test_a_broken_settings_file_fails_its_files_and_keeps_their_stored_documents(store, source, hashing_embedder):
    settings_file(source, {"readers": {"legal/": ["legal"]}})
    run(store, source, hashing_embedder)
    before = readers(store)
    (source / "lightfoot.json").write_text('{"readers": {"legal/": ["legal"]')  # cut short
    report, _ = run(store, source, hashing_embedder)
    assert len(report.failed) == 4 and readers(store) == before, "kept as they were, never indexed public instead"
    assert report.kept == sorted(before)
    again, asked = run(store, source, hashing_embedder)
    assert asked == 0 and len(again.failed) == 4 and again.commits == [], "the same broken file: nothing to do"
    settings_file(source, {"readers": {"legal/": ["legal", "hr"]}})
    fixed, asked = run(store, source, hashing_embedder)
    assert not fixed.failed and asked == 0 and store.read(DOCUMENTS.name).height == 4
    assert readers(store)["src:legal/contract.txt"] == "hr,legal"


def test_a_sidecar_with_readers_that_are_not_group_names_fails_its_file_alone(store, source, hashing_embedder):
    (source / "readme.txt.lightfoot.json").write_text(json.dumps({"readers": [3]}))
    report, _ = run(store, source, hashing_embedder)
    assert [f["doc_id"] for f in report.failed] == ["src:readme.txt"]
    assert "its sidecar's readers" in report.failed[0]["reason"]
    assert store.read(DOCUMENTS.name).filter(pl.col("doc_id") == "src:readme.txt").height == 0
    assert store.read(DOCUMENTS.name).height == 3


# -- readers fail closed: a sidecar that cannot be used whole ------------------------------------

HOSTILE = {"memo.txt": "Quarry", "readme.txt": "Harbor", "notes.txt": "Lantern", "new.txt": "Orchard"}


def hostile_source(folder):
    """memo.txt (its sidecar names legal), readme.txt (public) and notes.txt (its sidecar names hr)."""
    folder.mkdir()
    for path in ("memo.txt", "readme.txt", "notes.txt"):
        (folder / path).write_text(f"{HOSTILE[path]} is a place named in this short file about {HOSTILE[path]}.")
    (folder / "memo.txt.lightfoot.json").write_text(json.dumps({"readers": ["legal"]}))
    (folder / "notes.txt.lightfoot.json").write_text(json.dumps({"readers": ["hr"]}))
    return folder


def _link(target):
    def make(sidecar, tmp_path, monkeypatch):
        sidecar.symlink_to(target(tmp_path))
    return make


def _unreadable(sidecar, tmp_path, monkeypatch):
    sidecar.write_text(json.dumps({"readers": ["legal"]}))
    opened = sources.open_source_file

    def refuse(fs, listed):  # a file mode alone would not stop a test run as root
        if isinstance(listed, str) and listed == str(sidecar):
            raise PermissionError(13, "Permission denied")
        return opened(fs, listed)
    monkeypatch.setattr(sources, "open_source_file", refuse)


def _written(content):
    def make(sidecar, tmp_path, monkeypatch):
        sidecar.write_text(content)
    return make


# Each breaks the sidecar at the path given; the outside file names a valid, wider set of readers.
BROKEN_SIDECARS = {
    "link out": (_link(lambda tmp: tmp / "outside" / "side_legal.json"), "a symbolic link out of the source"),
    "link in": (_link(lambda tmp: tmp / "src" / "notes.txt.lightfoot.json"), "a symbolic link, not a file of its own"),
    "dangling": (_link(lambda tmp: tmp / "nowhere.json"), "a symbolic link to nothing"),
    "unreadable": (_unreadable, "cannot be read: Permission denied"),
    "oversized": (_written(json.dumps({"readers": ["public"], "title": "x" * MAX_SIDECAR_BYTES})),
                  f"over the limit of {MAX_SIDECAR_BYTES:,} bytes"),
    "invalid": (_written('{"readers": ["public"'), "is not JSON"),
    "wrong shape": (_written(json.dumps(["public"])), "must be an object with only title, retention_until"),
    "reader of the wrong shape": (_written(json.dumps({"readers": {"public": True}})),
                                  "readers must be a list of group names"),
    # The reserved words: the operator's group is no document's reader, and nobody says no reader.
    "operator as a reader": (_written(json.dumps({"readers": ["*"]})), "'*' is a reserved word"),
    "nobody beside public": (_written(json.dumps({"readers": ["nobody", "public"]})),
                             "'nobody' means no reader and cannot be named beside 'public'"),
}


@pytest.mark.parametrize("case", list(BROKEN_SIDECARS))
def test_a_sidecar_that_cannot_be_used_fails_its_file_and_keeps_its_stored_document(
        case, store, tmp_path, hashing_embedder, monkeypatch):
    """The file fails with the reason; its stored document keeps the readers it had (never the
    default's public); a new file with such a sidecar is not indexed; once the sidecar is fixed,
    the next sync gives the readers it names with no model call for the text already extracted."""
    folder = hostile_source(tmp_path / "src")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "side_legal.json").write_text(json.dumps({"readers": ["public"]}))
    first, asked = run(store, folder, hashing_embedder, HOSTILE, link=False)
    assert not first.failed and asked == 3 and readers(store)["src:memo.txt"] == "legal"

    break_sidecar, reason = BROKEN_SIDECARS[case]
    (folder / "new.txt").write_text("Orchard is a place named in this short file about Orchard.")
    for name in ("memo.txt", "new.txt"):
        sidecar = folder / f"{name}{SIDECAR_SUFFIX}"
        sidecar.unlink(missing_ok=True)
        break_sidecar(sidecar, tmp_path, monkeypatch)
    broken, asked = run(store, folder, hashing_embedder, HOSTILE, link=False)
    reasons = {f["doc_id"]: f["reason"] for f in broken.failed}
    assert set(reasons) == {"src:memo.txt", "src:new.txt"} and asked == 0, broken.failed
    assert broken.kept == ["src:memo.txt"], "the stored memo stays, as it was; the new file is not indexed"
    assert all(reason in r and "sidecar" in r for r in reasons.values()), reasons
    assert readers(store) == {"src:memo.txt": "legal", "src:readme.txt": "public", "src:notes.txt": "hr"}
    records = dict(store.read(SOURCE_FILES.name).select("doc_id", "reason").iter_rows())
    assert records["src:memo.txt"] == reasons["src:memo.txt"], "the reason is recorded in the store"
    again, asked = run(store, folder, hashing_embedder, HOSTILE, link=False)
    assert asked == 0 and again.commits == [] and len(again.failed) == 2, "the same broken sidecar: nothing to do"

    monkeypatch.undo()
    for name in ("memo.txt", "new.txt"):
        sidecar = folder / f"{name}{SIDECAR_SUFFIX}"
        sidecar.unlink()
        sidecar.write_text(json.dumps({"readers": ["legal", "hr"]}))
    fixed, asked = run(store, folder, hashing_embedder, HOSTILE, link=False)
    assert not fixed.failed and asked == 1, "only the new file's text reaches the model"
    assert fixed.readers_changed == ["src:memo.txt"]
    assert readers(store)["src:memo.txt"] == readers(store)["src:new.txt"] == "hr,legal"


def test_a_sidecar_linked_out_of_the_source_serves_its_text_to_no_one_outside_its_readers(
        store, tmp_path, hashing_embedder):
    """The issue's case: a restricted memo whose sidecar is replaced by a link out of the source is
    not answered to a principal of no group, and stays readable to its group."""
    folder = hostile_source(tmp_path / "src")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "side_legal.json").write_text(json.dumps({"readers": ["public"]}))
    run(store, folder, hashing_embedder, HOSTILE)
    (folder / "memo.txt.lightfoot.json").unlink()
    (folder / "memo.txt.lightfoot.json").symlink_to(tmp_path / "outside" / "side_legal.json")
    report, _ = run(store, folder, hashing_embedder, HOSTILE)
    assert [f["doc_id"] for f in report.failed] == ["src:memo.txt"]
    export_snapshot(store, hashing_embedder)
    snapshot = load_snapshot(store)

    def served_to(principal):
        view = reader_view(snapshot, principal).snapshot
        hits = Retriever(view, hashing_embedder).retrieve("Quarry is a place", top_k=5).passages
        return [h.doc_id for h in hits], set(view.passages.get_column("doc_id"))

    ranked, held = served_to(Principal("anyone", ()))
    assert ranked and "src:memo.txt" not in ranked and "src:memo.txt" not in held
    ranked, _ = served_to(Principal("counsel", ("legal",)))
    assert ranked[0] == "src:memo.txt"


def test_nobody_in_a_sidecar_or_the_settings_file_is_no_reader_not_a_group(store, source, hashing_embedder):
    settings_file(source, {"readers": {"": ["nobody"]}})
    (source / "readme.txt.lightfoot.json").write_text(json.dumps({"readers": "Nobody"}))
    report, _ = run(store, source, hashing_embedder)
    assert not report.failed and set(readers(store).values()) == {""}, "the empty set: the operator alone"
    with pytest.raises(LightfootError, match="'nobody' is a reserved word"):
        principal_of("nobody")


def test_a_settings_file_that_links_into_the_source_fails_every_file(store, source, hashing_embedder):
    (source / "legal" / "settings.json").write_text(json.dumps({"readers": {"": ["public"]}}))
    (source / "lightfoot.json").symlink_to(source / "legal" / "settings.json")
    report, asked = run(store, source, hashing_embedder)
    assert asked == 0 and {f["reason"] for f in report.failed} == {
        "the source's lightfoot.json cannot be used: a symbolic link, not a file of its own"}
    assert len(report.failed) == 5 and store.read(DOCUMENTS.name).height == 0


# -- the property: readers are never wider than the valid inputs give ----------------------------

PROPERTY_FILES = ("a.txt", "b/c.txt")
# A sidecar's content and the readers it gives (None: it names none), or a hostile one (HOSTILE_*).
VALID_SIDECARS = [
    ({"title": "T"}, None), ({"readers": ["legal"]}, "legal"), ({"readers": "HR, legal"}, "hr,legal"),
    ({"readers": ["nobody"]}, ""), ({"readers": []}, ""), ({"readers": ["public"]}, "public"),
]
HOSTILE_SIDECARS = ["not json", "operator", "nobody and a group", "list", "link out", "link in", "dangling"]
SETTINGS = [  # a settings file's readers by prefix; a string is a hostile one
    {"": ["hr"]}, {"a": ["legal"], "": ["public"]}, {"b/": ["nobody"]}, {"": "legal,hr", "b/c": "public"},
    "not json", "link out", "nobody and a group",
]
STATE = st.fixed_dictionaries({
    "default": st.sampled_from(["public", "nobody"]),
    "settings": st.none() | st.sampled_from(SETTINGS),
    "sidecars": st.tuples(*[st.none() | st.sampled_from(range(len(VALID_SIDECARS))) | st.sampled_from(HOSTILE_SIDECARS)
                            for _ in PROPERTY_FILES]),
})


def _put(path, value, root):
    """Write ``value`` (JSON, or a hostile kind's stand-in) at ``path``, replacing what is there."""
    if path.is_symlink() or path.exists():
        path.unlink()
    outside = root / "outside.json"
    if value == "not json":
        path.write_text('{"readers": ["public"')
    elif value == "operator":
        path.write_text(json.dumps({"readers": ["*"]}))
    elif value == "nobody and a group":
        path.write_text(json.dumps({"readers": ["nobody", "legal"]} if path.name != "lightfoot.json"
                                   else {"readers": {"": ["nobody", "legal"]}}))
    elif value == "list":
        path.write_text(json.dumps(["public"]))
    elif value == "link out":
        path.symlink_to(outside)
    elif value == "link in":
        path.symlink_to(root / "src" / ".shared" / "side.json")
    elif value == "dangling":
        path.symlink_to(root / "gone.json")
    else:
        path.write_text(json.dumps(value))


def _expected(state, before: dict[str, str]) -> dict[str, str]:
    """What the readers must be after a sync of ``state``: a file whose settings or sidecar cannot
    be used keeps what it had (or stays out); the others get exactly what the valid inputs say."""
    settings = state["settings"]
    expected = {}
    for path, sidecar in zip(PROPERTY_FILES, state["sidecars"], strict=True):
        doc_id = f"src:{path}"
        if isinstance(settings, str) or isinstance(sidecar, str):
            if doc_id in before:
                expected[doc_id] = before[doc_id]
            continue
        named = VALID_SIDECARS[sidecar][1] if sidecar is not None else None
        if named is None and settings is not None:
            prefixes = [p for p in settings if path.startswith(p)]
            if prefixes:
                groups = settings[max(prefixes, key=len)]
                groups = groups.split(",") if isinstance(groups, str) else groups
                named = ",".join(sorted(g for g in groups if g != "nobody"))
        expected[doc_id] = named if named is not None else ("public" if state["default"] == "public" else "")
    return expected


@settings(deadline=None)
@given(states=st.lists(STATE, min_size=2, max_size=2))
def test_no_synced_document_has_readers_wider_than_its_valid_inputs_give(states):
    """Random sources, sidecars and settings files, synced twice into one store: every document's
    readers are exactly what its valid sidecar, else settings prefix, else the default give, or,
    when an input cannot be used, what it had before (never the default's or a link's instead)."""
    with tempfile.TemporaryDirectory() as scratch, pytest.MonkeyPatch.context() as patch:
        root = pathlib.Path(scratch)
        folder = root / "src"
        (folder / "b").mkdir(parents=True)
        (folder / ".shared").mkdir()
        (folder / ".shared" / "side.json").write_text(json.dumps({"readers": ["public"]}))
        (root / "outside.json").write_text(json.dumps({"readers": ["public"]}))
        for path in PROPERTY_FILES:
            (folder / path).write_text(f"Harbor is a place named in the file {path}.")
        store = Store(str(root / "store"))
        before: dict[str, str] = {}
        for state in states:
            patch.setenv("LIGHTFOOT_DEFAULT_READERS", state["default"])
            settings = state["settings"]
            if settings is None:
                (folder / "lightfoot.json").unlink(missing_ok=True)
            else:
                _put(folder / "lightfoot.json", {"readers": settings} if isinstance(settings, dict) else settings,
                     root)
            for path, sidecar in zip(PROPERTY_FILES, state["sidecars"], strict=True):
                at = folder / f"{path}{SIDECAR_SUFFIX}"
                if sidecar is None:
                    at.unlink(missing_ok=True)
                else:
                    _put(at, VALID_SIDECARS[sidecar][0] if isinstance(sidecar, int) else sidecar, root)
            extractor = ReplayExtractor({f"src:{path}": {"entities": [], "facts": []} for path in PROPERTY_FILES})
            sync(store, str(folder), extractor, None, chunking=CHUNKING, link=False)
            expected = _expected(state, before)
            assert readers(store) == expected, state
            before = expected


def test_a_sidecar_swapped_for_a_link_after_the_listing_is_not_followed(tmp_path):
    """The sidecar is opened without following a link: one swapped in between the listing and the
    read fails its file (no exception, no readers from the link's target)."""
    import pyarrow.fs as pafs

    folder = hostile_source(tmp_path / "src")
    (tmp_path / "outside.json").write_text(json.dumps({"readers": ["public"]}))
    listed = {f.relative: f for f in sources.list_source(pafs.LocalFileSystem(), str(folder), "src")}
    (folder / "memo.txt.lightfoot.json").unlink()
    (folder / "memo.txt.lightfoot.json").symlink_to(tmp_path / "outside.json")
    sidecar = sources.sidecar_hash(pafs.LocalFileSystem(), listed["memo.txt"])
    assert sidecar.data is None
    assert sidecar.problem.startswith("its sidecar (.lightfoot.json) cannot be used: cannot be read")
    outcome = sources.read_source_file(pafs.LocalFileSystem(), str(folder), listed["memo.txt"], CHUNKING, sidecar)
    assert outcome.failed and outcome.keeps_stored and outcome.document is None
