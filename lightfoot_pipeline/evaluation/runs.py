"""Runs: an evaluation kept in a directory, so that any two runs can be compared later.

A run directory holds

    run.json          what was run: dataset, questions, embedder, reranker, modes and their
                      retrieval settings, the snapshot (id, store commit, fingerprint) of every
                      phase, the index's cost, the answer model, budget and spend
    results.parquet   one row per (phase, mode, question): ranked documents and passages,
                      recall@k, retrieval time, and the answer with its EM, F1, tokens and cost
    deletion.json     the deletion audit's figures (deletion audits only)
    deep.json         the hgmem mode's steps by question: ids and numbers, text only with --traces
    report.md, *.png  written by ``lightfoot report RUN_DIR`` (report.py)

Phases: ``eval`` for an evaluation; ``before``, ``after`` and ``fresh`` for a deletion audit (the
store before the deletion, after it, and a fresh build of the survivors).

Comparisons are paired question by question (metrics.paired_bootstrap): two modes of one run, or
one mode of two runs, over exactly the same questions.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import polars as pl

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.evaluation.metrics import PairedBootstrap, paired_bootstrap
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import EXTRACTIONS

RUN_FILE = "run.json"
RESULTS_FILE = "results.parquet"
DELETION_FILE = "deletion.json"
FORMAT_VERSION = 1
EVAL = "eval"

_BASE_SCHEMA: dict[str, pl.DataType] = {
    "phase": pl.String,
    "mode": pl.String,
    "qid": pl.String,
    "question": pl.String,
    "evidence": pl.String,  # deletion audits: "intact" or "deleted"; else null
    "gold_doc_ids": pl.List(pl.String),
    "gold_answers": pl.List(pl.String),
    "ranked_doc_ids": pl.List(pl.String),
    "ranked_chunk_ids": pl.List(pl.String),
    "retrieval_ms": pl.Float64,
    "order": pl.String,
    "answer_status": pl.String,
    "prediction": pl.String,
    "em": pl.Float64,
    "f1": pl.Float64,
    "answer_tokens_in": pl.Int64,
    "answer_tokens_out": pl.Int64,
    "answer_cost_usd": pl.Float64,
    "answer_error": pl.String,
}


class RunError(LightfootError, ValueError):
    """A run directory that cannot be written, read or compared as asked."""


def recall_metrics(columns: Sequence[str]) -> list[str]:
    """The recall@k columns of a results table, by k."""
    found = [c for c in columns if c.startswith("recall@")]
    return sorted(found, key=lambda c: int(c.split("@", 1)[1]))


def results_frame(rows: Sequence[dict], ks: Sequence[int]) -> pl.DataFrame:
    schema = dict(_BASE_SCHEMA)
    for k in sorted(set(ks)):
        schema[f"recall@{k}"] = pl.Float64
    ordered = [{name: row.get(name) for name in schema} for row in rows]
    extra = {key for row in rows for key in row} - set(schema)
    if extra:
        raise RunError(f"result rows have columns the run table does not define: {sorted(extra)}")
    return pl.DataFrame(ordered, schema=schema, orient="row")


def software() -> dict:
    versions = {"python": platform.python_version()}
    for package in ("lightfoot", "numpy", "polars"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def write_run(run_dir: Path | str, config: dict, results: pl.DataFrame, *, overwrite: bool = False,
              extra_files: dict[str, dict] | None = None) -> Path:
    """Write a run (configuration and per-question results) into ``run_dir``.

    A directory that already holds a run is refused unless ``overwrite``: a run is a record, and
    replacing one by accident loses the figures it was compared against.
    """
    run_dir = Path(run_dir)
    if (run_dir / RUN_FILE).exists() and not overwrite:
        raise RunError(f"{run_dir} already holds a run; choose another directory or pass --overwrite")
    for name in ("phase", "mode", "qid"):
        if name not in results.columns:
            raise RunError(f"results need a {name!r} column")
    duplicated = results.select("phase", "mode", "qid").is_duplicated()
    if duplicated.any():
        raise RunError("results hold a (phase, mode, question) twice")
    run_dir.mkdir(parents=True, exist_ok=True)
    if overwrite:
        for stale in [run_dir / RESULTS_FILE, run_dir / DELETION_FILE, run_dir / "deep.json", *run_dir.glob("*.png"),
                      run_dir / "report.md"]:
            stale.unlink(missing_ok=True)
    payload = {"format": FORMAT_VERSION, "created_at": dt.datetime.now(dt.UTC).isoformat(),
               "software": software(), **config}
    results.write_parquet(run_dir / RESULTS_FILE)
    for name, content in (extra_files or {}).items():
        (run_dir / name).write_text(json.dumps(content, indent=2, sort_keys=True, default=str) + "\n")
    # run.json goes last: a directory without it is a run that did not finish writing.
    (run_dir / RUN_FILE).write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    return run_dir


@dataclass
class Run:
    path: Path
    config: dict
    results: pl.DataFrame
    deletion: dict | None = None

    @property
    def kind(self) -> str:
        return self.config.get("kind", EVAL)

    @property
    def phases(self) -> list[str]:
        return list(dict.fromkeys(self.results.get_column("phase").to_list()))

    @property
    def modes(self) -> list[str]:
        return list(dict.fromkeys(self.results.get_column("mode").to_list()))

    @property
    def metrics(self) -> list[str]:
        return recall_metrics(self.results.columns)

    def scores(self, mode: str, metric: str, phase: str | None = None) -> pl.DataFrame:
        """``qid`` and ``score`` of one mode and phase (default: the run's first phase)."""
        phase = phase or self.phases[0]
        if metric not in self.results.columns:
            raise RunError(f"{self.path} has no metric {metric!r}; it has {[*self.metrics, 'em', 'f1']}")
        frame = self.results.filter((pl.col("phase") == phase) & (pl.col("mode") == mode))
        if frame.height == 0:
            raise RunError(f"{self.path} has no results for mode {mode!r} in phase {phase!r} "
                           f"(modes {self.modes}, phases {self.phases})")
        return frame.select("qid", pl.col(metric).alias("score"))


def load_run(run_dir: Path | str) -> Run:
    run_dir = Path(run_dir)
    config_path, results_path = run_dir / RUN_FILE, run_dir / RESULTS_FILE
    if not config_path.exists():
        raise RunError(f"{run_dir} holds no run ({RUN_FILE} is missing; was the run interrupted?)")
    if not results_path.exists():
        raise RunError(f"{run_dir} has {RUN_FILE} but no {RESULTS_FILE}")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise RunError(f"{config_path}: not valid JSON ({err.msg})") from err
    if config.get("format") != FORMAT_VERSION:
        raise RunError(f"{config_path}: run format {config.get('format')!r}, this version reads {FORMAT_VERSION}")
    deletion_path = run_dir / DELETION_FILE
    deletion = json.loads(deletion_path.read_text()) if deletion_path.exists() else None
    return Run(path=run_dir, config=config, results=pl.read_parquet(results_path), deletion=deletion)


def paired(a: pl.DataFrame, b: pl.DataFrame, what: str) -> pl.DataFrame:
    """Join two (qid, score) frames that must cover the same questions, each answered."""
    only_a = set(a.get_column("qid")) - set(b.get_column("qid"))
    only_b = set(b.get_column("qid")) - set(a.get_column("qid"))
    if only_a or only_b:
        raise RunError(f"{what}: the two sides are not over the same questions "
                       f"({len(only_a)} only in the first, {len(only_b)} only in the second)")
    joined = a.join(b, on="qid", suffix="_b").sort("qid")
    unscored = joined.filter(pl.col("score").is_null() | pl.col("score_b").is_null()).height
    if unscored:
        raise RunError(f"{what}: {unscored} questions have no score on one side (unanswered?); "
                       "compare runs whose questions were all scored")
    return joined


def compare_modes(run: Run, mode_a: str, mode_b: str, metric: str, phase: str | None = None,
                  seed: int = 0) -> PairedBootstrap:
    """``mode_a - mode_b`` on one metric within a run, over its questions."""
    joined = paired(run.scores(mode_a, metric, phase), run.scores(mode_b, metric, phase),
                    f"{mode_a} vs {mode_b} ({metric})")
    return paired_bootstrap(joined.get_column("score").to_numpy(), joined.get_column("score_b").to_numpy(),
                            seed=seed)


def compare_runs(run_a: Run, run_b: Run, mode: str, metric: str, *, mode_b: str | None = None,
                 phase_a: str | None = None, phase_b: str | None = None, seed: int = 0) -> PairedBootstrap:
    """``run_a - run_b`` on one metric for a mode (of each run), over the same questions."""
    joined = paired(run_a.scores(mode, metric, phase_a), run_b.scores(mode_b or mode, metric, phase_b),
                    f"{run_a.path} vs {run_b.path} ({mode}, {metric})")
    return paired_bootstrap(joined.get_column("score").to_numpy(), joined.get_column("score_b").to_numpy(),
                            seed=seed)


# -- what the index cost ------------------------------------------------------------------------


def index_cost(store: Store, build: dict | None = None) -> dict:
    """What building the index took: extraction calls (one per passage), their tokens and cost.

    Recorded extractions (a dataset's extractions.jsonl) were model calls once, made elsewhere: they
    count as calls, and their tokens and cost are unknown unless the ledger holds them.
    """
    from lightfoot_pipeline.store import ledger

    rows = store.read(EXTRACTIONS.name, columns=["chunk_id", "status", "extractor"])
    extracted = rows.filter(pl.col("status") == "ok")
    calls = ledger.read(store)
    if calls.height:
        calls = calls.filter(pl.col("purpose") == "extract")
    return {
        "passages": rows.height,
        "extraction_calls": extracted.height,
        "extractors": sorted(str(e) for e in extracted.get_column("extractor").unique().to_list()),
        "ledger_calls": calls.height,
        "ledger_tokens_in": int(calls.get_column("tokens_in").sum()) if calls.height else 0,
        "ledger_tokens_out": int(calls.get_column("tokens_out").sum()) if calls.height else 0,
        "ledger_cost_usd": round(float(calls.get_column("cost_usd").sum()), 6) if calls.height else 0.0,
        "build": build or {},
    }


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
