"""Files under a store root or an inbox, on a local disk or an object store, through pyarrow.fs.

One function opens them all (:func:`open_filesystem`), so the landing area, the inboxes, the
serving snapshots and the retention policy file reach an object store the same way:

- ``s3://`` and ``s3a://`` URIs with ``storage_options`` (the keys the store takes, any case:
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL or
  AWS_ENDPOINT, AWS_ALLOW_HTTP) get an S3 filesystem built from them. The endpoint's own scheme
  (``http://minio:9000``) is used as given; an endpoint without one is reached over HTTPS, or over
  HTTP when AWS_ALLOW_HTTP is true (``true``, ``1`` or ``yes``);
- ``s3://`` and ``s3a://`` URIs without options, and other URIs, are opened by pyarrow from the
  URI and the environment (credentials, the bucket's region);
- a local path, or a ``file://`` URI, is the local filesystem.

JSON files are written whole (:func:`write_json`: to a temporary name, then moved into place),
so a reader sees the old file or the new one.
"""

from __future__ import annotations

import hashlib
import json
import time

import pyarrow as pa
import pyarrow.fs as pafs

from lightfoot_pipeline.store.log import StoreError

S3_SCHEMES = ("s3://", "s3a://")
_TRUE = {"1", "true", "yes"}


def open_filesystem(uri: str, storage_options: dict[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """A filesystem and the path within it (no trailing slash) for a local path or a URI."""
    if uri.startswith(S3_SCHEMES):
        path = uri.split("://", 1)[1].rstrip("/")
        if storage_options:
            return s3_filesystem(storage_options), path
        uri = f"s3://{path}"
    if "://" in uri and not uri.startswith("file://"):
        try:
            fs, path = pafs.FileSystem.from_uri(uri)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise StoreError(f"cannot open {uri!r}: {err}; use a local path or an s3:// URI") from err
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), uri.removeprefix("file://").rstrip("/")


def s3_filesystem(storage_options: dict[str, str]) -> pafs.S3FileSystem:
    """An S3 filesystem from the store's storage options (see the module docstring)."""
    options = {k.upper(): str(v) for k, v in storage_options.items()}
    endpoint = options.get("AWS_ENDPOINT_URL") or options.get("AWS_ENDPOINT")
    scheme = None
    if endpoint and "://" in endpoint:
        scheme, _, endpoint = endpoint.partition("://")
    if scheme is None:
        scheme = "http" if options.get("AWS_ALLOW_HTTP", "").lower() in _TRUE else "https"
    return pafs.S3FileSystem(
        access_key=options.get("AWS_ACCESS_KEY_ID"),
        secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
        session_token=options.get("AWS_SESSION_TOKEN"),
        region=options.get("AWS_REGION"),
        endpoint_override=endpoint,
        scheme=scheme,
    )


def read_json(fs: pafs.FileSystem, path: str):
    """The JSON value a file holds."""
    with fs.open_input_stream(path) as stream:
        return json.loads(stream.read().decode("utf-8"))


def write_json(fs: pafs.FileSystem, path: str, payload) -> None:
    """Write a JSON file whole: to a temporary name first, then moved into place."""
    data = json.dumps(payload, ensure_ascii=False, sort_keys=True).encode("utf-8")
    parent = path.rsplit("/", 1)[0]
    fs.create_dir(parent, recursive=True)
    temporary = f"{parent}/.tmp-{hashlib.sha1(path.encode()).hexdigest()[:12]}-{time.time():.6f}"
    with fs.open_output_stream(temporary) as stream:
        stream.write(data)
    fs.move(temporary, path)


def delete_quietly(fs: pafs.FileSystem, path: str) -> bool:
    """Delete a file; False when it was not there."""
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        return False
    return True


def delete_folder_quietly(fs: pafs.FileSystem, path: str) -> bool:
    """Delete a folder and all it holds; False when it was not there."""
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return False
    fs.delete_dir(path)
    return True


def json_files(fs: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
    """The JSON files in a folder (not those whose names start with a dot), in path order."""
    infos = fs.get_file_info(pafs.FileSelector(folder, recursive=False, allow_not_found=True))
    return sorted(
        (i for i in infos if i.type == pafs.FileType.File and i.base_name.endswith(".json")
         and not i.base_name.startswith(".")),
        key=lambda i: i.path,
    )
