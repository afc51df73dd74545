"""``lightfoot extract-batches status|collect|cancel|export|import``: extraction batches from the
command line, for stores without Dagster (the sensor of the Dagster layer does ``collect``).

``lightfoot ingest --extractor openai-batch`` submits the batches; these commands follow them
(operations/batch_extraction.py). Each command that commits does it in an ingestion batch of its
own (``cli-extract-batches-…``), which it prints.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lightfoot_pipeline.settings import IndexSettings, SettingsError


def _extractor(args, store, *, offline: bool = False, directory: Path | None = None, run_id: str | None = None):
    from lightfoot_pipeline.ingest.extraction.batch_files import FileLimits
    from lightfoot_pipeline.operations.batch_extraction import build_batch_extractor

    limits = None
    if getattr(args, "max_requests", None) or getattr(args, "max_mb", None):
        defaults = FileLimits()
        limits = FileLimits(max_requests=args.max_requests or defaults.max_requests,
                            max_bytes=int(args.max_mb * 1024 * 1024) if args.max_mb else defaults.max_bytes)
    return build_batch_extractor(store, IndexSettings(), offline=offline, directory=directory, run_id=run_id,
                                 limits=limits, price_share=getattr(args, "price_share", None))


def cmd_status(args) -> int:
    from lightfoot_pipeline.cli.store import existing_store, print_json
    from lightfoot_pipeline.operations.batch_extraction import batch_status

    store = existing_store(args)
    status = batch_status(store)
    if args.json:
        print_json(status)
        return 0
    print(f"extraction batches of {store.uri}: {len(status['batches'])}, open {len(status['open'])}; "
          f"{status['awaiting_passages']:,} passages of {status['awaiting_documents']:,} documents await one")
    for b in status["batches"]:
        flags = ("open" if b["open"] else "ended") + (", files at the provider" if b["holds_provider_files"] else "")
        print(f"  {b['batch']} ({b['mode']}, {flags}): {b['state'] or b['events'][-1]}, {b['requests']} requests, "
              f"{b['answered']} answered, {b['failed']} without an answer" + (f"; {b['reason']}" if b["reason"] else ""))
    return 0


def cmd_collect(args) -> int:
    from lightfoot_pipeline.cli.store import batch_report, command_batch, existing_store, print_batch, print_json
    from lightfoot_pipeline.models.embedder import load_embedder
    from lightfoot_pipeline.operations.batch_extraction import collect
    from lightfoot_pipeline.store.batches import writing_batch

    store = existing_store(args)
    embedder = load_embedder(args.embedder)
    batch = command_batch("extract-batches")
    extractor = _extractor(args, store, run_id=batch.run_id)
    synchronous = None
    if args.now:
        from lightfoot_pipeline.ingest.extraction.answers import ClaimingExtractor
        from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor

        synchronous = ClaimingExtractor(build_openai_extractor(store, IndexSettings(), run_id=batch.run_id))
    with writing_batch(batch):
        report = collect(store, extractor, embedder, IndexSettings(), ask_again=not args.no_ask_again,
                         synchronous=synchronous)
    if args.json:
        print_json({**report.as_dict(), "batch": batch_report(batch)})
        return 0
    print(f"looked at {report.looked_at} open batches: {len(report.collected)} collected, "
          f"{len(report.still_open)} still running ({', '.join(sorted(set(report.still_open.values()))) or '-'})")
    print(f"  answers taken {report.answered} (already taken {report.already_taken}), without an answer "
          f"{report.without_answer}, files deleted at the provider {report.files_deleted}, cost ${report.cost_usd:.4f}")
    for name, problems in report.problems.items():
        print(f"  {name}: {problems[0]}" + (f" and {len(problems) - 1} more problems" if len(problems) > 1 else ""))
    if report.asked_again is not None and report.asked_again.sent:
        print(f"  asked again: {report.asked_again.sent} passage texts in {len(report.asked_again.batches)} batches")
    if report.answered_synchronously:
        print(f"  asked again at once: {report.answered_synchronously} passages answered")
    if report.seq is not None:
        print(f"  {report.documents} documents went on through forms and the graph in store commit {report.seq}")
    print_batch(batch)
    return 0


def cmd_cancel(args) -> int:
    from lightfoot_pipeline.cli.store import existing_store, print_json
    from lightfoot_pipeline.operations.batch_extraction import cancel

    store = existing_store(args)
    cancelled = cancel(store, _extractor(args, store), args.batches or None)
    if args.json:
        print_json({"cancelled": cancelled})
    else:
        print(f"cancelled {len(cancelled)} batches; their passages are asked again at the next collect")
    return 0


def cmd_export(args) -> int:
    from lightfoot_pipeline.cli.store import existing_store, print_json
    from lightfoot_pipeline.operations.batch_extraction import export

    store = existing_store(args)
    directory = Path(args.directory)
    report = export(store, _extractor(args, store, offline=True, directory=directory))
    if args.json:
        print_json(report.as_dict())
        return 0
    print(f"wrote {report.sent} requests in {len(report.files)} files to {directory} "
          f"({report.cached} answered by the cache, {report.in_open_batch} in a batch already)")
    for f in report.files:
        print(f"  {f.path.name}: {len(f.custom_ids)} requests, {f.n_bytes:,} bytes; run it, then "
              f"`lightfoot extract-batches import OUTPUT` (vLLM: python -m vllm.entrypoints.openai.run_batch "
              f"-i {f.path.name} -o OUTPUT --model MODEL)")
    return 0


def cmd_import(args) -> int:
    from lightfoot_pipeline.cli.store import batch_report, command_batch, existing_store, print_batch, print_json
    from lightfoot_pipeline.models.embedder import load_embedder
    from lightfoot_pipeline.operations.batch_extraction import import_output
    from lightfoot_pipeline.store.batches import writing_batch

    store = existing_store(args)
    path = Path(args.file)
    if not path.is_file():
        raise SettingsError(f"{path}: no such file", hint="name the output file the batch runner wrote")
    embedder = load_embedder(args.embedder)
    batch = command_batch("extract-batches")
    with writing_batch(batch):
        try:
            report = import_output(store, _extractor(args, store, offline=True), path, embedder, IndexSettings(),
                                   batch=args.batch)
        except ValueError as err:
            raise SettingsError(str(err), hint="`lightfoot extract-batches status` lists the open batches") from None
    taken = report.taken
    if args.json:
        print_json({"batch": report.batch, "answered": taken.answered, "without_answer": len(taken.reasons()),
                     "problems": taken.problems, "n_problems": taken.n_problems, "cost_usd": taken.cost_usd,
                     "seq": report.seq, "documents": report.documents, "store_batch": batch_report(batch)})
        return 0
    print(f"imported {path.name} for {report.batch}: {taken.answered} answers taken, {len(taken.reasons())} without "
          f"an answer, {taken.n_problems} problems in the file, cost ${taken.cost_usd:.4f}")
    for problem in taken.problems[:10]:
        print(f"  {problem}")
    if report.seq is not None:
        print(f"  {report.documents} documents went on through forms and the graph in store commit {report.seq}")
    print_batch(batch)
    return 0


def add_extract_batches_command(sub, common: argparse.ArgumentParser) -> None:
    """``extract-batches`` and its subcommands."""
    top = sub.add_parser("extract-batches", parents=[common],
                         help="follow extraction batches: a provider's Batch API or an offline runner")
    verbs = top.add_subparsers(dest="verb", required=True)

    p = verbs.add_parser("status", parents=[common], help="every batch's state, and the passages awaiting one")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = verbs.add_parser("collect", parents=[common],
                         help="take the answers of ended batches, delete their files at the provider, finish their "
                              "documents, and ask again for what they did not answer")
    p.add_argument("--embedder", default=None, help="the store's embedder (name or path, or hashing[:DIM])")
    p.add_argument("--now", action="store_true", help="ask again synchronously (OPENAI_BASE_URL), not in a new batch")
    p.add_argument("--no-ask-again", action="store_true", help="leave the unanswered passages as they are")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_collect)

    p = verbs.add_parser("cancel", parents=[common], help="cancel open batches and delete their files at the provider")
    p.add_argument("batches", nargs="*", metavar="BATCH", help="batch ids (default: every open batch)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cancel)

    p = verbs.add_parser("export", parents=[common],
                         help="write request files for a batch runner of your own (vLLM's run-batch reads them)")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--max-requests", type=int, default=None, help="requests a file (default 50,000)")
    p.add_argument("--max-mb", type=float, default=None, help="megabytes a file (default 200)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_export)

    p = verbs.add_parser("import", parents=[common], help="take a batch runner's output file")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--batch", default=None, help="the batch it answers (default: from its name or its first line)")
    p.add_argument("--embedder", default=None, help="the store's embedder (name or path, or hashing[:DIM])")
    p.add_argument("--price-share", type=float, default=None,
                   help="charge its answers at this share of the model's price (default: $0)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_import)
