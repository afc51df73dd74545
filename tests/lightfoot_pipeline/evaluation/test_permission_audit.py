"""The permission audit: every principal's view against a fresh store of its readable documents,
through ``lightfoot audit-permissions`` and the engine; a view that leaks is found."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lightfoot_pipeline.cli import main
from lightfoot_pipeline.evaluation import permission_audit
from lightfoot_pipeline.evaluation.deletion_trial import write_subset
from lightfoot_pipeline.evaluation.permission_audit import (
    MAX_AUDIT_PRINCIPALS,
    audit_permissions,
    dataset_readers,
    passage_questions,
    principals_from_readers,
    snapshot_readers,
    store_reference,
)
from lightfoot_pipeline.ingest.dataset import CORPUS_FILE, DatasetError, load_corpus
from lightfoot_pipeline.permissions import views
from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.snapshot.export import export_snapshot
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store.store import Store
from tests.lightfoot_pipeline.permissions.conftest import PRINCIPALS, seeded_readers


def restricted_dataset(target: Path, sample_dir: Path, documents: int | None = None) -> dict[str, tuple[str, ...]]:
    """A copy of the bundled sample (its first ``documents``, else all) whose corpus.jsonl gives each
    document the readers of ``seeded_readers``; returns them."""
    rows = [json.loads(line) for line in (sample_dir / CORPUS_FILE).read_text().splitlines() if line.strip()]
    rows = rows[:documents] if documents else rows
    write_subset(sample_dir, {r["doc_id"] for r in rows}, target)
    readers = seeded_readers([r["doc_id"] for r in rows])
    (target / CORPUS_FILE).write_text("".join(json.dumps({**r, "readers": list(readers[r["doc_id"]])}) + "\n"
                                              for r in rows))
    shutil.copy(sample_dir / "questions-dev.jsonl", target / "questions-dev.jsonl")
    return readers


def groups_file(path: Path, principals=PRINCIPALS) -> Path:
    path.write_text("".join(json.dumps(p.as_dict()) + "\n" for p in principals))
    return path


@pytest.fixture
def small_restricted(tmp_path, sample_dir):
    dataset = tmp_path / "dataset"
    readers = restricted_dataset(dataset, sample_dir, documents=120)
    return dataset, readers, groups_file(tmp_path / "groups.jsonl")


@pytest.mark.slow
def test_audit_permissions_on_the_bundled_sample_finds_every_view_exact(tmp_path, sample_dir):
    dataset, out = tmp_path / "dataset", tmp_path / "audit.json"
    readers = restricted_dataset(dataset, sample_dir)
    result = subprocess.run(
        [sys.executable, "-m", "lightfoot_pipeline.cli", "audit-permissions", "--dataset", str(dataset),
         "--groups", str(groups_file(tmp_path / "groups.jsonl")), "--max-questions", "5", "--embedder", "hashing",
         "--out", str(out), "--store", str(tmp_path / "store")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "equal=true" in result.stdout and "0 model calls" in result.stdout
    audit = json.loads(out.read_text())
    assert audit["equal"] is True and audit["model_calls"] == 0 and audit["documents"] == 1890
    assert audit["reader_sets"] == 5
    assert [p["principal"] for p in audit["principals"]] == [p.name for p in PRINCIPALS]
    for entry, principal in zip(audit["principals"], PRINCIPALS, strict=True):
        assert entry["groups"] == list(principal.groups)
        assert entry["documents"] == sum(1 for groups in readers.values() if principal.may_read(groups))
        assert entry["equal"] is True and entry["documents_equal"] is True
        assert entry["questions"] == 5 and entry["differences"] == [] and entry["differing_questions"] == 0
        assert entry["parts"] == {"passages": 0, "scores": 0, "seed_facts": 0, "explanation": 0}
    assert len({p["digest"] for p in audit["principals"]}) == 4, "each view retrieves its own documents"


def _leaking_documents(snapshot, principal):
    """A wrong view: the principal's groups and legal's, so that a staff member reads legal's documents."""
    return views.reader_view(snapshot, Principal(principal.name, (*principal.groups, "legal")))


def _leaking_retrieval(snapshot, principal):
    """A wrong view that names the right documents but retrieves from the whole snapshot."""
    right = views.reader_view(snapshot, principal)
    return views.ReaderView(right.key, snapshot, right.documents, right.tables)


@pytest.mark.parametrize("wrong_view", [_leaking_documents, _leaking_retrieval], ids=["documents", "retrieval"])
@pytest.mark.slow
def test_a_view_that_leaks_is_not_equal_and_fails_the_command(wrong_view, small_restricted, tmp_path, monkeypatch,
                                                               capsys):
    dataset, _, _ = small_restricted
    staff = groups_file(tmp_path / "staff.jsonl", [Principal("staff-member", ("staff",))])
    monkeypatch.setattr(permission_audit, "reader_view", wrong_view)
    out = tmp_path / "audit.json"
    code = main(["audit-permissions", "--dataset", str(dataset), "--groups", str(staff), "--max-questions", "8",
                 "--embedder", "hashing", "--out", str(out)])
    assert code == 1
    assert "equal=false" in capsys.readouterr().out
    audit = json.loads(out.read_text())
    (entry,) = audit["principals"]
    assert audit["equal"] is False and entry["equal"] is False and entry["differences"]
    if wrong_view is _leaking_documents:
        assert entry["documents_equal"] is False and entry["differences"][0]["part"] == "documents"
    else:
        assert entry["documents_equal"] is True
    assert entry["differing_questions"] > 0 and entry["parts"]["explanation"] == entry["differing_questions"]
    difference = next(d for d in entry["differences"] if "question" in d)
    assert set(difference) == {"question", "parts", "view_passages", "fresh_passages"}, "ids, not text"


@pytest.mark.slow
def test_views_of_a_store_match_fresh_rebuilds_from_its_own_extractions(small_restricted, tmp_path,
                                                                        hashing_embedder, sample_records):
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.ingest.dataset import load_corpus
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor

    dataset, readers, _ = small_restricted
    store = Store(str(tmp_path / "store"))
    operations.ingest(store, load_corpus(dataset), ReplayExtractor(sample_records), hashing_embedder)
    export_snapshot(store, hashing_embedder)
    snapshot = load_snapshot(store)
    assert snapshot_readers(snapshot) == readers
    principals = principals_from_readers(readers, 3)
    held = {g: sum(1 for groups in readers.values() if g in groups) for g in ("legal", "staff")}
    assert [p.name for p in principals] == ["public", *sorted(held, key=lambda g: (-held[g], g))]
    assert [p.groups for p in principals] == [(), *((p.name,) for p in principals[1:])]
    questions = passage_questions(snapshot, 4)
    assert questions == passage_questions(snapshot, 4) and len({q.question for q in questions}) == 4
    audits = audit_permissions(snapshot, principals, questions, hashing_embedder,
                               store_reference(store, hashing_embedder), tmp_path / "work")
    assert [a.equal for a in audits] == [True, True, True]
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir()), "fresh stores removed"


def test_a_dataset_without_readers_has_nothing_to_audit(tmp_path, sample_dir, capsys):
    dataset = tmp_path / "plain"
    rows = (sample_dir / CORPUS_FILE).read_text().splitlines()[:20]
    write_subset(sample_dir, {json.loads(r)["doc_id"] for r in rows}, dataset)
    assert dataset_readers(load_corpus(dataset)) is None
    code = main(["audit-permissions", "--dataset", str(dataset), "--groups", str(groups_file(tmp_path / "g.jsonl")),
                 "--questions", str(sample_dir / "questions-dev.jsonl"), "--embedder", "hashing"])
    assert code == 2
    err = capsys.readouterr().err
    assert "names no document's readers" in err and "nothing to audit" in err


def test_the_audit_is_bounded_before_it_builds_anything(small_restricted, tmp_path, capsys):
    dataset, _, _ = small_restricted
    many = groups_file(tmp_path / "many.jsonl",
                       [Principal(f"p{i}", ("staff",)) for i in range(MAX_AUDIT_PRINCIPALS + 1)])
    store = tmp_path / "store"
    assert main(["audit-permissions", "--dataset", str(dataset), "--groups", str(many), "--embedder", "hashing",
                 "--store", str(store)]) == 2
    assert f"at most {MAX_AUDIT_PRINCIPALS}" in capsys.readouterr().err and not store.exists()
    with pytest.raises(SystemExit):
        main(["audit-permissions", "--dataset", str(dataset), "--groups", str(many), "--max-questions", "501"])
    assert "1 to 500 questions" in capsys.readouterr().err


def test_dataset_readers_take_a_list_or_a_string_and_default_the_rest(tmp_path, monkeypatch):
    monkeypatch.delenv("LIGHTFOOT_DEFAULT_READERS", raising=False)
    (tmp_path / CORPUS_FILE).write_text(
        '{"doc_id": "a", "text": "x", "readers": ["Staff", "legal"]}\n{"doc_id": "b", "text": "y", "readers": "hr"}\n'
        '{"doc_id": "c", "text": "z"}\n{"doc_id": "d", "text": "w", "readers": []}\n')
    assert dataset_readers(load_corpus(tmp_path)) == {"a": ("legal", "staff"), "b": ("hr",), "c": ("public",),
                                                      "d": ()}
    (tmp_path / CORPUS_FILE).write_text('{"doc_id": "a", "text": "x", "readers": ["no spaces allowed"]}\n')
    with pytest.raises(DatasetError, match=r"corpus\.jsonl:1"):
        load_corpus(tmp_path)



@pytest.mark.slow
def test_audit_permissions_checks_an_existing_store_as_its_readers_are_now(tmp_path, capsys, monkeypatch,
                                                                           hashing_embedder):
    """``--store`` of an existing store: after ``lightfoot readers`` changed it, each principal's
    view of its current state is compared with a fresh build of its readable documents (no model
    call); a view that leaks is still found."""
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.ingest.dataset import Document
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor

    names = ["Harbor Bridge", "Quarry Lane", "Orchard Hill", "Lantern Square"]
    documents, records = [], {}
    for i, (a, b) in enumerate(zip(names, names[1:] + names[:1], strict=True)):
        documents.append(Document(f"doc-{i}", f"T{i}", f"{a} stands beside {b} in passage {i}.",
                                  readers=("staff",) if i % 2 else ("public",)))
        records[f"doc-{i}"] = {"entities": [{"name": a, "type": "place", "description": None},
                                            {"name": b, "type": "place", "description": None}],
                               "facts": [[a, "stands beside", b]]}
    store = str(tmp_path / "store")
    operations.ingest(Store(store), documents, ReplayExtractor(records), hashing_embedder)
    assert main(["readers", "doc-0", "--store", store, "--groups", "legal"]) == 0
    groups = groups_file(tmp_path / "groups.jsonl", [Principal("anyone", ()), Principal("counsel", ("legal",))])
    out = tmp_path / "audit.json"
    capsys.readouterr()
    args = ["audit-permissions", "--store", store, "--groups", str(groups), "--max-questions", "3", "--out", str(out)]
    assert main(args) == 0, capsys.readouterr()
    audit = json.loads(out.read_text())
    assert audit["equal"] is True and audit["model_calls"] == 0 and audit["documents"] == 4
    assert [(p["principal"], p["documents"]) for p in audit["principals"]] == [("anyone", 1), ("counsel", 2)], \
        "doc-0 is legal's now: the audit reads the store's readers as they are"
    monkeypatch.setattr(permission_audit, "reader_view", _leaking_documents)
    assert main(args) == 1 and json.loads(out.read_text())["equal"] is False


@pytest.mark.slow
def test_a_published_snapshot_says_why_it_is_not_audited_and_loads_no_model_for_it(
        small_restricted, tmp_path, hashing_embedder, sample_documents, sample_records):
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.ingest.dataset import load_corpus
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor
    from lightfoot_pipeline.settings import IndexSettings

    def no_model():
        raise AssertionError("no model is loaded when nothing is audited")

    public = Store(str(tmp_path / "public"))
    operations.ingest(public, sample_documents[:3], ReplayExtractor(sample_records), hashing_embedder)
    export_snapshot(public, hashing_embedder)
    found = permission_audit.audit_published_snapshot(public, no_model, IndexSettings())
    assert found.public and found.skipped is None and found.documents == 3 and found.audits == []

    dataset, _, _ = small_restricted
    store = Store(str(tmp_path / "store"))
    operations.ingest(store, load_corpus(dataset)[:12], ReplayExtractor(sample_records), hashing_embedder)
    export_snapshot(store, hashing_embedder)
    off = permission_audit.audit_published_snapshot(store, no_model, IndexSettings(), enabled=False)
    assert not off.public and off.skipped == "the permission audit is disabled in this run's config"
    large = permission_audit.audit_published_snapshot(store, no_model, IndexSettings(), document_limit=5)
    assert large.skipped.startswith("the snapshot holds 12 documents, more than the limit of 5")
