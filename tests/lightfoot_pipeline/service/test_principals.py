"""Tokens name a principal and its groups: the tokens file's lines, old and new, the environment
token's groups, ``lightfoot serve-token --principal --groups``, a reload that changes a token's
groups, and the file failing closed on a line it cannot use."""

from __future__ import annotations

import hashlib
import io
import os
import re
import time

import pytest

from lightfoot_pipeline.cli import main
from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.service import auth
from lightfoot_pipeline.service.auth import AuthConfigError, Tokens, read_tokens_file, token_id, token_line

ALICE, BOB, CAROL = "alice-token-" + "a" * 24, "bob-token-" + "b" * 24, "carol-token-" + "c" * 24


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def test_a_tokens_file_names_principals_and_a_bare_digest_reads_public_documents(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"# the old format still reads\n{digest(ALICE)}\n{digest(BOB)} bob  # named, no group\n"
                    f"{digest(CAROL).upper()} carol Legal,staff\n")
    entries = read_tokens_file(path)
    bare = bytes.fromhex(digest(ALICE))
    assert entries == [(bare, Principal(token_id(bare), ())), (bytes.fromhex(digest(BOB)), Principal("bob", ())),
                       (bytes.fromhex(digest(CAROL)), Principal("carol", ("legal", "staff")))]
    tokens = Tokens(tokens_file=path)
    assert tokens.authenticate(CAROL).principal == Principal("carol", ("legal", "staff"))
    assert tokens.authenticate(ALICE).principal.groups == () and tokens.authenticate("x" * 20) is None
    assert tokens.authenticate_header(f"Bearer {BOB}")[1].principal.name == "bob"
    assert tokens.authenticate_header(None) == (False, None)
    assert tokens.authenticate_header("Bearer " + "z" * 20) == (True, None)
    assert [p.name for p in tokens.principals()] == sorted(["bob", "carol", token_id(bare)])


@pytest.mark.parametrize("line, why", [
    ("abc", "expected a SHA-256 digest"),
    (f"{digest(ALICE)} alice Not/Group", "is not a group name"),
    (f"{digest(ALICE)} -alice", "is not a principal name"),
    (f"{digest(ALICE)} alice staff extra", "expected DIGEST [PRINCIPAL [GROUP[,GROUP]]]"),
    (f"{digest(ALICE)} alice\n{digest(ALICE)} again", "on an earlier line too"),
    (f"{digest(ALICE)} alice nobody", "'nobody' is a reserved word"),
    (f"{digest(ALICE)} alice staff,Public", "'public' is a reserved word"),
])
def test_a_line_that_cannot_be_used_is_refused_with_its_reason(tmp_path, line, why):
    path = tmp_path / "tokens"
    path.write_text(line + "\n")
    with pytest.raises(AuthConfigError, match=re.escape(why)):
        read_tokens_file(path)


def test_a_reload_gives_a_token_new_groups_and_a_bad_line_revokes_every_token(tmp_path, monkeypatch):
    monkeypatch.setattr(auth, "RECHECK_S", 0.0)
    path = tmp_path / "tokens"
    path.write_text(token_line(ALICE, "alice") + "\n")
    tokens = Tokens(tokens_file=path)
    assert tokens.authenticate(ALICE).principal.groups == ()
    time.sleep(0.01)
    path.write_text(token_line(ALICE, "alice", "*") + "\n")
    assert tokens.authenticate(ALICE).principal.is_operator
    path.write_text(token_line(ALICE, "alice", "*") + f"\n{digest(BOB)} bob NOT/A/GROUP\n")
    assert tokens.authenticate(ALICE) is None, "fails closed"
    path.write_text(token_line(ALICE, "alice", "staff") + "\n")
    assert tokens.authenticate(ALICE).principal == Principal("alice", ("staff",))


def test_the_environment_token_reads_as_its_groups():
    tokens = Tokens.from_env({"LIGHTFOOT_SERVE_TOKEN": ALICE, "LIGHTFOOT_SERVE_TOKEN_GROUPS": "legal, staff"})
    assert tokens.authenticate(ALICE).principal == Principal(auth.ENV_PRINCIPAL, ("legal", "staff"))
    assert Tokens.from_env({"LIGHTFOOT_SERVE_TOKEN": ALICE}).authenticate(ALICE).principal.groups == ()
    with pytest.raises(AuthConfigError, match="LIGHTFOOT_SERVE_TOKEN_GROUPS"):
        Tokens.from_env({"LIGHTFOOT_SERVE_TOKEN": ALICE, "LIGHTFOOT_SERVE_TOKEN_GROUPS": "Not A Group!"})
    with pytest.raises(AuthConfigError, match="the groups name no token"):
        Tokens.from_env({"LIGHTFOOT_SERVE_TOKEN_GROUPS": "staff"})


def test_serve_token_prints_the_line_of_a_principal(capsys, monkeypatch, tmp_path):
    assert main(["serve-token", "--principal", "counsel", "--groups", "staff,legal"]) == 0
    out, err = capsys.readouterr()
    token, line = out.strip(), err.strip().splitlines()[-1]
    assert line == f"{digest(token)} counsel legal,staff"
    (tmp_path / "tokens").write_text(line + "\n")
    assert Tokens(tokens_file=tmp_path / "tokens").authenticate(token).principal == Principal("counsel",
                                                                                              ("legal", "staff"))
    monkeypatch.setattr("sys.stdin", io.StringIO(ALICE + "\n"))
    assert main(["serve-token", "--hash", "--principal", "ops", "--groups", "*"]) == 0
    assert capsys.readouterr().out.strip() == f"{digest(ALICE)} ops *"
    monkeypatch.setattr("sys.stdin", io.StringIO(ALICE + "\n"))
    assert main(["serve-token", "--hash"]) == 0
    assert capsys.readouterr().out.strip() == digest(ALICE), "the old line, unchanged"
    assert main(["serve-token", "--groups", "staff"]) == 2
    assert "--principal" in capsys.readouterr().err


def test_serve_as_is_for_a_service_without_tokens(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LIGHTFOOT_SERVE_TOKEN", ALICE)
    assert main(["serve", "--store", str(tmp_path / "store"), "--as", "staff"]) == 2
    assert "--as is whom a service without tokens answers as" in capsys.readouterr().err


def test_an_edit_that_keeps_the_size_and_modification_time_is_read(tmp_path, monkeypatch):
    """The tokens file is compared by its content's digest, not by its size and modification time."""
    monkeypatch.setattr(auth, "RECHECK_S", 0.0)
    path = tmp_path / "tokens"
    path.write_text(token_line(ALICE, "alice", "staff") + "\n")
    before = path.stat()
    tokens = Tokens(tokens_file=path)
    assert tokens.authenticate(ALICE).principal.groups == ("staff",)
    path.write_text(token_line(ALICE, "alice", "legal") + "\n")  # as long as the line it replaces
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert tokens.authenticate(ALICE).principal.groups == ("legal",)
