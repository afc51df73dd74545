"""``lightfoot sync``: mirror a folder or an object-store prefix of document files into the store.

A sync, with what it readmits and erases, is one ingestion batch (``cli-sync-…``, see cli/store.py)."""

from __future__ import annotations

import argparse
import json
import sys

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.settings import (
    CHUNK_OVERLAP_TOKENS,
    CHUNK_TOKENS,
    MAX_FILE_BYTES,
    MAX_FILE_BYTES_CEILING,
    MAX_PASSAGES_PER_DOCUMENT,
    ChunkSettings,
    IndexSettings,
)


def cmd_sync(args) -> int:
    from lightfoot_pipeline.cli.store import batch_report, command_batch, print_batch, publishing_checks
    from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
    from lightfoot_pipeline.ingest.extraction.replay import ReplayExtractor
    from lightfoot_pipeline.models.embedder import load_embedder
    from lightfoot_pipeline.operations.sync import look_at_source, readmissions, sync, unextracted_files
    from lightfoot_pipeline.progress import Progress, name_progress
    from lightfoot_pipeline.store.batches import writing_batch
    from lightfoot_pipeline.store.store import Store

    chunking = ChunkSettings(tokens=args.chunk_tokens, overlap=args.chunk_overlap, max_passages=args.max_passages,
                             max_file_bytes=int(args.max_file_mb * 1024 * 1024))
    settings = IndexSettings()
    store = Store(args.store)
    # The source first: a folder that is not there is the error to report, and a sync that only
    # removes files (or finds nothing changed) needs no model endpoint. A file to readmit must be an
    # excluded file of the source. Then what else would fail after a paid call: the embedder, and a
    # store that cannot be written. Passages stored without an extraction need the endpoint too:
    # the sync asks for them again.
    look = look_at_source(store, args.source, chunking, name=args.name)
    readmit = readmissions(look, args.readmit or [])
    embedder = load_embedder(args.embedder)
    store.check_writable()
    asks = bool(look.to_read or readmit or unextracted_files(store, look))
    batch = command_batch("sync")
    if not asks:
        extractor = ReplayExtractor({})
    elif args.extractor == "openai-batch":  # the passages await a provider batch: `lightfoot extract-batches collect`
        from lightfoot_pipeline.operations.batch_extraction import build_batch_extractor

        extractor = build_batch_extractor(store, settings, run_id=batch.run_id)
    else:
        extractor = build_openai_extractor(store, settings, run_id=batch.run_id)
    with writing_batch(batch):
        report = sync(store, args.source, extractor, embedder, settings, chunking, erase=args.erase, readmit=readmit,
                      name=args.name,
                      batch_files=args.batch_files, progress=None if args.json else Progress("extracting"),
                      embed_progress=None if args.json else name_progress(),
                      snapshot_checks=publishing_checks(lambda: embedder))
    cause = getattr(extractor, "endpoint_error", None)
    if cause is not None:
        raise LightfootError(
            f"sync into {store.uri}: the model endpoint failed ({cause}); {report.unextracted} passages are "
            "stored without extraction, and the next sync asks for them",
            hint=cause.hint,
        ) from cause
    if args.json:
        json.dump({**report.as_dict(), "batch": batch_report(batch)}, sys.stdout, indent=2, sort_keys=True,
                  default=str)
        sys.stdout.write("\n")
    else:
        print_report(report, store.uri)
        print_batch(batch)
    if getattr(extractor, "mode", None) == "provider":  # awaiting a batch is not a failure
        if not args.json:
            print("  passages without extraction await a provider batch: `lightfoot extract-batches collect` takes "
                  "the answers once it ends (within 24 h)")
        return 1 if report.failed else 0
    return 1 if report.failed or report.extraction_failed or report.unextracted else 0


def print_report(report, store_uri: str) -> None:
    print(f"synced {report.source} into {store_uri}: {report.files} files, {len(report.new)} new, "
          f"{len(report.changed)} changed, {report.unchanged} unchanged, {len(report.removed)} removed, "
          f"{len(report.failed)} failed")
    print(f"  {report.passages} passages read: extracted {report.extracted}, already extracted "
          f"{report.already_extracted} ({report.from_cache} from the extraction cache), failed "
          f"{report.extraction_failed}")
    print(f"  model calls {report.model_calls} (retries {report.retries}), cost ${report.cost_usd:.4f}")
    if report.readers_changed:
        print(f"  readers changed (nothing else): {_listed(report.readers_changed)}")
    for failure in report.failed[:20]:
        print(f"  failed {failure['doc_id']}: {failure['reason']}")
    if len(report.failed) > 20:
        print(f"  … and {len(report.failed) - 20} more failed files (--json lists them all)")
    if report.kept:
        print(f"  kept as they were (their readers cannot be known until the sidecar or settings file is fixed): "
              f"{_listed(report.kept)}")
    if report.unextracted:
        print(f"  {report.unextracted} passages are stored without extraction: the next sync asks for them")
    if report.asked_again:
        print(f"  read again for passages without extraction: {_listed(report.asked_again)}")
    if report.readmitted:
        print(f"  readmitted: {_listed(report.readmitted)}")
    if report.excluded:
        print(f"  excluded (deleted from the index; --readmit PATH brings one back): "
              f"{_listed([e['doc_id'] for e in report.excluded])}")
    if report.removed:
        shown = ", ".join(report.removed[:10]) + (f" and {len(report.removed) - 10} more" if len(report.removed) > 10
                                                   else "")
        print(f"  deleted (no longer at the source): {shown}")
    if report.erase:
        print(f"  erased: {report.erase['cache_entries_purged']} cache entries, "
              f"{report.erase['snapshots_removed']} snapshots, {sum(report.erase['files_vacuumed'].values())} files "
              "vacuumed")
    commits = ", ".join(map(str, report.commits)) or "none (nothing changed)"
    print(f"  store commits {commits} in {report.seconds:.1f}s (reading files {report.read_seconds:.1f}s)")


def _listed(doc_ids: list[str], most: int = 10) -> str:
    return ", ".join(doc_ids[:most]) + (f" and {len(doc_ids) - most} more" if len(doc_ids) > most else "")


def _positive_mb(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of megabytes") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the limit must be above 0")
    ceiling = MAX_FILE_BYTES_CEILING // 1024 // 1024
    if value > ceiling:
        raise argparse.ArgumentTypeError(f"{text!r}: the limit can be at most {ceiling} (a file is read whole into memory)")
    return value


def add_sync_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("sync", parents=[common],
                       help="mirror a folder or s3:// prefix of PDF, Word, HTML, Markdown and text files into the store")
    p.add_argument("--source", required=True,
                   help="a folder or s3://bucket/prefix; a file's doc id is NAME:PATH, its path within it")
    p.add_argument("--name", default=None,
                   help="the NAME of the source's doc ids (default: the folder's or prefix's last part); two "
                        "sources in one store need two names")
    p.add_argument("--erase", action="store_true", help="erase the text of removed files from history and caches")
    p.add_argument("--readmit", action="append", metavar="PATH",
                   help="index again a file excluded by a deletion (its path within the source, or its doc id); "
                        "repeatable")
    p.add_argument("--embedder", default=None, help="embedding model name or path, or hashing[:DIM]")
    p.add_argument("--extractor", choices=["openai", "openai-batch"], default="openai",
                   help="call the model per passage (default), or submit the passages to the provider's Batch API at "
                        "its batch price (`lightfoot extract-batches collect` takes the answers)")
    p.add_argument("--chunk-tokens", type=int, default=CHUNK_TOKENS,
                   help=f"a passage's budget in word and punctuation tokens (default {CHUNK_TOKENS})")
    p.add_argument("--chunk-overlap", type=int, default=CHUNK_OVERLAP_TOKENS,
                   help=f"tokens repeated from the passage before (default {CHUNK_OVERLAP_TOKENS})")
    p.add_argument("--max-passages", type=int, default=MAX_PASSAGES_PER_DOCUMENT,
                   help=f"refuse a file with more passages (default {MAX_PASSAGES_PER_DOCUMENT})")
    p.add_argument("--max-file-mb", type=_positive_mb, default=MAX_FILE_BYTES / 1024 / 1024,
                   help=f"refuse a larger file (default {MAX_FILE_BYTES // 1024 // 1024})")
    p.add_argument("--batch-files", type=int, default=200, help="files per store commit (default 200)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_sync)
