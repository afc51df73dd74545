"""Peak RSS and time of spill.gathered (snapshot/spill.py) over a snapshot's fact vectors in a random order.

    python benchmarks/gather_memory.py FACT_VECTORS.npy SCRATCH.npy ROWS [ROWS ...]

For each ROWS (rows gathered between two releases of the mappings' pages, spill.GATHER_ROWS), in
a fresh process: the rows of FACT_VECTORS.npy (a published snapshot's) gathered in a seeded random
order into SCRATCH.npy, which is removed after. The export gathers its fact vectors into index
order so; the rows of a chunk come from all over the file, and every page fault maps the pages
around it too, so the chunk's size bounds what the gather holds.
"""

import json
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import json, sys, time
import numpy as np
from pathlib import Path
from lightfoot_pipeline.snapshot import spill
from lightfoot_pipeline.progress import peak_rss_mb
source, out, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
spill.GATHER_ROWS = rows
vectors = spill.opened(Path(source))
order = np.random.default_rng(0).permutation(vectors.shape[0])
Path("/proc/self/clear_refs").write_text("5")  # the peak from here on
started = time.perf_counter()
spill.gathered(vectors, order, Path(out))
print(json.dumps({"gather_rows": rows, "rows": int(vectors.shape[0]), "seconds": round(time.perf_counter() - started, 1),
                  "peak_rss_mb": peak_rss_mb()}))
'''


def main() -> int:
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    source, out = sys.argv[1], Path(sys.argv[2])
    for rows in sys.argv[3:]:
        done = subprocess.run([sys.executable, "-c", CHILD, source, str(out), rows], capture_output=True, text=True)
        out.unlink(missing_ok=True)
        print(done.stdout.strip() if done.returncode == 0 else json.dumps({"failed": done.stderr[-2000:]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
