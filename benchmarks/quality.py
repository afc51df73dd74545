"""Retrieval quality per index setting: the ablation of the rules that change which names link.

    python benchmarks/quality.py [--dataset DIR] [--questions NAME=FILE ...] [--settings A,B,...]
                                 [--modes dense,lightfoot] [--work-dir DIR] [--embedder NAME]
                                 [--resamples N] [--json OUT.json]

The dataset (default: the bundled MuSiQue sample) is built from its recorded extractions once per
setting (lightfoot_pipeline/evaluation/ablation.py: the numbers rule on or off, banded or
exhaustive name links), with no model call; each question set (default: every questions*.jsonl
of the dataset, named by what follows "questions-") runs through dense retrieval and Lightfoot on
each store. Printed per question set and on all of them pooled: recall@2/5/10 of each setting with
a 95% bootstrap interval, and its paired difference from the defaults with a 95% paired bootstrap
interval (* where the interval excludes zero). --work-dir keeps the stores, so a second run
only evaluates.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from lightfoot_pipeline.evaluation.ablation import POOLED, SETTINGS, ablation_table, run_ablation
from lightfoot_pipeline.evaluation.metrics import BOOTSTRAP_RESAMPLES
from lightfoot_pipeline.evaluation.modes import DENSE, LIGHTFOOT
from lightfoot_pipeline.ingest.dataset import bundled_sample_dir, load_questions
from lightfoot_pipeline.models.embedder import DEFAULT_EMBEDDER, load_embedder


def question_sets(dataset: Path, named: list[str]) -> dict[str, Path]:
    """``NAME=FILE`` arguments, or every questions*.jsonl of the dataset by the rest of its name."""
    if named:
        out = {}
        for item in named:
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                raise SystemExit(f"--questions takes NAME=FILE, got {item!r}")
            out[name] = Path(path)
        return out
    found = sorted(dataset.glob("questions*.jsonl"))
    if not found:
        raise SystemExit(f"{dataset} has no questions*.jsonl: name question sets with --questions NAME=FILE")
    return {(p.stem.removeprefix("questions").lstrip("-_") or "questions"): p for p in found}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=str(bundled_sample_dir()))
    parser.add_argument("--questions", action="append", default=[], metavar="NAME=FILE")
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help=f"comma-separated, the first is the reference (of {', '.join(SETTINGS)})")
    parser.add_argument("--modes", default=f"{DENSE},{LIGHTFOOT}")
    parser.add_argument("--work-dir", default=None, help="keep the stores here (default: a temporary directory)")
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    parser.add_argument("--resamples", type=int, default=BOOTSTRAP_RESAMPLES)
    parser.add_argument("--json", default=None, help="write the report here")
    args = parser.parse_args()

    dataset = Path(args.dataset)
    chosen = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SETTINGS))
    if unknown:
        raise SystemExit(f"unknown settings {unknown}; choose from {', '.join(SETTINGS)}")
    files = question_sets(dataset, args.questions)
    sets = {name: load_questions(path) for name, path in files.items()}
    embedder = load_embedder(args.embedder)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lightfoot-quality-") as scratch:
        work = Path(args.work_dir) if args.work_dir else Path(scratch)
        report = run_ablation(dataset, sets, embedder, work, settings={name: SETTINGS[name] for name in chosen},
                              modes=[m.strip() for m in args.modes.split(",") if m.strip()],
                              resamples=args.resamples, echo=lambda line: print(line, file=sys.stderr))
    report["dataset"] = str(dataset)
    report["question_files"] = {name: str(path) for name, path in files.items()}
    report["embedder"] = embedder.model_id
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["load_average"] = os.getloadavg()
    for set_name in [*sets, *([POOLED] if len(sets) > 1 else [])]:
        for mode in report["modes"]:
            print(f"\n{set_name} ({report['questions'][set_name]} questions), {mode}:")
            print("\n".join(ablation_table(report, set_name, mode)))
    print("\nindex per setting:")
    for name, described in report["settings"].items():
        print(f"  {name}: {described['counts']} (built in {described['build_seconds']} s)")
    print(f"\n{report['seconds']} s in all; load average {report['load_average']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
