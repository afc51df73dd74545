"""One way to open a store's files: s3:// and s3a:// URIs, the endpoint's scheme and AWS_ALLOW_HTTP;
many JSON files read and written at once."""

from __future__ import annotations

import json
import threading

import pyarrow.fs as pafs
import pytest

from lightfoot_pipeline.store import filesystem
from lightfoot_pipeline.store.filesystem import open_filesystem, read_json_files, s3_filesystem, write_json_files
from lightfoot_pipeline.store.log import StoreError


def settings_of(fs: pafs.S3FileSystem) -> dict:
    return fs.__reduce__()[1][0]  # the arguments pyarrow rebuilds the filesystem from


def options(object_store, endpoint: str, **more: str) -> dict[str, str]:
    return {"aws_access_key_id": object_store.env["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": object_store.env["AWS_SECRET_ACCESS_KEY"],
            "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, **more}


@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_an_endpoint_without_a_scheme_is_reached_over_http_when_allowed(object_store, s3_endpoint, scheme):
    host = s3_endpoint.removeprefix("http://")
    fs, path = open_filesystem(f"{scheme}://{object_store.bucket}/root/", options(object_store, host, AWS_ALLOW_HTTP="TRUE"))
    assert path == f"{object_store.bucket}/root"
    assert settings_of(fs)["scheme"] == "http" and settings_of(fs)["endpoint_override"] == host
    with fs.open_output_stream(f"{path}/hello.txt") as out:
        out.write(b"hello")
    assert object_store.keys("root/") == ["root/hello.txt"]


def test_the_endpoint_scheme_wins_and_https_is_the_default(object_store, s3_endpoint):
    host = s3_endpoint.removeprefix("http://")
    assert settings_of(s3_filesystem(options(object_store, s3_endpoint)))["scheme"] == "http"
    assert settings_of(s3_filesystem(options(object_store, f"https://{host}", AWS_ALLOW_HTTP="1")))["scheme"] == "https"
    assert settings_of(s3_filesystem(options(object_store, host)))["scheme"] == "https"
    assert settings_of(s3_filesystem(options(object_store, host, AWS_ALLOW_HTTP="false")))["scheme"] == "https"
    assert settings_of(s3_filesystem({"AWS_ENDPOINT": host, "AWS_ALLOW_HTTP": "yes"}))["endpoint_override"] == host


def test_local_paths_and_file_uris_are_the_local_filesystem(tmp_path):
    for uri in (str(tmp_path) + "/", f"file://{tmp_path}"):
        fs, path = open_filesystem(uri, {"AWS_REGION": "ignored"})
        assert isinstance(fs, pafs.LocalFileSystem) and path == str(tmp_path)


def test_a_uri_no_filesystem_serves_is_refused_saying_so():
    with pytest.raises(StoreError, match="cannot open 'nosuch://bucket/x'"):
        open_filesystem("nosuch://bucket/x")


def test_many_json_files_are_read_and_written_at_once_on_an_object_store(object_store, monkeypatch):
    fs, root = open_filesystem(object_store.uri("many"), dict(object_store.env))
    payloads = {f"{root}/docs/d-{i}.json": {"doc_id": f"d-{i}", "text": "é" * i} for i in range(40)}
    threads: set[str] = set()
    write = filesystem.write_json

    def noting(*args):
        threads.add(threading.current_thread().name)
        return write(*args)

    monkeypatch.setattr(filesystem, "write_json", noting)
    write_json_files(fs, payloads)
    assert len(threads) > 1, "written by several threads"
    missing = f"{root}/docs/d-none.json"
    assert read_json_files(fs, [*payloads, missing]) == payloads, "a missing file is left out"
    assert read_json_files(fs, []) == {}


def test_a_local_disk_reads_and_writes_them_one_after_another(tmp_path, monkeypatch):
    fs = pafs.LocalFileSystem()
    payloads = {f"{tmp_path}/docs/d-{i}.json": {"i": i} for i in range(10)}
    threads: set[str] = set()
    write = filesystem.write_json
    monkeypatch.setattr(filesystem, "write_json", lambda *a: (threads.add(threading.current_thread().name), write(*a)))
    write_json_files(fs, payloads)
    assert threads == {threading.current_thread().name}
    assert read_json_files(fs, payloads) == payloads


def test_a_file_that_is_not_json_fails_the_read_and_a_failed_write_the_writes(tmp_path):
    fs = pafs.LocalFileSystem()
    good = {f"{tmp_path}/a-{i}.json": {"i": i} for i in range(5)}
    write_json_files(fs, good)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(json.JSONDecodeError):
        read_json_files(fs, [*good, str(broken)])
    (tmp_path / "blocked").write_text("a file where a folder must be")
    with pytest.raises(OSError):
        write_json_files(fs, {f"{tmp_path}/blocked/c.json": {"i": 0},  # first: the writes after it still happen
                              **{f"{tmp_path}/b-{i}.json": {"i": i} for i in range(5)}})
    assert read_json_files(fs, [f"{tmp_path}/b-{i}.json" for i in range(5)]) == {
        f"{tmp_path}/b-{i}.json": {"i": i} for i in range(5)}, "the writes that could be done were done"
