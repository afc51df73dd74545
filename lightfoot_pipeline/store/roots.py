"""Store roots: which URIs can hold a store, errors of the storage behind them, the local writer lock."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from lightfoot_pipeline.store.log import StoreUnavailable

# Schemes of a store root that both Delta (deltalake) and LanceDB open; a bare path is a local one.
STORE_SCHEMES = ("file", "s3", "gs", "az", "abfss")
_TERMINAL_STYLE = re.compile(r"\x1b\[[0-9;]*m")


def storage_failure(err: BaseException) -> str:
    """An object-store error on one line: deltalake's outermost and innermost causes, without
    terminal colours."""
    lines = [line.strip(" ↳") for line in _TERMINAL_STYLE.sub("", str(err)).splitlines()]
    lines = [line for line in lines if line] or [type(err).__name__]
    return lines[0] if len(lines) == 1 else f"{lines[0]}: {lines[-1]}"


def check_store_root(uri: str) -> None:
    """Refuse a store root that cannot hold a store: an unknown scheme, or a local path under a file."""
    scheme = uri.split("://", 1)[0].casefold() if "://" in uri else None
    if scheme is not None and scheme not in STORE_SCHEMES:
        raise StoreUnavailable(f"store {uri}: unknown scheme {scheme + '://'!r}",
                               hint=f"give a local path or a URI of {', '.join(s + '://' for s in STORE_SCHEMES)}")
    if scheme in (None, "file"):
        root = Path(uri.removeprefix("file://"))
        existing = next((p for p in (root, *root.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            raise StoreUnavailable(f"store {root}: {existing} is a file, not a directory",
                                   hint="give --store (or LIGHTFOOT_STORE) a directory, or a path that does not exist yet")


@contextlib.contextmanager
def local_file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on a local file, held for the block (released if the process dies)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def check_writable_root(uri: str) -> None:
    """Refuse a local store root where no store can be written (a read-only or virtual file system,
    a folder without write permission), by creating the root and a probe file in it.

    Commands that write call it before any paid model call, so a store that cannot be written fails
    at once rather than after extraction. An object-store root is checked by its first write.
    """
    check_store_root(uri)
    if "://" in uri and not uri.startswith("file://"):
        return
    import tempfile

    root = Path(uri.removeprefix("file://"))
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".lightfoot-write-probe-"):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise StoreUnavailable(f"store {root}: cannot write there ({reason})",
                               hint="give --store (or LIGHTFOOT_STORE) a directory this user can write") from None
