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
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs

from lightfoot_pipeline.store.store import StoreError

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
