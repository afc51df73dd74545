"""The query-time commands of the ``lightfoot`` command line: snapshot, query, serve, mcp.

``query --as GROUP[,GROUP]`` (and ``eval --as``) read as a principal of those groups: its view
of the snapshot (permissions/views.py) is what they retrieve and answer from.

Like cli/__init__.py, this module parses arguments and prints results; the work is in snapshot/,
retrieval/retrieve.py, retrieval/answer.py and service/queries.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from lightfoot_pipeline.cli.store import print_json
from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.settings import (
    SERVE_ANSWERS_ENV,
    SERVE_BUDGET_ENV,
    SettingsError,
    serve_answer_budget_usd,
    serve_answers,
)
from lightfoot_pipeline.settings.environment import DEFAULT_POLL_S

PREVIEW_CHARS = 160
ALLOW_UNPRICED_HELP = ("answer with a model that has no known price (default: $LIGHTFOOT_LLM_ALLOW_UNPRICED, "
                       "else refused): its calls count as $0, so no budget holds them; pricing it with "
                       "LIGHTFOOT_LLM_PRICE_IN/_OUT keeps the budget")


def principal_line(principal: dict) -> str:
    """Whom a command read as: ``NAME (groups G, H; N documents)``."""
    groups = ", ".join(principal["groups"]) or "none: public documents only"
    return f"{principal['principal']} (groups {groups}; {principal['documents']} documents)"


def add_as_option(p: argparse.ArgumentParser) -> None:
    """--as GROUP[,GROUP]: read as a principal of these groups (its view of the snapshot)."""
    p.add_argument("--as", dest="as_groups", metavar="GROUP[,GROUP]", default=None,
                   help="read as a principal of these groups: only the documents they may read (and public ones) "
                        "exist for the command, as in an index of those alone; '' for the public documents only, "
                        "* for all (default: the operator, all documents)")


def read_as(service, as_groups: str | None) -> dict:
    """Serve the view of the principal of ``as_groups`` (the operator's, the whole snapshot, when
    None): retrieval, answers and the deep loop then read only the documents it may read, as in an
    index of those alone (permissions/views.py). Returns whom the service answers as."""
    from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL, principal_of
    from lightfoot_pipeline.permissions.views import reader_view

    principal = OPERATOR_PRINCIPAL if as_groups is None else principal_of(as_groups)
    view = reader_view(service.snapshot, principal)
    if view.snapshot is not service.snapshot:
        service.use(view.snapshot)
    return {**principal.as_dict(), "documents": view.snapshot.passages.get_column("doc_id").n_unique()}


def _store(args):
    from lightfoot_pipeline.store.store import Store

    return Store(args.store)


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def print_passages(passages: list[dict]) -> None:
    for p in passages:
        title = f"{p['title']}: " if p["title"] else ""
        print(f"  {p['rank']:>2}. [{p.get('location') or p['doc_id']}] {title}{_preview(p['text'])}")


def print_latency(latency: dict) -> None:
    print("latency ms: " + ", ".join(f"{k} {v:.1f}" for k, v in latency.items()))


def cmd_snapshot(args) -> int:
    from lightfoot_pipeline.cli.store import (
        batch_report,
        command_batch,
        print_batch,
        print_unpublished,
        publishing_checks,
    )
    from lightfoot_pipeline.progress import StepProgress
    from lightfoot_pipeline.service.queries import resolve_embedder
    from lightfoot_pipeline.snapshot.export import publish_checked
    from lightfoot_pipeline.store.batches import writing_batch

    store = _store(args)
    started = time.perf_counter()
    batch = command_batch("snapshot")  # the first snapshot of a store registers its vector model: a commit
    embedder = resolve_embedder(store, args.embedder)
    checks = publishing_checks(lambda: embedder, permissions=not args.no_permission_check,
                               rebuild=args.check_rebuild)
    with writing_batch(batch):
        report = publish_checked(store, embedder, checks, keep=args.keep, progress=StepProgress("snapshot"),
                                 restage=args.restage)
    info = report.info
    if args.json:
        print_json({**info.as_dict(), "published": report.published, "reason": report.reason,
                     "checks": [c.as_dict() for c in report.verdict.checks] if report.verdict else [],
                     "batch": batch_report(batch)})
        return 0 if report.published else 1
    if not report.published:
        print_unpublished(report)
        return 1
    print(f"published snapshot {info.snapshot_id} of store commit {info.store_seq} "
          f"({time.perf_counter() - started:.1f}s)")
    print(f"  {info.uri}")
    print("  " + ", ".join(f"{k} {v:,}" for k, v in info.counts.items() if isinstance(v, int)))
    for check in report.verdict.checks if report.verdict else []:
        print(f"  check {check.name}: " + ("passed" if check.passed else f"not run: {check.skipped}"))
    print_batch(batch)
    return 0


def serving_checks(store, embedder_spec: str | None) -> list:
    """What a snapshot that ``query``, ``serve`` or ``explain`` export (when none is published, or
    none of their embedder's) must pass to be published: the same checks as ``lightfoot snapshot``'s."""
    from lightfoot_pipeline.cli.store import publishing_checks
    from lightfoot_pipeline.service.queries import resolve_embedder

    return publishing_checks(lambda: resolve_embedder(store, embedder_spec))


def cmd_query(args) -> int:
    from lightfoot_pipeline.service.queries import open_service, snapshot_is_stale

    store = _store(args)
    if args.mode == "deep":
        return query_deep(args, store)
    if args.trace or args.max_steps is not None or args.question_budget is not None:
        raise SettingsError("query: --trace, --max-steps and --question-budget are options of the deep mode",
                            hint="add --mode deep")
    with open_service(store, embedder_spec=args.embedder, reranker_spec=args.reranker,
                      snapshot_checks=serving_checks(store, args.embedder),
                      answers=not args.no_answer, allow_unpriced=args.allow_unpriced) as service:
        if service.price is not None and service.price["state"] == "refused":  # before any paid call
            from lightfoot_pipeline.retrieval.answer import answer_settings

            answer_settings(allow_unpriced=args.allow_unpriced).require_price("query: answers")
        principal = read_as(service, args.as_groups)
        result = service.query(args.question, top_k=args.top_k, answer=not args.no_answer,
                               rerank=not args.no_rerank)
        result["snapshot"]["stale"] = snapshot_is_stale(store, service)
    result["principal"] = principal
    if args.json:
        print_json(result)
        return 0
    snap = result["snapshot"]
    print(f"snapshot {snap['snapshot_id']} (store commit {snap['store_seq']})"
          + ("; the store has newer commits: run `lightfoot snapshot` to serve them" if snap["stale"] else ""))
    print(f"answered as {principal_line(principal)}")
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


def query_deep(args, store) -> int:
    """``lightfoot query --mode deep``: the answer, the memory points it used, and (--trace) the steps."""
    from lightfoot_pipeline.retrieval.deep import DeepSettings, provenance_lines, trace_lines
    from lightfoot_pipeline.service.queries import open_service

    settings = DeepSettings.from_env(max_steps=args.max_steps, question_budget_usd=args.question_budget)
    with open_service(store, embedder_spec=args.embedder, reranker_spec=args.reranker,
                      snapshot_checks=serving_checks(store, args.embedder), answers=True,
                      allow_unpriced=getattr(args, "allow_unpriced", False)) as service:
        if service.answerer is None:
            raise SettingsError(f"query --mode deep: {service.answer_status}",
                                hint="set OPENAI_BASE_URL to an OpenAI-compatible endpoint (the README's settings table)")
        principal = read_as(service, getattr(args, "as_groups", None))  # explain query --mode deep has no --as
        result = service.deep(args.question, rerank=not args.no_rerank, settings=settings)
    result["principal"] = principal
    if args.json:
        print_json(result)
        return 0
    snap, deep = result["snapshot"], result.get("deep")
    print(f"snapshot {snap['snapshot_id']} (store commit {snap['store_seq']}); mode deep, at most "
          f"{settings.max_steps} steps, ${settings.question_budget_usd:g} a question")
    print(f"answered as {principal_line(principal)}")
    if deep is None or result["answer"] is None:
        print(f"answer: none ({result['answer_status']})")
    else:
        print(f"answer: {result['answer']}   [{len(deep['calls'])} calls, {deep['tokens_in']}/{deep['tokens_out']} "
              f"tokens, ${deep['cost_usd']:.6f}]")
    if deep is not None:
        print("memory points used:" if deep["points"] else f"memory points: {len(deep['memory'])}, none used")
        for line in provenance_lines(deep):
            print(line)
        if args.trace:
            print("steps:")
            for line in trace_lines(deep):
                print("  " + line)
    print_latency(result["latency_ms"])
    return 0


def _serve_budget(args) -> float:
    from lightfoot_pipeline.service.queries import DEFAULT_ANSWER_BUDGET_USD

    if args.answer_budget_usd is not None:
        return args.answer_budget_usd
    configured = serve_answer_budget_usd()
    return DEFAULT_ANSWER_BUDGET_USD if configured is None else configured


def cmd_serve(args) -> int:
    import logging

    from lightfoot_pipeline.retrieval.answer import AnswerBudget
    from lightfoot_pipeline.service.auth import Tokens, check_exposure
    from lightfoot_pipeline.service.gate import access_logger
    from lightfoot_pipeline.service.queries import DEFAULT_PRINCIPAL_BUDGET_USD, open_service
    from lightfoot_pipeline.service.server import HttpLimits, QueryServer, raise_descriptor_limit

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("mcp").setLevel(logging.WARNING)  # the MCP SDK's per-request lines quote agents' arguments
    tokens = Tokens.from_env(tokens_file=args.tokens_file)
    check_exposure(args.host, tokens, args.insecure_no_auth)
    local_principal = _serve_principal(args, tokens)
    answers = args.answers or serve_answers()
    budget = _serve_budget(args)
    principal_budget = (DEFAULT_PRINCIPAL_BUDGET_USD if args.principal_budget_usd is None
                        else args.principal_budget_usd)
    try:  # the service's own checks of the options, refused before anything loads
        if not 0 <= args.port <= 65535:
            raise ValueError(f"--port must be from 0 to 65535, got {args.port}")
        if not args.poll > 0:
            raise ValueError(f"--poll must be positive, got {args.poll:g}")
        AnswerBudget(budget)
        AnswerBudget(principal_budget)
        limits = HttpLimits(max_body_bytes=args.max_body_bytes, queue=args.queue,
                            max_connections=args.max_connections, header_timeout_s=args.header_timeout,
                            body_timeout_s=args.body_timeout, keep_alive_s=args.keep_alive,
                            max_connections_per_client=args.max_connections_per_client,
                            client_rate=args.client_rate, client_burst=args.client_burst,
                            token_rate=args.token_rate, token_burst=args.token_burst)
        access_logger(args.access_log, args.access_log_max_bytes, args.access_log_backups)
        if args.workers is not None:
            limits = dataclasses.replace(limits, workers=args.workers)
    except (ValueError, OSError) as err:  # OSError: an access log that cannot be opened
        raise SettingsError(f"serve: {err}", hint="see `lightfoot serve --help`") from None
    store = _store(args)
    service = open_service(store, embedder_spec=args.embedder, reranker_spec=args.reranker,
                      snapshot_checks=serving_checks(store, args.embedder), answers=answers,
                           answer_budget_usd=budget, ledger_prefix="serve", allow_unpriced=args.allow_unpriced,
                           principal_budget_usd=principal_budget,
                           answers_off_reason=f"answers are off on this service (start it with --answers "
                                              f"or {SERVE_ANSWERS_ENV}=1)")
    if service.answerer is not None:
        settings = service.answerer.client.settings
        limits = dataclasses.replace(limits, answer_workers=settings.concurrency)
    raise_descriptor_limit()  # the service is ready to serve: sockets beyond the usual 1,024 (server.py)
    try:
        server = QueryServer(service, args.host, args.port, tokens=tokens, limits=limits,
                             allowed_hosts=args.allowed_host, insecure_no_auth=args.insecure_no_auth,
                             local_principal=local_principal)
    except OSError as err:
        service.close()
        raise LightfootError(f"serve: cannot listen on {args.host}:{args.port}: {err}",
                             hint="choose another --port or --host, or stop what listens there") from None
    service.watch(args.poll)
    status = service.status()
    print(f"serving snapshot {status['snapshot_id']} of {store.uri} on {server.url} "
          f"(POST /query, GET /status, GET /snapshot, GET /health, POST /v1/chat/completions, POST /mcp); "
          f"new snapshots are picked up every {args.poll:g}s")
    if tokens.configured:
        auth = "bearer token required (GET /health is open); each token reads as its principal's groups"
    else:
        auth = ("OFF: anyone who reaches the port can query" if args.insecure_no_auth else
                "OFF: only requests to a loopback name from this service's own page or a non-browser client")
        readable = ("every document (operator)" if local_principal.is_operator else
                    f"groups {', '.join(local_principal.groups)} and public documents" if local_principal.groups
                    else "public documents only (--as GROUPS for more)")
        auth += f"; every request reads as {readable}"
    print(f"  authentication: {auth}")
    descriptors, bounds = server.connections.descriptors, server.connections
    print(f"  descriptors: limit {descriptors.limit}, {descriptors.reserve} kept for requests; connections at most "
          f"{bounds.opened.total} open ({bounds.opened.per_client} an address) and {bounds.held.total} refused held")
    if service.answerer is not None:
        settings = service.answerer.client.settings
        price_in, price_out, source = settings.prices()
        priced = (f"${price_in:g}/${price_out:g} per million tokens ({source})" if source != "unpriced"
                  else "NO PRICE KNOWN, allowed by --allow-unpriced: every call counts as $0 and no budget holds it")
        answers_line = (f"on: {settings.model} at {settings.endpoint()}, {priced}; budget ${budget:g} for this "
                        f"process, ${principal_budget:g} for each principal; every call in the cost ledger as run {service.ledger_run_id}")
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


def _serve_principal(args, tokens):
    """Whom a service without tokens answers as: ``--as GROUPS`` (default: public documents only)."""
    from lightfoot_pipeline.permissions.principals import principal_of
    from lightfoot_pipeline.service.auth import PUBLIC_PRINCIPAL

    if args.as_groups is None:
        return PUBLIC_PRINCIPAL
    if tokens.configured:
        raise SettingsError("serve: --as is whom a service without tokens answers as; a token's groups are in "
                            "its tokens-file line", hint="drop --as, or give each token its groups "
                            "(`lightfoot serve-token --principal NAME --groups G`)")
    return principal_of(args.as_groups, where="--as")


def cmd_mcp(args) -> int:
    """``lightfoot mcp``: the MCP server over stdio (service/mcp_server.py), as one principal."""
    import logging

    import anyio
    import anyio.to_thread

    from lightfoot_pipeline.service.app import private_error
    from lightfoot_pipeline.service.explanations import Explanations
    from lightfoot_pipeline.service.mcp_server import build_mcp_server
    from lightfoot_pipeline.service.queries import open_service

    # stdout is the protocol's: everything else goes to stderr
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.poll > 0:
        raise SettingsError(f"mcp: --poll must be positive, got {args.poll:g}", hint="see `lightfoot mcp --help`")
    principal = _mcp_principal(args)
    store = _store(args)
    service = open_service(store, embedder_spec=args.embedder, reranker_spec=args.reranker, answers=False,
                           answers_off_reason="the MCP server makes no model calls: the agent answers")
    limiter = anyio.CapacityLimiter(2)  # tool calls at once: the client's are sequential as a rule

    async def run(fn, *arguments):
        return await anyio.to_thread.run_sync(fn, *arguments, limiter=limiter)

    server = build_mcp_server(Explanations(service), lambda context: principal, run, private_error)
    service.watch(args.poll)
    print(f"lightfoot mcp: serving snapshot {service.status(principal)['snapshot_id']} of {store.uri} over stdio as "
          f"{principal.name} ({', '.join(principal.groups) or 'public documents only'})", file=sys.stderr, flush=True)
    try:
        server.run("stdio")
    except KeyboardInterrupt:
        pass
    finally:
        service.close()
    return 0


def _mcp_principal(args):
    """Whom ``lightfoot mcp`` answers as: the principal of ``$LIGHTFOOT_MCP_TOKEN`` among the
    service's tokens, else ``--as GROUPS`` (default: the public documents only). A token that no
    tokens file or ``$LIGHTFOOT_SERVE_TOKEN`` accepts is refused: this fails closed."""
    from lightfoot_pipeline.permissions.principals import principal_of
    from lightfoot_pipeline.service.auth import PUBLIC_PRINCIPAL, Tokens
    from lightfoot_pipeline.settings import MCP_TOKEN_ENV, SERVE_TOKENS_FILE_ENV, mcp_token

    token = mcp_token()
    if token is None:
        return PUBLIC_PRINCIPAL if args.as_groups is None else principal_of(args.as_groups, where="--as")
    if args.as_groups is not None:
        raise SettingsError(f"mcp: {MCP_TOKEN_ENV} names the principal; --as cannot be given with it",
                            hint=f"drop --as, or unset {MCP_TOKEN_ENV}")
    tokens = Tokens.from_env(tokens_file=args.tokens_file)
    identity = tokens.authenticate(token) if tokens.configured else None
    if identity is None:
        raise SettingsError(f"mcp: the token in {MCP_TOKEN_ENV} is not one of the service's tokens",
                            hint=f"give the tokens file (--tokens-file or {SERVE_TOKENS_FILE_ENV}) that holds its "
                                 "digest (`lightfoot serve-token`)")
    return identity.principal


def cmd_serve_token(args) -> int:
    from lightfoot_pipeline.service.auth import TOKENS_FILE_ENV, new_token, token_line

    if args.hash:
        print(token_line(sys.stdin.readline(), args.principal, args.groups))
        return 0
    token = new_token()
    line = token_line(token, args.principal, args.groups)
    print(token)
    print(f"# give the token (above) to the client; add this line to the file named by {TOKENS_FILE_ENV}:\n"
          f"{line}", file=sys.stderr)
    return 0


def add_query_commands(sub, common: argparse.ArgumentParser) -> None:
    """The snapshot, query, serve, mcp and serve-token subcommands."""
    reranker_help = ("cross-encoder name or path (default: $LIGHTFOOT_RERANKER, else BAAI/bge-reranker-base); "
                     "none turns reranking off")
    embedder_help = "embedding model name or path, or hashing[:DIM] (default: the snapshot's or the index's)"

    p = sub.add_parser("snapshot", parents=[common], help="export a serving snapshot of the store, check it, and publish it if it passes")
    p.add_argument("--keep", type=int, default=3, help="published snapshots to keep (default 3)")
    p.add_argument("--embedder", default=None, help=embedder_help)
    p.add_argument("--no-permission-check", action="store_true",
                   help="publish without auditing the staged snapshot's reader views (its verdict records the "
                        "check as turned off)")
    p.add_argument("--check-rebuild", nargs="?", const="full", default=None, choices=["full", "changed", "auto"],
                   help="also check the store against a fresh build before publishing (no model call): 'full' "
                        "(the default) rebuilds every live document and compares the fingerprints (costs a "
                        "build); 'changed' derives again the components and facts the newest run changed, and a "
                        "sample of the rest, and compares them row for row (costs the change); 'auto': full up "
                        "to 20,000 live documents, changed above")
    p.add_argument("--restage", action="store_true",
                   help="stage, check and publish a new snapshot even when the published one holds the store's "
                        "state (after an upgrade that writes what it lacks, such as the facts' 8-bit codes)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_snapshot)

    p = sub.add_parser("query", parents=[common], help="ranked passages (and an answer) for a question")
    p.add_argument("question")
    p.add_argument("--top-k", type=int, default=10, help="passages to show (1-30, default 10)")
    p.add_argument("--no-answer", action="store_true", help="retrieval only: no language-model call")
    p.add_argument("--no-rerank", action="store_true", help="keep the PageRank order")
    p.add_argument("--mode", choices=("lightfoot", "deep"), default="lightfoot",
                   help="lightfoot: retrieve once, answer once (default); deep: a multi-step answer from a "
                        "working memory, with model calls before the answer")
    p.add_argument("--trace", "--explain", dest="trace", action="store_true",
                   help="deep mode: print the steps (subqueries, what each retrieved, the memory operations)")
    p.add_argument("--max-steps", type=int, default=None,
                   help="deep mode: retrieval steps at most (default: $LIGHTFOOT_DEEP_MAX_STEPS, else 3)")
    p.add_argument("--question-budget", type=float, default=None,
                   help="deep mode: most one question spends, USD (default: $LIGHTFOOT_DEEP_QUESTION_BUDGET_USD, "
                        "else 0.05)")
    p.add_argument("--embedder", default=None, help=embedder_help)
    p.add_argument("--reranker", default=None, help=reranker_help)
    p.add_argument("--allow-unpriced", action="store_true", help=ALLOW_UNPRICED_HELP)
    add_as_option(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("serve", parents=[common],
                       help="HTTP query service: POST /query, GET /status, GET /snapshot, GET /health, the "
                            "OpenAI-compatible /v1/chat/completions and the MCP server at /mcp")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; beyond loopback a token is required)")
    p.add_argument("--port", type=int, default=8410)
    p.add_argument("--poll", type=float, default=DEFAULT_POLL_S,
                   help="seconds between checks for a new snapshot and for narrowing store commits")
    p.add_argument("--tokens-file", default=None,
                   help="file of SHA-256 token digests, one a line (default: $LIGHTFOOT_SERVE_TOKENS_FILE); "
                        "a single token comes from $LIGHTFOOT_SERVE_TOKEN")
    p.add_argument("--insecure-no-auth", action="store_true",
                   help="serve without a token to any Host and Origin, beyond loopback too (only behind a proxy "
                        "that authenticates); without it and without a token, only loopback requests from no "
                        "other site are answered")
    p.add_argument("--answers", action="store_true",
                   help=f"answer with the language model (default: ${SERVE_ANSWERS_ENV}, else retrieval only)")
    p.add_argument("--answer-budget-usd", type=float, default=None,
                   help=f"most this process spends on answers in all (default: ${SERVE_BUDGET_ENV}, else 1.00)")
    p.add_argument("--principal-budget-usd", type=float, default=None,
                   help="most each principal (by name) spends on answers, within the process's budget "
                        "(default 0.25)")
    p.add_argument("--allow-unpriced", action="store_true", help=ALLOW_UNPRICED_HELP)
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
    p.add_argument("--max-connections-per-client", type=int, default=32,
                   help="open connections of one client address; more are refused at once with 429 (default 32)")
    p.add_argument("--client-rate", type=float, default=20.0,
                   help="requests a second of one client address before 429 (default 20; 0: no limit)")
    p.add_argument("--client-burst", type=float, default=40.0, help="requests at once of one client address (default 40)")
    p.add_argument("--token-rate", type=float, default=20.0,
                   help="requests a second with one token before 429 (default 20; 0: no limit)")
    p.add_argument("--token-burst", type=float, default=40.0, help="requests at once with one token (default 40)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a Host name the service answers to, beside the loopback names and --host "
                        "(repeat it; * for any); other names get 421")
    p.add_argument("--access-log", default=None, metavar="PATH",
                   help="write the access log (time, client, token id, method, path, status, ms) to PATH, "
                        "rotated by size (default: the process's log)")
    p.add_argument("--access-log-max-bytes", type=int, default=10 * 1024 * 1024,
                   help="size at which the access log is rotated (default 10485760)")
    p.add_argument("--access-log-backups", type=int, default=5, help="rotated access logs kept (default 5)")
    p.add_argument("--as", dest="as_groups", default=None, metavar="GROUPS",
                   help="without tokens: answer every request as these reader groups (comma-separated; * for "
                        "every document); default: public documents only. A token's groups are in its line")
    p.add_argument("--embedder", default=None, help=embedder_help)
    p.add_argument("--reranker", default=None, help=reranker_help)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("mcp", parents=[common],
                       help="MCP server over stdio for an agent's desktop client: search and explain tools, documents "
                            "as resources (lightfoot serve has it over HTTP at /mcp)")
    p.add_argument("--as", dest="as_groups", default=None, metavar="GROUPS",
                   help="answer as these reader groups (comma-separated; * for every document); default: public "
                        "documents only; with $LIGHTFOOT_MCP_TOKEN, the token's principal instead")
    p.add_argument("--tokens-file", default=None,
                   help="the service's tokens file, to find $LIGHTFOOT_MCP_TOKEN's principal (default: "
                        "$LIGHTFOOT_SERVE_TOKENS_FILE)")
    p.add_argument("--poll", type=float, default=DEFAULT_POLL_S,
                   help="seconds between checks for a new snapshot and for narrowing store commits")
    p.add_argument("--embedder", default=None, help=embedder_help)
    p.add_argument("--reranker", default=None, help=reranker_help)
    p.set_defaults(func=cmd_mcp)

    p = sub.add_parser("serve-token", help="a new token for `lightfoot serve`, or the digest of one (--hash)")
    p.add_argument("--hash", action="store_true",
                   help="print the SHA-256 line of the token read from stdin (for the tokens file)")
    p.add_argument("--principal", default=None, metavar="NAME",
                   help="the token's principal, named in logs and on the page (default: none, named by its "
                        "token id)")
    p.add_argument("--groups", default=None, metavar="G[,G]",
                   help="the reader groups the token reads as (* for every document); default: public "
                        "documents only. Needs --principal")
    p.set_defaults(func=cmd_serve_token)
