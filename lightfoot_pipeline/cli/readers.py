"""``lightfoot readers``: change who may read documents of the store (no model call).

``lightfoot readers DOC_ID [DOC_ID ...] --groups G[,G]`` (or ``--public``, ``--nobody``) gives the
documents those readers in one store commit, its own ingestion batch (``cli-readers-…``, see
cli/store.py), and prints what changed. The work is ``operations.set_readers``.
"""

from __future__ import annotations

import argparse
import json
import sys

from lightfoot_pipeline.ingest.readers import PUBLIC


def cmd_readers(args) -> int:
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.cli.store import batch_report, command_batch, print_batch
    from lightfoot_pipeline.permissions.views import narrows
    from lightfoot_pipeline.settings.environment import DEFAULT_POLL_S
    from lightfoot_pipeline.store.batches import writing_batch
    from lightfoot_pipeline.store.store import Store, StoreError

    groups = PUBLIC if args.public else "" if args.nobody else args.groups
    store = Store(args.store)
    if not store.exists():
        raise StoreError(f"no store at {store.uri}",
                         hint="name the store with --store (or LIGHTFOOT_STORE), or build one with `lightfoot ingest`")
    batch = command_batch("readers")
    with writing_batch(batch):
        report = operations.set_readers(store, dict.fromkeys(args.doc_ids, groups),
                                        reason=args.reason or "set on the command line")
    if args.json:
        json.dump({**report.as_dict(), "batch": batch_report(batch)}, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    where = f"store commit {report.seq}" if report.seq else "nothing committed"
    print(f"readers of {len(report.changed)} documents changed, {len(report.unchanged)} unchanged ({where}), "
          "0 model calls")
    for doc_id, change in report.changed.items():
        print(f"  {doc_id}: {_shown(change['before'])} -> {_shown(change['after'])}")
    for doc_id, readers in report.unchanged.items():
        print(f"  {doc_id}: {_shown(readers)} already")
    narrowed = [d for d, change in report.changed.items() if narrows(tuple(change["before"]), tuple(change["after"]))]
    if narrowed:
        print(f"  served: a running service stops serving it at its next poll of the store log (every "
              f"{DEFAULT_POLL_S:g} s by default, `lightfoot serve --poll`) to whom the new readers leave out "
              f"({len(narrowed)} documents), with no export")
    if len(narrowed) < len(report.changed):
        print("  served: wider readers reach a running service with the next export (`lightfoot snapshot`, "
              "or Dagster's once its store-log sensor sees the commit)")
    print_batch(batch)
    return 0


def _shown(groups: list[str]) -> str:
    return ", ".join(groups) if groups else "nobody (the operator alone)"


def add_readers_command(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("readers", parents=[common], help="set who may read documents (no model call)")
    p.add_argument("doc_ids", nargs="+", metavar="DOC_ID")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--groups", metavar="G[,G]", help="the reader groups, comma-separated")
    who.add_argument("--public", action="store_true", help="everyone (the group public)")
    who.add_argument("--nobody", action="store_true", help="nobody but the operator")
    p.add_argument("--reason", default=None, help="why (recorded in the store commit)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_readers)
