"""The store commands of the ``lightfoot`` command line: what changes a store (ingest, delete,
vacuum, migrate) and what reports on one (status, cost).

Each command's work lives in the engine; these functions parse arguments and print results. Every
command that commits to a store does it in an ingestion batch of its own (:func:`command_batch`,
store/batches.py), whose id it prints: ``lightfoot explain batch ID`` shows what it did.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.ingest.dataset import DatasetError, has_recorded_extractions, load_corpus
from lightfoot_pipeline.settings import IndexSettings, SettingsError


def _store(args):
    from lightfoot_pipeline.store.store import DEFAULT_BUCKETS, Store

    buckets = getattr(args, "buckets", None)
    if buckets is not None and buckets < 1:
        raise SettingsError(f"--buckets must be a whole number of at least 1, got {buckets}")
    return Store(args.store, n_buckets=buckets or DEFAULT_BUCKETS)


def existing_store(args):
    """The store ``--store`` names, refused (StoreError) when it holds no commit yet (the commands
    of every cli module that read one)."""
    from lightfoot_pipeline.store.store import StoreError

    store = _store(args)
    if not store.exists():
        raise StoreError(f"no store at {store.uri}",
                         hint="name the store with --store (or LIGHTFOOT_STORE), or build one with `lightfoot ingest`")
    return store


def print_json(payload) -> None:
    """A command's --json output: the payload, indented, keys sorted."""
    json.dump(payload, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def command_batch(command: str, run_id: str | None = None):
    """The batch a command's store writes belong to (``cli-<command>-<time>-<random>``), in a run of
    its own unless ``run_id`` names the command's run: the run its commits record, and the cost
    ledger's run of the model calls it makes."""
    from lightfoot_pipeline.store.batches import CLI, Batch, new_batch_id
    from lightfoot_pipeline.store.ledger import new_run_id

    kind = f"cli-{command}"
    return Batch(new_batch_id(kind), run_id or new_run_id(kind), CLI)


def batch_report(batch) -> dict:
    """What a command's --json output says of its batch: its id (None when it committed nothing),
    its run, and the store commits it made."""
    return {"batch_id": batch.batch_id if batch.commits else None, "run_id": batch.run_id,
            "commits": list(batch.commits)}


def print_batch(batch) -> None:
    """The line that names a command's batch, when it committed anything, and how to look it up."""
    from lightfoot_pipeline.provenance.batches import batch_link

    if not batch.commits:
        return
    link = batch_link(batch.batch_id)
    print(f"  batch {batch.batch_id} (run {batch.run_id}): see `lightfoot explain batch {batch.batch_id}`"
          + (f" or {link}" if link else ""))


def make_extractor(kind: str | None, dataset_dir: Path | None, store, settings: IndexSettings,
                   run_id: str | None = None):
    """The extractor a command asked for: ``replay`` (recorded output) or ``openai`` (a live model,
    its calls in the cost ledger as ``run_id``), with the recorded extractions it replays (None for
    a model)."""
    if kind is None:
        kind = "replay" if dataset_dir is not None and has_recorded_extractions(dataset_dir) else "openai"
    if kind == "replay":
        from lightfoot_pipeline.ingest.dataset import load_recorded_extractions
        from lightfoot_pipeline.ingest.extraction import ReplayExtractor

        if dataset_dir is None or not has_recorded_extractions(dataset_dir):
            raise DatasetError(f"{dataset_dir}: no extractions.jsonl to replay",
                               hint="record the extractions there, or extract with a model (--extractor openai)")
        records = load_recorded_extractions(dataset_dir)
        extractor = ReplayExtractor(records, entity_types=None, max_entities=settings.max_entities_per_passage,
                                    max_facts=settings.max_facts_per_passage)
        return extractor, records
    if kind in ("openai", "openai-batch"):  # a batch's passages await it: `lightfoot extract-batches collect`
        from lightfoot_pipeline.operations.extractors import ExtractionChoice

        return ExtractionChoice(kind).model_extractor(store, settings, run_id), None
    raise SettingsError(f"unknown extractor {kind!r}", hint="choose replay, openai or openai-batch")


def _listed(ids: list[str], limit: int = 10) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def cmd_ingest(args) -> int:
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.models.embedder import load_embedder
    from lightfoot_pipeline.progress import Progress, name_progress
    from lightfoot_pipeline.store.batches import writing_batch

    settings = IndexSettings()
    dataset = Path(args.dataset)
    documents = load_corpus(dataset)
    store = _store(args)
    embedder = load_embedder(args.embedder)
    store.check_writable()  # before any paid call
    batch = command_batch("ingest")
    extractor, recorded = make_extractor(args.extractor, dataset, store, settings, run_id=batch.run_id)
    progress = None if args.json else Progress("extracting")
    with writing_batch(batch):
        report = operations.ingest(store, documents, extractor, embedder, settings, progress=progress,
                                   recorded=recorded, embed_progress=None if args.json else name_progress())
    _refuse_a_failed_endpoint(extractor, report, store)
    if args.json:
        print_json({**report.as_dict(), "batch": batch_report(batch)})
    else:
        print(f"ingested {report.ingested} new documents, replaced {report.replaced}, {report.unchanged} unchanged "
              f"({report.passages} passages) into {store.uri}")
        if report.replaced:
            print(f"  replaced (a new version of a stored document): {_listed(report.replaced_doc_ids)}; "
                  "their earlier text leaves the store's history at the next `lightfoot vacuum` or erase")
        if report.readers_changed:
            print(f"  readers changed (nothing else): {_listed(report.readers_changed_doc_ids)}")
        cached = f" ({report.from_cache} from the extraction cache)" if report.from_cache else ""
        print(f"  extracted {report.extracted}, already extracted {report.already_extracted}{cached}, "
              f"failed {report.failed}")
        print(f"  model calls {report.model_calls} (retries {report.retries}), tokens in/out "
              f"{report.tokens_in}/{report.tokens_out}, cost ${report.cost_usd:.4f}")
        if report.model_calls and getattr(extractor, "run_id", None):
            print(f"  cost ledger run {extractor.run_id} (see: lightfoot cost --run {extractor.run_id})")
        for key, count in sorted(report.validation.items()):
            print(f"  record {key}: {count}")
        for reason, count in sorted(report.ignored_records.items()):
            print(f"  ignored {count} recorded extractions: {reason}")
        for chunk_id, reason in report.failures[:10]:
            print(f"  failed {chunk_id}: {reason}")
        g = report.graph
        print(f"  names +{g.names_added} -{g.names_removed} ~{g.names_changed}; "
              f"entities {g.entities_before} -> {g.entities_after}; synonym edges {g.synonym_edges_after}; "
              f"facts {g.facts_after}")
        print(f"  store commit {report.seq} in {report.seconds:.1f}s")
        print_batch(batch)
    if getattr(extractor, "mode", None) == "provider":
        awaiting = sum(1 for _, reason in report.failures if reason.startswith("awaiting extraction"))
        if not args.json:
            print(f"  {awaiting} passages await a provider batch: `lightfoot extract-batches collect` takes the "
                  "answers once it ends (within 24 h)")
        return 1 if report.failed > awaiting else 0
    return 1 if report.failed else 0


def _refuse_a_failed_endpoint(extractor, report, store) -> None:
    """An ingest whose model endpoint failed as a whole (unreachable, refusing the key, not knowing
    the model) is an error, not a report of failed passages; the documents are stored all the same."""
    from lightfoot_pipeline.ingest.extraction.openai_extractor import OpenAIExtractor

    cause = extractor.endpoint_error if isinstance(extractor, OpenAIExtractor) else None
    if cause is not None:
        raise LightfootError(
            f"ingest into {store.uri}: the model endpoint failed ({cause}); {report.failed} of {report.passages} "
            "passages are stored without extraction, and the next ingest asks for them", hint=cause.hint,
        ) from cause


def cmd_delete(args) -> int:
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.ingest.doc_ids import doc_id_problem

    problems = [p for p in map(doc_id_problem, args.doc_ids) if p]
    if problems:
        raise SettingsError("delete: " + "; ".join(problems), hint="no document can have such an id")
    from lightfoot_pipeline.service.queries import resolve_embedder
    from lightfoot_pipeline.store.batches import writing_batch

    store = existing_store(args)
    batch = command_batch("delete")
    with writing_batch(batch):
        report = operations.delete(store, args.doc_ids, erase=args.erase,
                                   reason=args.reason or "requested on the command line",
                                   snapshot_checks=publishing_checks(lambda: resolve_embedder(store)))
    if args.json:
        print_json({**report.as_dict(), "batch": batch_report(batch)})
        return 0
    print(f"deleted {len(report.deleted)} documents ({report.passages_removed} passages) in {report.seconds:.2f}s, "
          f"0 model calls")
    earlier = set(report.already_deleted)
    never = [d for d in report.not_found if d not in earlier]
    if report.already_deleted:
        print(f"  deleted before: {_listed(report.already_deleted)}"
              + ("; their history is erased now" if report.erase else ""))
    if never:
        print(f"  not in the store, nothing to delete: {_listed(never)}")
    g = report.graph
    print(f"  names removed {g.names_removed}, changed {g.names_changed}; entities recomputed "
          f"{g.entities_recomputed}; entities {g.entities_before} -> {g.entities_after}")
    if report.deleted:
        from lightfoot_pipeline.settings.environment import DEFAULT_POLL_S

        print(f"  served: a running service stops serving it at its next poll of the store log (every "
              f"{DEFAULT_POLL_S:g} s by default, `lightfoot serve --poll`) to every principal, with no export")
    if report.erase:
        _print_erase(report.erase)
    print_batch(batch)
    return 0


def _print_erase(erase: dict) -> None:
    print(f"  erased: {erase['cache_entries_purged']} cache entries, "
          f"{sum(erase['vectors_purged'].values())} vectors, {erase['snapshots_removed']} snapshots, "
          f"{sum(erase['files_vacuumed'].values())} files vacuumed")


def publishing_checks(embedder, *, permissions: bool = True, rebuild: str | None = None) -> list:
    """The checks every command-line export runs on its staged snapshot before publishing it
    (``snapshot``, and the replacement export of ``delete --erase``, ``vacuum`` and ``demo``): the
    permission audit of its reader views (passes at once when every document is public), unless
    turned off, when its verdict records it as skipped; and with ``rebuild`` (``full``, ``changed``
    or ``auto``: operations/checks.py's modes), the exactness check of the store against a fresh
    build. ``embedder()`` gives the model, loaded only when a check needs it."""
    from lightfoot_pipeline.evaluation.permission_audit import PERMISSION_CHECK, permission_check
    from lightfoot_pipeline.operations.checks import rebuild_check
    from lightfoot_pipeline.settings import IndexSettings
    from lightfoot_pipeline.snapshot.verdict import CheckVerdict

    def skipped(store, staged) -> CheckVerdict:
        return CheckVerdict(PERMISSION_CHECK, passed=False, skipped="turned off (--no-permission-check)",
                            metadata={"snapshot_id": staged.snapshot_id})

    checks = [permission_check(embedder, IndexSettings()) if permissions else skipped]
    if rebuild:
        checks.append(rebuild_check(embedder, IndexSettings(), mode=rebuild))
    return checks


def print_unpublished(report) -> None:
    """Why a staged snapshot was not published, and what services serve meanwhile."""
    served = report.served
    print(f"staged snapshot {report.info.snapshot_id} not published: {report.reason}", file=sys.stderr)
    print(f"  services keep serving {served.snapshot_id if served else 'no snapshot'}; `lightfoot status` says "
          "why until a snapshot is published", file=sys.stderr)


def cmd_vacuum(args) -> int:
    from lightfoot_pipeline.operations.compaction import compact
    from lightfoot_pipeline.operations.erase import vacuum
    from lightfoot_pipeline.service.queries import resolve_embedder
    from lightfoot_pipeline.store.batches import writing_batch

    store = existing_store(args)
    batch = command_batch("vacuum")  # it commits when it finishes erasures owed
    with writing_batch(batch):
        compacted = compact(store) if args.compact else {}
        report = vacuum(store, snapshot_checks=publishing_checks(lambda: resolve_embedder(store)))
    if args.json:
        print_json({**report.as_dict(), "buckets_compacted": compacted, "batch": batch_report(batch)})
        return 0
    if args.compact:
        print(f"compacted {sum(compacted.values())} buckets of {len(compacted)} tables into one file each")
    print(f"vacuumed {store.uri}: what no live row uses is gone from history, caches and snapshots")
    _print_erase(report.as_dict())
    print_batch(batch)
    return 0


def cmd_migrate(args) -> int:
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.models.embedder import load_embedder
    from lightfoot_pipeline.store.batches import writing_batch

    if args.batch is not None and (not args.pieces or args.batch < 0):
        raise SettingsError(f"--batch must be 0 or more documents, with --pieces; got {args.batch}"
                            + ("" if args.pieces else " without --pieces"))
    store = existing_store(args)
    batch = command_batch("migrate")
    config = store.manifest().config
    if args.embedder is not None:
        embedder = load_embedder(args.embedder)
    else:  # every live name has a cached vector: the model itself is not needed
        from lightfoot_pipeline.store.vectors import UnloadedEmbedder

        embedder = UnloadedEmbedder(config["embedder"], config["dim"])
    with writing_batch(batch):
        if args.pieces:  # the links in pieces, as the relink_job computes them
            from lightfoot_pipeline.operations import relink

            change = relink.relink(store, embedder, IndexSettings(), n_buckets=args.buckets, batch=args.batch)
        else:
            change = operations.migrate(store, embedder, IndexSettings(), args.buckets)
    manifest = store.manifest()
    payload = {"store": store.uri, "commit": manifest.seq, "layout": manifest.details.get("layout"),
               "graph": change.as_dict(), "batch": batch_report(batch)}
    if args.json:
        print_json(payload)
        return 0
    print(f"migrated {store.uri} to layout {payload['layout']['version']} with {payload['layout']['n_buckets']} "
          f"buckets (commit {manifest.seq}): {change.names_added} names, {change.entities_after} entities")
    print_batch(batch)
    return 0


def cmd_status(args) -> int:
    import polars as pl

    from lightfoot_pipeline.index.documents import EXCLUDED
    from lightfoot_pipeline.operations.erase import pending_erasures
    from lightfoot_pipeline.operations.sync import unextracted_passages
    from lightfoot_pipeline.store.documents import live_doc_ids
    from lightfoot_pipeline.store.fingerprint import fingerprint
    from lightfoot_pipeline.store.tables import SOURCE_FILES

    store = _store(args)
    manifest = store.manifest()
    if manifest.seq == 0:
        from lightfoot_pipeline.store.store import StoreError

        raise StoreError(f"no store at {store.uri}",
                         hint="name the store with --store (or LIGHTFOOT_STORE), or build one with `lightfoot ingest`")
    fp = fingerprint(store, manifest)
    unextracted = unextracted_passages(store, live_doc_ids(store, manifest))
    payload = {
        "store": store.uri,
        "commit": manifest.seq,
        "operation": manifest.operation,
        "committed_at": manifest.committed_at,
        "config": manifest.config,
        "fingerprint": fp.digest,
        "counts": fp.counts(),
        # Erasures asked for whose history is not erased yet: the next sync, delete --erase,
        # vacuum or erasures run finishes them.
        "pending_erasures": pending_erasures(store),
        "excluded_files": store.read(SOURCE_FILES.name, manifest, columns=["doc_id", "source", "status", "reason"])
        .filter(pl.col("status") == EXCLUDED).select("doc_id", "source", "reason").sort("doc_id").to_dicts(),
        # Passages stored without an extraction (the endpoint failed or its answer was unusable),
        # by document: the next sync of their source, or ingest of their documents, asks again.
        "unextracted_passages": sum(unextracted.values()),
        "unextracted_documents": [{"doc_id": d, "passages": unextracted[d]} for d in sorted(unextracted)],
        "snapshot": _published(store, manifest),
        # Extraction batches (operations/batch_extraction.py): the open ones, the passages they hold
        # awaiting extraction, and the batches whose files at the provider still hold text (an
        # erasure of their documents stays pending until those files are deleted).
        "extraction_batches": _extraction_batches(store),
    }
    if args.json:
        print_json(payload)
    else:
        print(f"store {store.uri}: commit {manifest.seq} ({manifest.operation}, {manifest.committed_at})")
        print(f"  embedder {manifest.config.get('embedder')}; fingerprint {fp.digest[:16]}")
        for name, rows in fp.counts().items():
            print(f"  {name:<14} {rows:>9,}")
        if payload["pending_erasures"]:
            print(f"  erasures pending (the next sync, delete or vacuum finishes them): "
                  f"{_listed(payload['pending_erasures'])}")
        for f in payload["excluded_files"][:20]:
            print(f"  excluded from {f['source']}: {f['doc_id']} ({f['reason']}; `lightfoot sync --readmit` brings it back)")
        if unextracted:
            print(f"  {payload['unextracted_passages']:,} passages of {len(unextracted):,} documents are stored without "
                  "extraction: the next sync of their source (or ingest of their documents) asks for them")
            for d in payload["unextracted_documents"][:20]:
                print(f"    {d['doc_id']}: {d['passages']:,} passages")
        batches = payload["extraction_batches"]
        if batches["open"]:
            print(f"  {batches['awaiting_passages']:,} passages await extraction in {len(batches['open'])} open "
                  "batches (`lightfoot extract-batches status`)")
        for held in batches["provider_files"]:
            print(f"  provider files still hold text: batch {held['batch']} ({', '.join(held['files']) or 'its upload'})")
        _print_published(payload["snapshot"])
    return 0


def _extraction_batches(store) -> dict:
    from lightfoot_pipeline.operations.batch_extraction import batch_status

    status = batch_status(store)
    return {k: status[k] for k in ("open", "awaiting_passages", "awaiting_documents", "provider_files")}


def _published(store, manifest) -> dict:
    """The published snapshot's id and commit, and how many commits the store is ahead of it."""
    from lightfoot_pipeline.snapshot.format import SnapshotError, latest_snapshot
    from lightfoot_pipeline.snapshot.verdict import unpublished_snapshot

    try:
        published = latest_snapshot(store)
        left = unpublished_snapshot(store)
    except SnapshotError as err:
        return {"snapshot_id": None, "store_seq": None, "commits_behind": None, "error": str(err), "unpublished": None}
    # The newest snapshot staged since the published one and kept from it by its checks: ids, reasons, counts.
    unpublished = None if left is None else {
        "snapshot_id": left.snapshot_id, "reason": left.reason,
        "checks": [{"name": c.name, "passed": c.passed, "reason": c.reason, "skipped": c.skipped} for c in left.checks]}
    if published is None:
        return {"snapshot_id": None, "store_seq": None, "commits_behind": None, "error": None,
                "unpublished": unpublished}
    return {"snapshot_id": published.snapshot_id, "store_seq": published.store_seq,
            "commits_behind": manifest.seq - published.store_seq, "error": None, "unpublished": unpublished}


def _print_published(snapshot: dict) -> None:
    from lightfoot_pipeline.settings.environment import DEFAULT_POLL_S

    if snapshot["snapshot_id"] is None:
        print(f"  no snapshot published{': ' + snapshot['error'] if snapshot['error'] else ''} "
              "(`lightfoot snapshot` exports one)")
    elif snapshot["commits_behind"]:
        print(f"  snapshot {snapshot['snapshot_id']} is of commit {snapshot['store_seq']}, "
              f"{snapshot['commits_behind']} behind: a running service serves the deletions and narrowed readers "
              f"among them already (its poll of the store log, every {DEFAULT_POLL_S:g} s by default); wider readers "
              "and new documents wait for the next export (`lightfoot snapshot`, or Dagster's)")
    else:
        print(f"  snapshot {snapshot['snapshot_id']} is of the latest commit")
    if snapshot.get("unpublished"):
        left = snapshot["unpublished"]
        print(f"  staged snapshot {left['snapshot_id']} not published: {left['reason']}")


def cmd_cost(args) -> int:
    from lightfoot_pipeline.store import ledger

    store = _store(args)
    payload = {"store": store.uri, "totals": ledger.totals(store, args.run)}
    if args.run is None:
        payload["runs"] = ledger.by_run(store)
    if args.by_document:
        payload["documents"] = ledger.by_document(store, args.run)
    if args.json:
        print_json(payload)
        return 0
    t = payload["totals"]
    scope = f"run {args.run}" if args.run else f"{t['runs']} runs"
    print(f"model calls in {store.uri} ({scope}): {t['calls']} calls (retries {t['retries']}, requests "
          f"{t['attempts']}, failed {t['failed_calls']}), tokens in/out {t['tokens_in']:,}/{t['tokens_out']:,}, "
          f"cost ${t['cost_usd']:.4f}")
    if t["unpriced_calls"]:
        print(f"  {t['unpriced_calls']} calls to models with no known price (set LIGHTFOOT_LLM_PRICE_IN/_OUT)")
    if t["estimated_usage_calls"]:
        print(f"  {t['estimated_usage_calls']} calls without reported usage: their tokens are estimated")
    for run in payload.get("runs", []):
        print(f"  {run['run_id']}  {run['started_at']:%Y-%m-%d %H:%M}  {run['models']}  {run['calls']} calls "
              f"(retries {run['retries']}), {run['tokens_in']:,}/{run['tokens_out']:,} tokens, ${run['cost_usd']:.4f}")
    for doc in payload.get("documents", []):
        print(f"  {doc['doc_id']}  {doc['calls']} calls (retries {doc['retries']}), "
              f"{doc['tokens_in']:,}/{doc['tokens_out']:,} tokens, ${doc['cost_usd']:.6f}")
    return 0


def add_store_commands(sub, common: argparse.ArgumentParser) -> None:
    """The ingest, delete, vacuum, migrate, status and cost subcommands."""
    p = sub.add_parser("ingest", parents=[common], help="add a dataset's documents to the store")
    p.add_argument("--dataset", required=True, help="directory with corpus.jsonl (and extractions.jsonl)")
    p.add_argument("--extractor", choices=["replay", "openai", "openai-batch"], default=None,
                   help="replay recorded extractions (default when the dataset has them), call a model, or submit "
                        "the passages to the provider's Batch API at its batch price (`lightfoot extract-batches "
                        "collect` takes the answers)")
    p.add_argument("--embedder", default=None, help="embedding model name or path, or hashing[:DIM]")
    p.add_argument("--buckets", type=int, default=None,
                   help="hash buckets of a new store's tables (default 16; an existing store keeps its own)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("delete", parents=[common], help="delete documents (no model call)")
    p.add_argument("doc_ids", nargs="+", metavar="DOC_ID")
    p.add_argument("--erase", action="store_true", help="also remove their text from history and caches")
    p.add_argument("--reason", default=None, help="why (recorded in the deletion log)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("vacuum", parents=[common],
                       help="remove from history, caches and snapshots what no live row uses (replaced text)")
    p.add_argument("--compact", action="store_true",
                   help="first rewrite every bucket made of several data files as one (rows unchanged), so that "
                        "lookups open one file a bucket; the files it replaces are then vacuumed")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_vacuum)

    p = sub.add_parser("migrate", parents=[common],
                       help="rewrite a store of an earlier version in this version's layout (no model call)")
    p.add_argument("--buckets", type=int, default=None, help="hash buckets of every table (default: the store's)")
    p.add_argument("--embedder", default=None,
                   help="embedder for names without a cached vector (default: none, every name has one)")
    p.add_argument("--pieces", action="store_true",
                   help="compute the links in pieces by type and band range, as the relink_job does "
                        "(a store of this layout; LIGHTFOOT_LINK_PIECE_SIZE names x bands a step)")
    p.add_argument("--batch", type=int, default=None, metavar="DOCS",
                   help="with --pieces: derive the graph this many documents a commit in a store of its own, "
                        "then copy it in, so memory follows the batch (default LIGHTFOOT_RELINK_BATCH, 50000; "
                        "0: one transaction)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("status", parents=[common], help="table counts, fingerprint and config of the store")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("cost", parents=[common], help="model calls, tokens and cost, per run and per document")
    p.add_argument("--run", default=None, metavar="RUN_ID", help="only this run")
    p.add_argument("--by-document", action="store_true", help="also list the cost of each document")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cost)
