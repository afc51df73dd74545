"""Link recall of the LSH candidate filter: share of the exhaustive links found, and at what cost.

    python benchmarks/link_recall.py [--passages 30000] [--dim 384] [--skip-sample] [--json OUT.json]

Two corpora, each linked per type twice, once comparing every pair (exhaustive) and once only the
pairs that share an LSH band key (banded, the index's rule), at the entity threshold (0.92) and
the synonym threshold (0.80):

- the bundled sample (MuSiQue, 1,890 passages, recorded extractions) with the packaged MiniLM
  embedder, the names the index would hold;
- a synthetic corpus (benchmarks/synthetic.py, 30,000 passages by default) with the model-free
  hashing embedder.

For each: names, same-type pairs, candidate pairs (distinct pairs sharing a band key), links
found by each rule, the share found, and the time of each rule (the banded time includes
computing the band keys). The index's bar: share found >= 0.995 at both thresholds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import synthetic_documents_and_records

from lightfoot_pipeline.index.documents import document_passages
from lightfoot_pipeline.index.forms import forms_of
from lightfoot_pipeline.index.link_recall import link_recall
from lightfoot_pipeline.index.links import LinkRule
from lightfoot_pipeline.ingest.dataset import bundled_sample_dir, load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import Embedder, HashingEmbedder, load_embedder
from lightfoot_pipeline.settings import IndexSettings


def names_by_type(documents, records, settings: IndexSettings) -> dict[str, list[str]]:
    """The live names of each type that an index of these documents holds, sorted."""
    extractor = ReplayExtractor(records, entity_types=None, max_entities=settings.max_entities_per_passage,
                                max_facts=settings.max_facts_per_passage)
    found: dict[str, set[str]] = defaultdict(set)
    for outcome in extractor.extract(document_passages(documents, settings)):
        if outcome.record is None:
            continue
        forms, _ = forms_of(outcome.chunk_id, outcome.doc_id, outcome.record)
        for form in forms:
            found[form["type"]].add(form["name"])
    return {type_: sorted(names) for type_, names in sorted(found.items())}


def measure(label: str, names: dict[str, list[str]], embedder: Embedder, settings: IndexSettings) -> dict:
    started = time.perf_counter()
    named_vectors = {type_: (group, embedder.embed(group)) for type_, group in names.items()}
    embed_s = time.perf_counter() - started
    result = {
        "corpus": label,
        "embedder": embedder.model_id,
        "names": sum(len(g) for g in names.values()),
        "names_by_type": {type_: len(group) for type_, group in names.items()},
        "embed_s": round(embed_s, 2),
    }
    for threshold in (settings.entity_threshold, settings.synonym_threshold):
        recall = link_recall(named_vectors, LinkRule.of(settings, threshold))
        figures = recall.as_dict()
        figures["speedup"] = round(recall.exhaustive_s / recall.banded_s, 2) if recall.banded_s else None
        for key in ("exhaustive_s", "banded_s"):
            figures[key] = round(figures[key], 3)
        result[f"at_{threshold:.2f}"] = figures
        print(f"{label} @ {threshold:.2f}: found {recall.banded_links}/{recall.exhaustive_links} "
              f"= {recall.found_share:.4%}; candidates {recall.candidate_pairs:,} of {recall.all_pairs:,} pairs "
              f"({recall.candidate_share:.3%}); exhaustive {recall.exhaustive_s:.2f} s, banded {recall.banded_s:.2f} s",
              flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=30000, help="synthetic passages (0: skip)")
    parser.add_argument("--dim", type=int, default=384, help="hashing-embedder dimensions for the synthetic corpus")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-sample", action="store_true", help="leave out the bundled sample (MiniLM)")
    parser.add_argument("--bands", type=int, default=None, help="LSH bands (default: the index's)")
    parser.add_argument("--rows", type=int, default=None, help="LSH rows per band (default: the index's)")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args()
    settings = IndexSettings()
    overrides = {k: v for k, v in (("lsh_bands", args.bands), ("lsh_rows", args.rows)) if v is not None}
    settings = IndexSettings(**overrides) if overrides else settings
    result: dict = {"lsh": {"bands": settings.lsh_bands, "rows": settings.lsh_rows, "seed": settings.lsh_seed},
                    "numbers_must_agree": settings.numbers_must_agree, "load_average": os.getloadavg()}
    if not args.skip_sample:
        sample = bundled_sample_dir()
        names = names_by_type(load_corpus(sample), load_recorded_extractions(sample), settings)
        result["sample"] = measure("sample", names, load_embedder(None), settings)
    if args.passages:
        documents, records = synthetic_documents_and_records(args.passages, args.seed)
        names = names_by_type(documents, records, settings)
        result["synthetic"] = measure(f"synthetic-{args.passages}", names, HashingEmbedder(dim=args.dim), settings)
    shares = [result[c][f"at_{t:.2f}"]["found_share"] for c in ("sample", "synthetic") if c in result
              for t in (settings.entity_threshold, settings.synonym_threshold)]
    result["min_found_share"] = min(shares) if shares else None
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    else:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
