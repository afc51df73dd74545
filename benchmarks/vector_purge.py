"""What an erasure's purge of a vector cache costs: time and peak memory against the cache's size.

    python benchmarks/vector_purge.py [--rows 2000000] [--dim 384] [--stale 0.0001,0.1] [--json OUT.json]

An erasure removes from every vector cache the vectors no live text uses
(``store/vectors.py: purge_vector_caches``). For each stale share, a cache table of ``--rows``
random vectors (``dim`` floats, keys of the cache's form) is written in a folder of its own, and
then, in a fresh process, the live keys are computed from texts as an erasure computes them and
the purge runs: its wall time and the process's peak resident memory during the purge (Linux's
high-water mark, reset as the purge starts) are reported beside the cache's size on disk, with
what the process held as the purge started (its imports, the live texts and keys) and the peak's
growth over that against the vectors' bytes; then the same for the cleanup that follows it in an
erasure (``cleanup_vector_history``: LanceDB's optimize, which rewrites the files that held
deleted rows and drops every older version). The rows left are
checked: every live key is kept and no stale one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WRITE_ROWS = 100_000  # rows appended to the cache table at a time while it is written


def _texts(rows: int) -> list[str]:
    return [f"name {i:09d}" for i in range(rows)]


def write_cache(folder: Path, rows: int, dim: int) -> None:
    """A store folder holding one name-vector cache table of ``rows`` random vectors."""
    import numpy as np
    import pyarrow as pa

    from lightfoot_pipeline.store.store import Store
    from lightfoot_pipeline.store.vectors import cache_table_name, text_key

    store = Store(str(folder / "store"))
    db = store.lance()
    schema = pa.schema([pa.field("key", pa.string()), pa.field("vector", pa.list_(pa.float32(), dim))])
    table = db.create_table(cache_table_name("name", "bench-model"), schema=schema)
    generator = np.random.default_rng(7)
    texts = _texts(rows)
    for start in range(0, rows, WRITE_ROWS):
        chunk = texts[start:start + WRITE_ROWS]
        vectors = generator.standard_normal((len(chunk), dim), dtype=np.float32)
        table.add(pa.table({"key": [text_key(t) for t in chunk],
                            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim)},
                           schema=schema))


def purge(folder: Path, rows: int, stale: float) -> dict:
    """The purge in this process: the live keys, then ``purge_vector_caches``; figures and checks."""
    import polars as pl

    from lightfoot_pipeline.store import vectors
    from lightfoot_pipeline.store.store import Store

    texts = _texts(rows)
    live = texts[int(rows * stale):]
    store = Store(str(folder / "store"))
    t0 = time.perf_counter()
    if hasattr(vectors, "keys_of"):  # the live keys as the erasure computes them
        keep = {"name": vectors.keys_of(pl.DataFrame({"name": live}), lambda name: name)}
    else:
        keep = {"name": live}
    keys_s = time.perf_counter() - t0
    before_mb = _status_mb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark from here on
    t0 = time.perf_counter()
    purged = vectors.purge_vector_caches(store, keep)
    purge_s = time.perf_counter() - t0
    peak_mb = _status_mb("VmHWM")
    at_cleanup_mb = _status_mb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    t0 = time.perf_counter()
    vectors.cleanup_vector_history(store)  # the erasure's next step: old versions and deleted rows' files go
    cleanup_s = time.perf_counter() - t0
    cleanup_peak_mb = _status_mb("VmHWM")
    (name,) = purged
    table = store.lance().open_table(name)
    left = table.search().select(["key"]).limit(None).to_arrow().column("key").to_pylist()
    expected = keep["name"] if isinstance(keep["name"], list) else keep["name"].to_pylist()
    from lightfoot_pipeline.store.vectors import text_key

    wanted = sorted(expected if not isinstance(keep["name"], list) else (text_key(t) for t in expected))
    return {"purged": purged[name], "rows_left": len(left), "exact": sorted(left) == wanted,
            "keys_s": round(keys_s, 2), "purge_s": round(purge_s, 2),
            "rss_at_purge_start_mb": round(before_mb), "peak_rss_mb": round(peak_mb),
            "peak_growth_mb": round(peak_mb - before_mb), "cleanup_s": round(cleanup_s, 2),
            "cleanup_peak_growth_mb": round(cleanup_peak_mb - at_cleanup_mb)}


def _status_mb(field: str) -> float:
    """A field of /proc/self/status in MiB (VmRSS: resident now; VmHWM: the high-water mark)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _disk_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--stale", default="0.0001,0.1", help="shares of the rows no live text uses")
    parser.add_argument("--json", dest="json_out")
    parser.add_argument("--purge-in", help=argparse.SUPPRESS)  # the child process: FOLDER ROWS STALE
    args = parser.parse_args()
    if args.purge_in:
        folder, rows, stale = args.purge_in.split(",")
        print(json.dumps(purge(Path(folder), int(rows), float(stale))))
        return
    results = []
    for stale in [float(s) for s in args.stale.split(",")]:
        folder = Path(tempfile.mkdtemp(prefix="vector-purge-"))
        try:
            t0 = time.perf_counter()
            write_cache(folder, args.rows, args.dim)
            write_s = time.perf_counter() - t0
            disk_mb = _disk_mb(folder)
            out = subprocess.run([sys.executable, __file__, "--purge-in", f"{folder},{args.rows},{stale}"],
                                 capture_output=True, text=True, check=True, cwd=REPO)
            row = {"rows": args.rows, "dim": args.dim, "stale_share": stale, "write_s": round(write_s, 1),
                   "cache_mb_on_disk": round(disk_mb), "vector_mb": round(args.rows * args.dim * 4 / 2**20),
                   **json.loads(out.stdout.strip().splitlines()[-1])}
            row["growth_over_vector_bytes"] = round(row["peak_growth_mb"] / row["vector_mb"], 3)
            results.append(row)
            print(json.dumps(row), flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    report = {"results": results, "cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)}
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
