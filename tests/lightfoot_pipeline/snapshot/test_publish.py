"""Check, then publish: a staged snapshot becomes what services load only when its checks pass.

On the small corpus of test_snapshot.py with one document only ``legal`` reads: the permission
check runs on the staged copy (``lightfoot snapshot``'s default), a view made to leak keeps the
staged snapshot unpublished while a running service keeps the previous one, ``lightfoot status``
says why, and an erasure leaves no staged snapshot holding the erased document.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.cli import main
from lightfoot_pipeline.evaluation import permission_audit
from lightfoot_pipeline.evaluation.permission_audit import PERMISSION_CHECK, permission_check
from lightfoot_pipeline.permissions import views
from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.service.queries import QueryService
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.snapshot.export import publish_checked
from lightfoot_pipeline.snapshot.format import latest_snapshot
from lightfoot_pipeline.snapshot.verdict import CheckVerdict, unpublished_snapshot
from lightfoot_pipeline.store.store import Store
from tests.lightfoot_pipeline.permissions.conftest import write_readers
from tests.lightfoot_pipeline.snapshot.test_snapshot import CANARY, build


@pytest.fixture(scope="module")
def restricted_once(tmp_path_factory, hashing_embedder):
    """The corpus with d-secret read by legal alone, and a published snapshot that passed its check
    (built once per module; each test changes a copy)."""
    store = Store(str(tmp_path_factory.mktemp("publish") / "store"))
    build(store, hashing_embedder)
    write_readers(store, {"d-secret": ("legal",)})
    first = publish_checked(store, hashing_embedder, [permission_check(lambda: hashing_embedder, IndexSettings())])
    assert first.published and not first.kept
    (check,) = first.verdict.checks
    assert check.name == PERMISSION_CHECK and check.passed and check.metadata["principals"] == 2
    assert json.dumps(check.metadata).count(CANARY) == 0, "ids, counts and digests only"
    return Path(store.uri), first.info


@pytest.fixture
def store(restricted_once, tmp_path):
    shutil.copytree(restricted_once[0], tmp_path / "store")
    return Store(str(tmp_path / "store"))


@pytest.fixture
def restricted(restricted_once, store):
    """The published snapshot of the test's copy (the module's, found under the copy's root)."""
    published = latest_snapshot(store)
    assert published.snapshot_id == restricted_once[1].snapshot_id
    return published


def leak(monkeypatch) -> None:
    """Every view reads what legal reads too: the permission check must fail."""
    leaky = lambda snapshot, principal: views.reader_view(snapshot, Principal(principal.name, (*principal.groups, "legal")))  # noqa: E731
    monkeypatch.setattr(permission_audit, "reader_view", leaky)


@pytest.mark.slow
def test_a_staged_snapshot_that_fails_its_permission_check_is_not_served_and_status_says_why(
    store, hashing_embedder, restricted, monkeypatch, capsys
):
    service = QueryService(store, hashing_embedder, charge_ledger=False)
    with service:
        assert service.refresh() and service.snapshot.snapshot_id == restricted.snapshot_id
        operations.delete(store, ["d-lonely"])  # a change to export
        leak(monkeypatch)
        assert main(["snapshot", "--store", store.uri]) == 1
        printed = capsys.readouterr().err
        staged = unpublished_snapshot(store)
        assert staged is not None and staged.snapshot_id != restricted.snapshot_id
        assert f"staged snapshot {staged.snapshot_id} not published: {PERMISSION_CHECK} failed: views differ" in printed
        assert f"services keep serving {restricted.snapshot_id}" in printed
        assert latest_snapshot(store) == restricted
        assert not service.refresh() and service.snapshot.snapshot_id == restricted.snapshot_id

        assert main(["status", "--store", store.uri]) == 0
        assert f"staged snapshot {staged.snapshot_id} not published: {PERMISSION_CHECK} failed: views differ from a " \
               "fresh store of their readable documents: public" in capsys.readouterr().out
        assert main(["status", "--store", store.uri, "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)["snapshot"]
        assert shown["snapshot_id"] == restricted.snapshot_id
        assert shown["unpublished"]["snapshot_id"] == staged.snapshot_id
        assert shown["unpublished"]["checks"] == [{"name": PERMISSION_CHECK, "passed": False,
                                                   "reason": staged.reason.split(" failed: ", 1)[1], "skipped": None}]
        assert CANARY not in json.dumps(shown)

        # Views that read what they should: the next export is published, served, and the rejected one pruned.
        monkeypatch.undo()
        assert main(["snapshot", "--store", store.uri]) == 0
        assert f"check {PERMISSION_CHECK}: passed" in capsys.readouterr().out
        published = latest_snapshot(store)
        assert published.snapshot_id > staged.snapshot_id and unpublished_snapshot(store) is None
        assert not (Path(store.uri) / "snapshots" / staged.snapshot_id).exists()
        assert service.refresh() and service.snapshot.snapshot_id == published.snapshot_id


def test_turning_the_check_off_is_explicit_and_recorded(store, hashing_embedder, restricted, monkeypatch, capsys):
    operations.delete(store, ["d-lonely"])
    leak(monkeypatch)
    assert main(["snapshot", "--store", store.uri, "--no-permission-check", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["published"] and latest_snapshot(store).snapshot_id == shown["snapshot_id"]
    assert [(c["name"], c["passed"], c["skipped"]) for c in shown["checks"]] == [
        (PERMISSION_CHECK, False, "turned off (--no-permission-check)")]


def test_a_check_that_cannot_run_keeps_the_snapshot_unpublished(store, hashing_embedder, restricted):
    def broken(store, staged):
        raise RuntimeError(f"cannot read {CANARY}")

    operations.delete(store, ["d-lonely"])
    report = publish_checked(store, hashing_embedder, [broken])
    assert not report.published and report.served == restricted and latest_snapshot(store) == restricted
    assert report.reason == "broken failed: the check could not run (RuntimeError)", "the error's kind, not its text"


def test_a_snapshot_checked_while_a_newer_one_was_published_is_not_published_over_it(
    store, hashing_embedder, restricted
):
    operations.delete(store, ["d-lonely"])
    newer = {}

    def meanwhile(store, staged):  # another export stages, passes and publishes while this one is checked
        operations.delete(store, ["d-engine"])
        newer["info"] = publish_checked(store, hashing_embedder).info
        return CheckVerdict("meanwhile", passed=True)

    report = publish_checked(store, hashing_embedder, [meanwhile])
    assert not report.published and "was published first" in report.reason
    assert latest_snapshot(store) == newer["info"] == report.served


@pytest.mark.slow  # an erasure and a replacement export: about 2.5 s
def test_an_erasure_leaves_no_staged_snapshot_holding_the_document(store, hashing_embedder, restricted, monkeypatch):
    operations.delete(store, ["d-lonely"])
    leak(monkeypatch)
    staged = publish_checked(store, hashing_embedder, [permission_check(lambda: hashing_embedder, IndexSettings())])
    assert not staged.published
    holding = Path(store.uri) / "snapshots" / staged.info.snapshot_id
    assert CANARY.encode() in (holding / "passages.arrow").read_bytes()
    monkeypatch.undo()

    operations.delete(store, ["d-secret"], erase=True)
    assert not holding.exists()
    assert unpublished_snapshot(store) is None
    for path in (Path(store.uri) / "snapshots").rglob("*"):
        assert not path.is_file() or CANARY.encode() not in path.read_bytes(), path
    assert latest_snapshot(store) is not None, "a replacement without the document is published"
