"""``lightfoot sync`` on the command line: the report, its JSON, failures and bad options."""

from __future__ import annotations

import json

import pytest

from lightfoot_pipeline import cli


@pytest.mark.slow
def test_sync_prints_what_it_did_and_exits_1_on_a_failed_file(tmp_path, chat_server, monkeypatch, capsys,
                                                              document_files):
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    monkeypatch.setenv("LIGHTFOOT_LLM_BACKOFF_S", "0.01")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_bytes(document_files.markdown("Guide", [("Start", ["Open the lid."])]))
    (folder / "scan.pdf").write_bytes(document_files.pdf(["Page one."], title="Scan"))
    argv = ["sync", "--store", str(tmp_path / "store"), "--source", str(folder), "--embedder", "hashing"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"synced {folder} into" in out and "2 files, 2 new, 0 changed, 0 unchanged, 0 removed, 0 failed" in out
    assert "model calls 2" in out

    (folder / "junk.txt").write_bytes(b"\xff\xfe\x00\x00" * 100)
    (folder / "scan.pdf").unlink()
    assert cli.main([*argv, "--json", "--erase"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["removed"] == ["docs:scan.pdf"] and report["new"] == ["docs:junk.txt"]
    assert report["failed"][0]["doc_id"] == "docs:junk.txt" and "binary content" in report["failed"][0]["reason"]
    assert report["model_calls"] == 0 and report["erase"]["documents"] == ["docs:scan.pdf"]


def test_sync_refuses_bad_options_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # never asked: nothing to extract
    argv = ["sync", "--store", str(tmp_path / "store"), "--source", str(tmp_path), "--embedder", "hashing"]
    assert cli.main([*argv, "--chunk-tokens", "50", "--chunk-overlap", "50"]) == 2
    assert "overlap must be a whole number from 0 to below tokens (50)" in capsys.readouterr().err
    assert cli.main([*argv[:3], "--source", str(tmp_path / "nowhere"), "--embedder", "hashing"]) == 2
    assert "is not a folder or prefix that exists" in capsys.readouterr().err


def test_a_sync_that_only_removes_files_needs_no_model_endpoint(tmp_path, chat_server, monkeypatch, capsys,
                                                                  document_files):
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_bytes(document_files.markdown("A", [("Start", ["Open the lid."])]))
    (folder / "b.md").write_bytes(document_files.markdown("B", [("Start", ["Close the lid."])]))
    argv = ["sync", "--store", str(tmp_path / "store"), "--source", str(folder), "--embedder", "hashing", "--json"]
    assert cli.main(argv) == 0
    capsys.readouterr()
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "LIGHTFOOT_LLM_BASE_URL", "LIGHTFOOT_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    (folder / "b.md").unlink()
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == ["docs:b.md"]
    assert cli.main([*argv[:3], "--source", str(tmp_path / "nowhere"), "--embedder", "hashing"]) == 2
    assert "is not a folder or prefix that exists" in capsys.readouterr().err
