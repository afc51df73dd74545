"""One way to open a store's files: s3:// and s3a:// URIs, the endpoint's scheme and AWS_ALLOW_HTTP."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from lightfoot_pipeline.store.filesystem import open_filesystem, s3_filesystem
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
