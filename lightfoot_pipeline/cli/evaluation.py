"""The evaluation commands of the ``lightfoot`` command line: eval, the deletion audit, reports.

- ``lightfoot eval --out OUT.json | --run-dir DIR [--answer [--answer-budget USD] [--dry-run]] [--as GROUPS]``:
  every mode side by side on one snapshot (on the view of a principal of GROUPS with ``--as``),
  written as one JSON document and/or kept in DIR (evaluate.py, runs.py);
- ``lightfoot eval-deletion --run-dir DIR [--fraction 0.1 --seed 0]``: the deletion audit with
  retrieval before and after (deletion_eval.py);
- ``lightfoot audit-deletion --out OUT.json [--fraction 0.1 --seed 0]``: the deletion audit of the
  index alone, its fingerprint against a fresh build of the survivors;
- ``lightfoot audit-permissions --groups FILE [--store STORE] [--out OUT.json]``: each principal's view
  against a fresh build of its readable documents, question by question, of a dataset built with
  its readers or of an existing store as its readers are now (permission_audit.py);
- ``lightfoot report RUN_DIR``: RUN_DIR/report.md with tables and plots (report.py);
- ``lightfoot compare RUN_A RUN_B``: paired bootstrap intervals between two runs.

Like cli/__init__.py, this module parses arguments and prints results; the work is in the modules named.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from lightfoot_pipeline.cli.query import add_as_option, principal_line
from lightfoot_pipeline.evaluation.modes import HGMEM, K_VALUES, LIGHTFOOT_RERANK, MODE_NAMES
from lightfoot_pipeline.ingest.dataset import DatasetError, bundled_sample_dir, default_questions_file
from lightfoot_pipeline.settings import IndexSettings, SettingsError

RERANKER_HELP = ("cross-encoder name or path (default: $LIGHTFOOT_RERANKER, else BAAI/bge-reranker-base); "
                 "none turns reranking off")


def _questions_file(dataset: Path, questions: str | None) -> Path:
    chosen = Path(questions) if questions else default_questions_file(dataset)
    if chosen is None:
        raise DatasetError(f"{dataset} has no questions*.jsonl", hint="name a file with --questions")
    return chosen


def fraction(text: str) -> float:
    """A --fraction value: a number between 0 and 1 (the share of documents a deletion audit deletes)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a fraction is a number between 0 and 1, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"a fraction is a number between 0 and 1, got {text!r}")
    return value


def _ks(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"k values are comma-separated integers, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise argparse.ArgumentTypeError(f"k values must be positive integers, got {text!r}")
    return ks


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def print_recall_table(results, metrics: list[str]) -> None:
    from lightfoot_pipeline.evaluation.harness import mean_recalls

    for mode, recalls in mean_recalls(results).items():
        print(f"  {mode:<18} " + "  ".join(f"{m} {recalls[m]:.3f}" for m in metrics))


def print_significance(rows: list[list[str]]) -> None:
    for comparison, metric, difference, interval, significant in rows:
        print(f"  {comparison:<30} {metric:<10} {difference:>7} {interval:<18} significant: {significant}")


def index_settings_of(args) -> IndexSettings:
    """The index settings ``--numbers-rule`` and ``--links`` name (the rules that change which
    names link, and so the entities, synonym edges and graph; the rest stay the defaults)."""
    settings = IndexSettings(numbers_must_agree=args.numbers_rule == "on")
    return replace(settings, lsh_bands=0) if args.links == "exhaustive" else settings


def describe_settings(settings: dict | None) -> str:
    """A run's index settings in the words of its options (``numbers rule on, links banded``)."""
    if not settings:
        return "index settings unrecorded"
    numbers = "on" if settings.get("numbers_must_agree", True) else "off"
    links = "exhaustive" if not settings.get("lsh_bands") else "banded"
    return f"numbers rule {numbers}, links {links}"


def add_index_options(p: argparse.ArgumentParser) -> None:
    """--numbers-rule and --links: the index rules a run builds its store with."""
    p.add_argument("--numbers-rule", choices=("on", "off"), default="on",
                   help="two names link only when they carry the same numbers (default on)")
    p.add_argument("--links", choices=("banded", "exhaustive"), default="banded",
                   help="compare the name pairs that share an LSH band (default) or every pair")


def _plan(args, reranker, status):
    from lightfoot_pipeline.evaluation.evaluate import plan_evaluation

    return plan_evaluation(_names(args.modes) if args.modes else None, args.k, reranker=reranker,
                           reranker_status=status)


def cmd_eval(args) -> int:
    """``lightfoot eval``: every mode on one snapshot, to --out (JSON) and/or --run-dir (a kept run)."""
    from lightfoot_pipeline.cli.store import command_batch, print_batch
    from lightfoot_pipeline.evaluation.evaluate import AnswerOptions, eval_json, run_evaluation
    from lightfoot_pipeline.evaluation.report import significance_rows
    from lightfoot_pipeline.evaluation.runs import load_run
    from lightfoot_pipeline.models.embedder import load_embedder
    from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL, principal_of
    from lightfoot_pipeline.progress import Progress
    from lightfoot_pipeline.retrieval.rerank import load_reranker
    from lightfoot_pipeline.service.queries import resolve_embedder
    from lightfoot_pipeline.store.batches import writing_batch
    from lightfoot_pipeline.store.store import Store

    if args.run_dir is None and args.out is None and not args.dry_run:
        raise SettingsError("eval: no destination for the run", hint="give --out OUT.json and/or --run-dir DIR")
    dataset = Path(args.dataset)
    questions_file = _questions_file(dataset, args.questions)
    principal = OPERATOR_PRINCIPAL if args.as_groups is None else principal_of(args.as_groups)
    store = Store(args.store)
    embedder = load_embedder(args.embedder) if args.embedder or not store.exists() else resolve_embedder(store)
    reranker, status = load_reranker(args.reranker)
    plan = _plan(args, reranker, status)
    answers = None
    if args.answer or args.dry_run:
        from lightfoot_pipeline.retrieval.answer import build_answerer

        answerer, why = build_answerer(allow_unpriced=args.allow_unpriced)
        if answerer is None and not args.dry_run:
            raise SettingsError(why, hint="set OPENAI_BASE_URL, or price the answers with --dry-run")
        answers = AnswerOptions(answerer=answerer, budget_usd=None if args.no_budget else args.answer_budget,
                                dry_run=args.dry_run,
                                modes=_names(args.answer_modes) if args.answer_modes else None,
                                traces=args.traces)
    batch = command_batch("eval")  # it ingests what the store lacks of the dataset, and snapshots it
    with writing_batch(batch):
        outcome = run_evaluation(
            store, dataset, questions_file, embedder, plan, answers=answers,
            run_dir=Path(args.run_dir) if args.run_dir else None, overwrite=args.overwrite,
            echo=lambda line: print(line, file=sys.stderr), progress_factory=Progress, principal=principal,
            settings=index_settings_of(args),
        )
    if outcome.dry_run:
        print("dry run: no model was called and nothing was written")
        return 0
    metrics = [f"recall@{k}" for k in plan.ks]
    snap = outcome.config["snapshots"]["eval"]
    print(f"{outcome.config['n_questions']} questions, snapshot {snap['snapshot_id']}, embedder "
          f"{outcome.config['embedder']}, read as {principal_line(outcome.config['principal'])}, "
          f"{describe_settings(outcome.config['index_settings'])}")
    print_recall_table(outcome.results, metrics)
    if status.state != "available":
        print(f"  ({LIGHTFOOT_RERANK} not run: cross-encoder {status.state}: {status.reason})")
    if outcome.spend is not None:
        s = outcome.spend
        print(f"answers: {s.calls} calls, {s.failed} failed, {s.skipped} skipped by the budget; tokens in/out "
              f"{s.tokens_in:,}/{s.tokens_out:,}; ${s.cost_usd:.4f}"
              + (f" of ${s.budget_usd:g}" if s.budget_usd is not None else ""))
    if outcome.run_dir is not None:
        run = load_run(outcome.run_dir)
        print("paired bootstrap 95% intervals:")
        print_significance(significance_rows(run, "eval", [m for m in metrics if m == "recall@5"] or metrics[-1:]))
        print(f"wrote the run to {outcome.run_dir}; `lightfoot report {outcome.run_dir}` writes its report")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(eval_json(outcome), indent=2, sort_keys=True, default=str) + "\n")
        print(f"wrote {out}")
    print_batch(batch)
    return 0


def cmd_audit_deletion(args) -> int:
    from lightfoot_pipeline.cli.store import command_batch, print_batch
    from lightfoot_pipeline.evaluation.deletion_trial import audit_deletion
    from lightfoot_pipeline.models.embedder import DEFAULT_EMBEDDER, load_embedder
    from lightfoot_pipeline.store.batches import writing_batch

    spec = args.embedder or DEFAULT_EMBEDDER
    batch = command_batch("audit-deletion")
    with _store_or_scratch(args.store, "audit") as store, writing_batch(batch):
        result = audit_deletion(Path(args.dataset), store, load_embedder(spec), spec, args.fraction, args.seed,
                                work_dir=Path(args.work_dir) if args.work_dir else None)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    print(f"deleted {result['deleted_docs']} of {result['deleted_docs'] + result['surviving_docs']} documents in "
          f"{result['delete_seconds']}s with {result['model_calls']} model calls; fresh build of the survivors "
          f"in {result['rebuild_seconds']}s; fingerprint_equal={str(result['fingerprint_equal']).lower()}")
    print(f"wrote {args.out}")
    if args.store:  # a scratch store's batch is gone with it
        print_batch(batch)
    return 0 if result["fingerprint_equal"] else 1


def cmd_audit_permissions(args) -> int:
    """``lightfoot audit-permissions``: exit code 0 only if every principal's view is equal."""
    from lightfoot_pipeline.cli.store import command_batch, print_batch
    from lightfoot_pipeline.evaluation.permission_audit import audit_dataset, audit_store
    from lightfoot_pipeline.models.embedder import DEFAULT_EMBEDDER, load_embedder
    from lightfoot_pipeline.service.queries import resolve_embedder
    from lightfoot_pipeline.store.batches import writing_batch

    work_dir = Path(args.work_dir) if args.work_dir else None
    echo = lambda line: print(line, file=sys.stderr)  # noqa: E731
    batch = command_batch("audit-permissions")
    with _store_or_scratch(args.store, "permission-audit") as store, writing_batch(batch):
        if args.store and store.exists():  # an existing store, as its readers are now
            result = audit_store(store, Path(args.groups), resolve_embedder(store, args.embedder),
                                 Path(args.questions) if args.questions else None,
                                 max_questions=args.max_questions, work_dir=work_dir, echo=echo)
        else:
            dataset = Path(args.dataset)
            result = audit_dataset(dataset, Path(args.groups), store,
                                   load_embedder(args.embedder or DEFAULT_EMBEDDER),
                                   _questions_file(dataset, args.questions), max_questions=args.max_questions,
                                   work_dir=work_dir, echo=echo)
    for p in result["principals"]:
        print(f"  {p['principal']:<24} groups {','.join(p['groups']) or '-':<20} {p['documents']:>6} documents  "
              f"{p['questions']} questions  equal={str(p['equal']).lower()}"
              + (f" ({p['differing_questions']} questions differ)" if p["differing_questions"] else ""))
    print(f"{len(result['principals'])} principals of {result['documents']} documents, {result['model_calls']} "
          f"model calls; equal={str(result['equal']).lower()}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
        print(f"wrote {args.out}")
    if args.store:  # a scratch store's batch is gone with it
        print_batch(batch)
    return 0 if result["equal"] else 1


def _max_questions(text: str) -> int:
    from lightfoot_pipeline.evaluation.permission_audit import MAX_AUDIT_QUESTIONS

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a question count is a whole number, got {text!r}") from None
    if not 1 <= value <= MAX_AUDIT_QUESTIONS:
        raise argparse.ArgumentTypeError(f"the audit compares 1 to {MAX_AUDIT_QUESTIONS} questions, got {value}")
    return value


@contextlib.contextmanager
def _store_or_scratch(path: str | None, label: str) -> Iterator:
    """The store at ``path``, or a temporary one removed at the end (store/scratch.py: a folder a
    killed run leaves is swept later): it holds the documents' text."""
    from lightfoot_pipeline.store.scratch import scratch_folder
    from lightfoot_pipeline.store.store import Store

    if path:
        yield Store(path)
        return
    with scratch_folder(label) as root:
        yield Store(str(root / "store"))


def cmd_eval_deletion(args) -> int:
    from lightfoot_pipeline.evaluation.deletion_eval import run_deletion_audit
    from lightfoot_pipeline.models.embedder import DEFAULT_EMBEDDER, load_embedder
    from lightfoot_pipeline.progress import Progress
    from lightfoot_pipeline.retrieval.rerank import load_reranker

    dataset = Path(args.dataset)
    questions_file = _questions_file(dataset, args.questions)
    embedder = load_embedder(args.embedder or DEFAULT_EMBEDDER)
    reranker, status = load_reranker(args.reranker)
    outcome = run_deletion_audit(
        dataset, questions_file, embedder, _plan(args, reranker, status), fraction=args.fraction,
        seed=args.seed, work_dir=Path(args.work_dir) if args.work_dir else None, run_dir=Path(args.run_dir),
        overwrite=args.overwrite, echo=lambda line: print(line, file=sys.stderr), progress_factory=Progress,
    )
    d = outcome.deletion
    metrics = [f"recall@{k}" for k in outcome.config["ks"]]
    print(f"deleted {d['deleted_docs']} of {d['documents']} documents in {d['delete_seconds']}s with "
          f"{d['model_calls']} model calls; fingerprint equal to a fresh build of the survivors: "
          f"{str(d['fingerprint_equal']).lower()}; rankings equal: {str(d['rankings_equal_fresh']).lower()}; "
          f"rankings naming a deleted document: {len(d['leaks'])}")
    print(f"questions: {d['questions']['intact']} with intact evidence, "
          f"{d['questions']['deleted']} with deleted evidence")
    for mode, groups in d["recall"].items():
        for group, phases in groups.items():
            for phase in ("before", "after"):
                if phase in phases:
                    print(f"  {mode:<18} {group:<8} {phase:<7} "
                          + "  ".join(f"{m} {phases[phase][m]:.3f}" for m in metrics))
    print(f"wrote the run to {outcome.run_dir}; `lightfoot report {outcome.run_dir}` writes its report")
    exact = d["fingerprint_equal"] and d["rankings_equal_fresh"] and not d["leaks"]
    return 0 if exact else 1


def cmd_report(args) -> int:
    from lightfoot_pipeline.evaluation.report import write_report

    path = write_report(Path(args.run_dir))
    pngs = sorted(p.name for p in path.parent.glob("*.png"))
    print(f"wrote {path} with {', '.join(pngs)}")
    return 0


def cmd_compare(args) -> int:
    from lightfoot_pipeline.evaluation.runs import RunError, compare_runs, load_run

    a, b = load_run(args.run_a), load_run(args.run_b)
    modes = _names(args.modes) if args.modes else [m for m in a.modes if m in b.modes]
    metrics = _names(args.metric) if args.metric else [m for m in a.metrics if m in b.metrics]
    if not modes:
        raise RunError(f"the runs share no mode ({a.modes} vs {b.modes})", hint="name them with --modes")
    print(f"{a.path} − {b.path} (paired bootstrap 95% intervals over the same questions)")
    settings_a, settings_b = (run.config.get("index_settings") for run in (a, b))
    print(f"  A: {describe_settings(settings_a)}; B: {describe_settings(settings_b)}")
    if settings_a and settings_b and settings_a != settings_b:
        differing = sorted(k for k in {*settings_a, *settings_b} if settings_a.get(k) != settings_b.get(k))
        print(f"  the runs' indexes differ in {', '.join(differing)}")
    for mode in modes:
        for metric in metrics:
            r = compare_runs(a, b, mode, metric, phase_a=args.phase_a, phase_b=args.phase_b)
            print(f"  {mode:<18} {metric:<10} {r.mean_a:.3f} vs {r.mean_b:.3f}  difference {r.difference:+.3f} "
                  f"[{r.low:+.3f}, {r.high:+.3f}]  significant: {'yes' if r.significant else 'no'}  (n={r.n})")
    return 0


def _add_plan_options(p: argparse.ArgumentParser) -> None:
    """--modes and --k: which modes a run compares, at which recall cut-offs (modes.py)."""
    p.add_argument("--modes", default=None,
                   help=f"comma-separated modes of {', '.join(MODE_NAMES)} (default: all but {HGMEM}, which "
                        f"needs --answer; {LIGHTFOOT_RERANK} only with a cross-encoder)")
    cutoffs = ",".join(map(str, K_VALUES))
    p.add_argument("--k", type=_ks, default=list(K_VALUES), help=f"recall cut-offs, comma-separated (default {cutoffs})")


def add_eval_commands(sub, common: argparse.ArgumentParser) -> None:
    """The eval, eval-deletion, report and compare subcommands."""
    p = sub.add_parser("eval", parents=[common],
                       help="recall@k of every retrieval mode side by side on one snapshot (and answers)")
    p.add_argument("--dataset", required=True, help="dataset directory (built into --store first if needed)")
    p.add_argument("--questions", default=None, help="questions file (default: the dataset's questions*.jsonl)")
    p.add_argument("--out", default=None, help="write the run here as one JSON document")
    p.add_argument("--run-dir", default=None, help="keep the run here: results.parquet, run.json (see runs.py)")
    p.add_argument("--embedder", default=None, help="embedding model name or path, or hashing[:DIM] (default: "
                   "the snapshot's or the index's; the packaged MiniLM for a new store)")
    p.add_argument("--reranker", default=None, help=RERANKER_HELP)
    _add_plan_options(p)
    add_index_options(p)
    p.add_argument("--answer", action="store_true", help="answer every question through the model endpoint")
    p.add_argument("--answer-budget", type=float, default=1.0, help="stop answering at this many USD (default 1.0)")
    p.add_argument("--no-budget", action="store_true", help="answer with no budget cap")
    p.add_argument("--allow-unpriced", action="store_true",
                   help="answer with a model that has no known price (default: $LIGHTFOOT_LLM_ALLOW_UNPRICED, "
                        "else refused): its calls count as $0, so the budget cannot hold them")
    p.add_argument("--answer-modes", default=None, help="comma-separated modes to answer for (default: all)")
    p.add_argument("--dry-run", action="store_true", help="print what the answers would cost, call nothing")
    p.add_argument("--traces", action="store_true",
                   help=f"keep the text of each {HGMEM} step (subqueries, memory) in --run-dir/deep.json; "
                        "erasing a document does not reach these traces")
    p.add_argument("--overwrite", action="store_true", help="replace a run already in --run-dir")
    add_as_option(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("eval-deletion", parents=[common],
                       help="deletion audit with retrieval: recall of intact and deleted-evidence questions, "
                            "before and after deleting a seeded fraction")
    p.add_argument("--dataset", default=str(bundled_sample_dir()), help="dataset with recorded extractions")
    p.add_argument("--questions", default=None, help="questions file (default: the dataset's questions*.jsonl)")
    p.add_argument("--fraction", type=fraction, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-dir", required=True, help="keep the run here")
    _add_plan_options(p)
    p.add_argument("--embedder", default=None, help="embedding model name or path, or hashing[:DIM] (default MiniLM)")
    p.add_argument("--reranker", default=None, help=RERANKER_HELP)
    p.add_argument("--work-dir", default=None, help="where to build the stores (default: a temporary directory)")
    p.add_argument("--overwrite", action="store_true", help="replace a run already in --run-dir")
    p.set_defaults(func=cmd_eval_deletion)

    p = sub.add_parser("report", parents=[common], help="write RUN_DIR/report.md with tables and PNG plots")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", parents=[common], help="paired bootstrap intervals between two runs")
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument("--modes", default=None, help="comma-separated modes (default: those both runs have)")
    p.add_argument("--metric", default=None, help="comma-separated metrics: recall@k, em, f1 (default: recall@k)")
    p.add_argument("--phase-a", default=None, help="phase of RUN_A (default: its first, e.g. eval or before)")
    p.add_argument("--phase-b", default=None, help="phase of RUN_B")
    p.set_defaults(func=cmd_compare)


def add_audit_command(sub, common: argparse.ArgumentParser) -> None:
    """The audit-deletion and audit-permissions subcommands."""
    p = sub.add_parser("audit-deletion", parents=[common],
                       help="delete a seeded fraction and compare with a fresh build of the survivors")
    p.add_argument("--dataset", default=str(bundled_sample_dir()))
    p.add_argument("--fraction", type=fraction, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--embedder", default=None)
    p.add_argument("--work-dir", default=None, help="keep the survivors' dataset and their fresh store here "
                   "(default: a temporary directory, removed)")
    p.set_defaults(func=cmd_audit_deletion)

    p = sub.add_parser("audit-permissions", parents=[common],
                       help="each principal's view against a fresh build of its readable documents: rankings, "
                            "scores, seed facts and explanations equal")
    p.add_argument("--dataset", default=str(bundled_sample_dir()),
                   help="dataset with recorded extractions whose corpus.jsonl gives documents' readers")
    p.add_argument("--groups", required=True,
                   help='groups file: one {"principal": NAME, "groups": [...]} a line (at most 16 principals)')
    p.add_argument("--questions", default=None, help="questions file (default: the dataset's questions*.jsonl; "
                   "with --store of an existing store, questions drawn from its passages)")
    p.add_argument("--max-questions", type=_max_questions, default=50,
                   help="compare the file's first N questions (default 50, at most 500)")
    p.add_argument("--out", default=None, help="write the report here as JSON")
    p.add_argument("--embedder", default=None, help="embedding model name or path, or hashing[:DIM] (default MiniLM)")
    p.add_argument("--work-dir", default=None,
                   help="keep each principal's fresh store here (default: a temporary directory, removed)")
    p.set_defaults(func=cmd_audit_permissions)
