"""The packaged MiniLM on the bundled sample: what each batch geometry computes, and how long it takes.

    python benchmarks/embedding.py [--fraction 1.0] [--threads 1] [--json OUT.json]

The texts are those a build of the bundled sample embeds (its names, passages and facts, one pass
of each kind), found by a build with the model-free hashing embedder. Each geometry embeds every
kind's pass as a vector cache does, chunk by chunk, back to back in one process:

- ``powers of two, 4096, chunks of 512``: the geometry of ids without a bucket suffix, with the
  cache's former chunks (512 texts ordered by length);
- ``powers of two, 4096, chunked by bucket``: the same geometry, chunked as the cache now does;
- ``half steps, 1024`` (the default): buckets of 8, 12, 16, 24, 32, … tokens, chunked by bucket.

For each: seconds, tokens the network computed (batch rows times bucket length, the filled rows
included), the tokens of the texts themselves, and the time as a ratio of the first geometry's in
the same run. ``--fraction`` takes a seeded share of each pass, for a shorter run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path


def sample_passes() -> dict[str, list[str]]:
    """Each kind's texts, as a build of the bundled sample embeds them (hashing embedder, default settings)."""
    from lightfoot_pipeline.evaluation.evaluate import ensure_dataset_indexed
    from lightfoot_pipeline.ingest.dataset import bundled_sample_dir
    from lightfoot_pipeline.models.embedder import HashingEmbedder
    from lightfoot_pipeline.snapshot.export import export_snapshot
    from lightfoot_pipeline.store.store import Store

    passes: dict[str, list[str]] = {}

    class Recording(HashingEmbedder):
        kind = ""

        def embed(self, texts):
            passes.setdefault(Recording.kind, []).extend(texts)
            return super().embed(texts)

    from lightfoot_pipeline.store import vectors

    original = vectors.VectorCache.vectors

    def recorded(cache, texts, progress=None):
        Recording.kind = cache.kind
        return original(cache, texts, progress)

    vectors.VectorCache.vectors = recorded
    try:
        with tempfile.TemporaryDirectory() as folder:
            store = Store(str(Path(folder) / "store"))
            embedder = Recording(dim=384)
            ensure_dataset_indexed(store, bundled_sample_dir(), embedder)
            export_snapshot(store, embedder)
    finally:
        vectors.VectorCache.vectors = original
    return passes


def computed_tokens(embedder, chunk: list[str]) -> int:
    """Tokens the network runs for one ``embed`` call: every batch's rows times its bucket."""
    counts: dict[int, int] = {}
    for bucket in embedder.buckets_of(chunk):
        counts[bucket] = counts.get(bucket, 0) + 1
    return sum(-(-n // embedder.rows_per_batch(b)) * embedder.rows_per_batch(b) * b for b, n in counts.items())


def measure(label: str, embedder, passes: dict[str, list[str]], by_bucket: bool) -> dict:
    from lightfoot_pipeline.models.embedder import embedding_chunks, length_ordered_chunks

    computed = 0
    started = time.perf_counter()
    for texts in passes.values():
        chunks = embedding_chunks(embedder, texts, 512) if by_bucket else length_ordered_chunks(texts, 512)
        for rows in chunks:
            chunk = [texts[i] for i in rows]
            embedder.embed(chunk)
            computed += computed_tokens(embedder, chunk)
    seconds = time.perf_counter() - started
    print(f"{label}: {seconds:.1f} s, {computed:,} tokens computed", flush=True)
    return {"geometry": label, "model_id": embedder.model_id, "seconds": round(seconds, 2), "tokens_computed": computed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fraction", type=float, default=1.0, help="a seeded share of each pass (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as each test worker has)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    if not 0 < args.fraction <= 1:
        parser.error("--fraction must be above 0 and at most 1")
    import torch

    torch.set_num_threads(args.threads)
    from lightfoot_pipeline.models.embedder import SentenceTransformerEmbedder

    passes = sample_passes()
    rng = random.Random(7)
    passes = {kind: rng.sample(texts, max(1, round(len(texts) * args.fraction))) for kind, texts in passes.items()}
    legacy = SentenceTransformerEmbedder(batch_tokens=4096, buckets="")
    default = SentenceTransformerEmbedder()
    text_tokens = sum(sum(default.token_counts(texts)) for texts in passes.values())
    runs = [measure("powers of two, 4096, chunks of 512", legacy, passes, by_bucket=False),
            measure("powers of two, 4096, chunked by bucket", legacy, passes, by_bucket=True),
            measure("half steps, 1024", default, passes, by_bucket=True)]
    for run in runs:
        run["time_ratio"] = round(run["seconds"] / runs[0]["seconds"], 3)
        run["tokens_ratio"] = round(run["tokens_computed"] / runs[0]["tokens_computed"], 3)
    result = {"texts": {kind: len(texts) for kind, texts in passes.items()}, "text_tokens": text_tokens,
              "fraction": args.fraction, "torch_threads": args.threads, "cpus": os.cpu_count(), "runs": runs}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
