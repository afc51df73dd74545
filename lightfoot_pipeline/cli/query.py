"""The query-time commands of the ``lightfoot`` command line: snapshot, query, serve, eval.

Like cli.py, this module parses arguments and prints results; the work is in snapshot.py,
retrieve.py, answer.py, serve.py and evaluate.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import time
from pathlib import Path

from lightfoot_pipeline.ingest.dataset import DatasetError, default_questions_file, load_questions
from lightfoot_pipeline.cli.evaluation import add_run_options

PREVIEW_CHARS = 160


def _store(args):
    from lightfoot_pipeline.store.store import Store

    return Store(args.store)


def _print_json(payload) -> None:
    json.dump(payload, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def _reports_errors(command):
    """Print snapshot and retrieval errors as one line and exit 2, like the other commands."""

    @functools.wraps(command)
    def run(args) -> int:
        from lightfoot_pipeline.models.embedder import EmbedderUnavailable
        from lightfoot_pipeline.serving.retrieve import RetrievalError
        from lightfoot_pipeline.serving.snapshot import SnapshotError

        try:
            return command(args)
        except (SnapshotError, RetrievalError, EmbedderUnavailable) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2

    return run


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def print_passages(passages: list[dict]) -> None:
    for p in passages:
        title = f"{p['title']}: " if p["title"] else ""
        print(f"  {p['rank']:>2}. [{p['doc_id']}] {title}{_preview(p['text'])}")


def print_latency(latency: dict) -> None:
    print("latency ms: " + ", ".join(f"{k} {v:.1f}" for k, v in latency.items()))


@_reports_errors
def cmd_snapshot(args) -> int:
    from lightfoot_pipeline.serving.serve import resolve_embedder
    from lightfoot_pipeline.serving.export import export_snapshot

    store = _store(args)
    started = time.perf_counter()
    info = export_snapshot(store, resolve_embedder(store, args.embedder), keep=args.keep)
    if args.json:
        _print_json(info.as_dict())
    else:
        print(f"published snapshot {info.snapshot_id} of store commit {info.store_seq} "
              f"({time.perf_counter() - started:.1f}s)")
        print(f"  {info.uri}")
        print("  " + ", ".join(f"{k} {v:,}" for k, v in info.counts.items() if isinstance(v, int)))
    return 0


@_reports_errors
def cmd_query(args) -> int:
    from lightfoot_pipeline.serving.serve import open_service, snapshot_is_stale

    store = _store(args)
    service = open_service(store, embedder_spec=args.embedder, reranker_spec=args.reranker,
                           answers=not args.no_answer)
    result = service.query(args.question, top_k=args.top_k, answer=not args.no_answer, rerank=not args.no_rerank)
    result["snapshot"]["stale"] = snapshot_is_stale(store, service)
    if args.json:
        _print_json(result)
        return 0
    snap = result["snapshot"]
    print(f"snapshot {snap['snapshot_id']} (store commit {snap['store_seq']})"
          + ("; the store has newer commits: run `lightfoot snapshot` to serve them" if snap["stale"] else ""))
    reranker = result["reranker"]
    if reranker["state"] == "available":
        print(f"order: {result['order']} (cross-encoder {reranker['model']}, RRF k=60)")
    else:
        print(f"order: {result['order']} (no reranking: {reranker['state']}: {reranker['reason']})")
    if result["answer"] is not None:
        a = result["answer"]
        if a["error"]:
            print(f"answer: none ({a['error']})")
        else:
            print(f"answer: {a['answer']}   [{a['model']}, {a['tokens_in']}/{a['tokens_out']} tokens, "
                  f"${a['cost_usd']:.6f}]")
    else:
        print(f"answer: {result['answer_status']}")
    print("top passages:")
    print_passages(result["passages"])
    print_latency(result["latency_ms"])
    return 0


SERVE_ANSWERS_ENV = "LIGHTFOOT_SERVE_ANSWERS"
SERVE_BUDGET_ENV = "LIGHTFOOT_SERVE_ANSWER_BUDGET_USD"


def _env_flag(name: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{name}={value!r}: expected 1/true/yes/on or 0/false/no/off")


def _serve_budget(args) -> float:
    from lightfoot_pipeline.serving.serve import DEFAULT_ANSWER_BUDGET_USD

    if args.answer_budget_usd is not None:
        return args.answer_budget_usd
    text = os.environ.get(SERVE_BUDGET_ENV, "").strip()
    if not text:
        return DEFAULT_ANSWER_BUDGET_USD
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{SERVE_BUDGET_ENV}={text!r} is not a number of USD") from None


@_reports_errors
def cmd_serve(args) -> int:
    import logging

    from lightfoot_pipeline.serving.answer import AnswerBudget
    from lightfoot_pipeline.serving.serve import open_service
    from lightfoot_pipeline.serving.serve_auth import AuthConfigError, Tokens, check_exposure
    from lightfoot_pipeline.serving.serve_http import HttpLimits, QueryServer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        tokens = Tokens.from_env(tokens_file=args.tokens_file)
        check_exposure(args.host, tokens, args.insecure_no_auth)
        answers = args.answers or _env_flag(SERVE_ANSWERS_ENV)
        budget = _serve_budget(args)
        AnswerBudget(budget)  # refuses a negative or infinite budget before anything loads
        limits = HttpLimits(max_body_bytes=args.max_body_bytes, queue=args.queue,
                            max_connections=args.max_connections, header_timeout_s=args.header_timeout,
                            body_timeout_s=args.body_timeout, keep_alive_s=args.keep_alive)
        if args.workers is not None:
            limits = dataclasses.replace(limits, workers=args.workers)
    except (AuthConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    store = _store(args)
    service = open_service(store, embedder_spec=args.embedder, reranker_spec=args.reranker, answers=answers,
                           answer_budget_usd=budget, ledger_prefix="serve",
                           answers_off_reason=f"answers are off on this service (start it with --answers "
                                              f"or {SERVE_ANSWERS_ENV}=1)")
    if service.answerer is not None:
        settings = service.answerer.client.settings
        limits = dataclasses.replace(limits, answer_workers=settings.concurrency)
    try:
        server = QueryServer(service, args.host, args.port, tokens=tokens, limits=limits)
    except OSError as err:
        service.close()
        print(f"error: cannot listen on {args.host}:{args.port}: {err}", file=sys.stderr)
        return 2
    service.watch(args.poll)
    status = service.status()
    print(f"serving snapshot {status['snapshot_id']} of {store.uri} on {server.url} "
          f"(POST /query, GET /status, GET /snapshot, GET /health); new snapshots are picked up every {args.poll:g}s")
    if tokens.configured:
        auth = "bearer token required (GET /health is open)"
    else:
        auth = "OFF: anyone who reaches the port can query" + (" (loopback only)" if not args.insecure_no_auth else "")
    print(f"  authentication: {auth}")
    if service.answerer is not None:
        settings = service.answerer.client.settings
        price_in, price_out, source = settings.prices()
        priced = (f"${price_in:g}/${price_out:g} per million tokens ({source})" if source != "unpriced"
                  else "NO PRICE KNOWN: set LIGHTFOOT_LLM_PRICE_IN/_OUT, else the budget counts every call as $0")
        answers_line = (f"on: {settings.model} at {settings.endpoint()}, {priced}; budget ${budget:g} for this "
                        f"process; every call in the cost ledger as run {service.ledger_run_id}")
    else:
        answers_line = service.answer_status
    print(f"  reranker: {status['reranker']['state']}; answers: {answers_line}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.socket.close()
        service.close()
    return 0


def cmd_serve_token(args) -> int:
    from lightfoot_pipeline.serving.serve_auth import AuthConfigError, TOKENS_FILE_ENV, hash_token, new_token

    if args.hash:
        try:
            print(hash_token(sys.stdin.readline()))
        except AuthConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    token = new_token()
    print(token)
    print(f"# give the token (above) to the client; add this line to the file named by {TOKENS_FILE_ENV}:\n"
          f"{hash_token(token)}", file=sys.stderr)
    return 0


@_reports_errors
def cmd_eval(args) -> int:
    if args.run_dir or args.answer or args.dry_run:
        from lightfoot_pipeline.cli.evaluation import cmd_eval_run

        return cmd_eval_run(args)  # every mode and baseline side by side, kept in a run directory
    if args.out is None:
        print("error: --out OUT.json (or --run-dir DIR) is required", file=sys.stderr)
        return 2
    from lightfoot_pipeline.models.embedder import load_embedder
    from lightfoot_pipeline.evaluation.evaluate import ensure_dataset_indexed, evaluate_recall
    from lightfoot_pipeline.cli.progress import Progress
    from lightfoot_pipeline.serving.rerank import load_reranker
    from lightfoot_pipeline.serving.retrieve import Retriever, one_thread_per_query
    from lightfoot_pipeline.serving.serve import resolve_embedder
    from lightfoot_pipeline.serving.snapshot import load_snapshot
    from lightfoot_pipeline.serving.export import export_snapshot

    dataset = Path(args.dataset)
    questions_file = Path(args.questions) if args.questions else default_questions_file(dataset)
    if questions_file is None:
        raise DatasetError(f"{dataset} has no questions*.jsonl; name a file with --questions")
    questions = load_questions(questions_file)
    store = _store(args)
    embedder = load_embedder(args.embedder) if args.embedder or not store.exists() else resolve_embedder(store)
    build = ensure_dataset_indexed(store, dataset, embedder, progress=Progress("building the store"))
    if build["built"]:
        print(f"built {build['documents']} documents into {store.uri} in {build['seconds']}s "
              f"with {build['model_calls']} model calls", file=sys.stderr)
    info = export_snapshot(store, embedder)
    reranker, status = load_reranker(args.reranker)
    retriever = Retriever(load_snapshot(store, info.snapshot_id), embedder, reranker, status)
    one_thread_per_query()  # retrieval timed as the query service runs it
    result = evaluate_recall(retriever, questions, progress=Progress("questions"))
    result["run"].update(dataset=str(dataset), questions=str(questions_file), build=build)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    print(f"{result['n_questions']} questions, snapshot {info.snapshot_id}, embedder {embedder.model_id}")
    for mode, recalls in result["modes"].items():
        print(f"  {mode:<18} " + "  ".join(f"{k} {v:.3f}" for k, v in recalls.items()))
    if status.state != "available":
        print(f"  (lightfoot+rerank not run: cross-encoder {status.state}: {status.reason})")
    print(f"wrote {out}")
    return 0


def add_query_commands(sub, common: argparse.ArgumentParser) -> None:
    """The snapshot, query, serve and eval subcommands."""
    reranker_help = ("cross-encoder name or path (default: $LIGHTFOOT_RERANKER, else BAAI/bge-reranker-base); "
                     "none turns reranking off")
    embedder_help = "embedding model name or path, or hashing[:DIM] (default: the snapshot's or the index's)"

    p = sub.add_parser("snapshot", parents=[common], help="export and publish a serving snapshot of the store")
    p.add_argument("--keep", type=int, default=3, help="snapshots to keep (default 3)")
    p.add_argument("--embedder", default=None, help=embedder_help)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_snapshot)

    p = sub.add_parser("query", parents=[common], help="ranked passages (and an answer) for a question")
    p.add_argument("question")
    p.add_argument("--top-k", type=int, default=10, help="passages to show (1-30, default 10)")
    p.add_argument("--no-answer", action="store_true", help="retrieval only: no language-model call")
    p.add_argument("--no-rerank", action="store_true", help="keep the PageRank order")
    p.add_argument("--embedder", default=None, help=embedder_help)
    p.add_argument("--reranker", default=None, help=reranker_help)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("serve", parents=[common],
                       help="HTTP query service: POST /query, GET /status, GET /snapshot, GET /health")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; beyond loopback a token is required)")
    p.add_argument("--port", type=int, default=8410)
    p.add_argument("--poll", type=float, default=2.0, help="seconds between checks for a new snapshot")
    p.add_argument("--tokens-file", default=None,
                   help="file of SHA-256 token digests, one a line (default: $LIGHTFOOT_SERVE_TOKENS_FILE); "
                        "a single token comes from $LIGHTFOOT_SERVE_TOKEN")
    p.add_argument("--insecure-no-auth", action="store_true",
                   help="serve beyond loopback without a token (only behind a proxy that authenticates)")
    p.add_argument("--answers", action="store_true",
                   help=f"answer with the language model (default: ${SERVE_ANSWERS_ENV}, else retrieval only)")
    p.add_argument("--answer-budget-usd", type=float, default=None,
                   help=f"most this process spends on answers (default: ${SERVE_BUDGET_ENV}, else 1.00)")
    p.add_argument("--max-body-bytes", type=int, default=64 * 1024, help="largest request body (default 65536)")
    p.add_argument("--workers", type=int, default=None, help="retrieval threads (default: one per CPU)")
    p.add_argument("--queue", type=int, default=64, help="queries waiting for a thread before 503 (default 64)")
    p.add_argument("--max-connections", type=int, default=1000,
                   help="open connections before new requests get 503 (default 1000)")
    p.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds a client has to send a request's headers (default 10)")
    p.add_argument("--body-timeout", type=float, default=10.0,
                   help="seconds a client has to send a request's body (default 10)")
    p.add_argument("--keep-alive", type=float, default=5.0, help="seconds an idle connection is kept (default 5)")
    p.add_argument("--embedder", default=None, help=embedder_help)
    p.add_argument("--reranker", default=None, help=reranker_help)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("serve-token", help="a new token for `lightfoot serve`, or the digest of one (--hash)")
    p.add_argument("--hash", action="store_true",
                   help="print the SHA-256 line of the token read from stdin (for the tokens file)")
    p.set_defaults(func=cmd_serve_token)

    p = sub.add_parser("eval", parents=[common], help="recall@2/5/10 of dense, lightfoot and lightfoot+rerank")
    p.add_argument("--dataset", required=True, help="dataset directory (built into --store first if needed)")
    p.add_argument("--questions", default=None, help="questions file (default: the dataset's questions*.jsonl)")
    p.add_argument("--out", default=None, help="where to write the JSON result (required without --run-dir)")
    p.add_argument("--embedder", default=None, help=embedder_help + "; the packaged MiniLM for a new store")
    p.add_argument("--reranker", default=None, help=reranker_help)
    add_run_options(p)  # --run-dir, --modes, --answer, --dry-run (cli/evaluation.py)
    p.set_defaults(func=cmd_eval)
