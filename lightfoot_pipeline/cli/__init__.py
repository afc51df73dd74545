"""The ``lightfoot`` command line.

Every command takes ``--store URI`` (default ``$LIGHTFOOT_STORE``, else ``.lightfoot/store``).
Each command's work lives in the engine; the modules of this package parse a family of commands'
arguments and print their results, and this one assembles the parser and runs the command.
A :class:`~lightfoot_pipeline.errors.LightfootError` from any command is caught in :func:`main`
alone and printed as one line (what failed, why, what to do) with exit code 2; any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys

from lightfoot_pipeline.cli.demo import add_demo_command
from lightfoot_pipeline.cli.evaluation import add_audit_command, add_eval_commands
from lightfoot_pipeline.cli.explain import add_explain_commands
from lightfoot_pipeline.cli.extract_batches import add_extract_batches_command
from lightfoot_pipeline.cli.query import add_query_commands
from lightfoot_pipeline.cli.readers import add_readers_command
from lightfoot_pipeline.cli.store import add_store_commands
from lightfoot_pipeline.cli.sync import add_sync_command
from lightfoot_pipeline.errors import LightfootError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", default=argparse.SUPPRESS, help="store root: a path or s3://bucket/prefix "
                        "(default: $LIGHTFOOT_STORE, else .lightfoot/store)")
    parser = argparse.ArgumentParser(prog="lightfoot", description=__doc__.splitlines()[0], parents=[common])
    sub = parser.add_subparsers(dest="command", required=True)

    add_demo_command(sub, common)
    add_store_commands(sub, common)  # ingest, delete, vacuum, migrate, status, cost
    add_audit_command(sub, common)  # audit-deletion, audit-permissions
    add_sync_command(sub, common)
    add_extract_batches_command(sub, common)  # extract-batches status, collect, cancel, export, import
    add_readers_command(sub, common)
    add_query_commands(sub, common)  # snapshot, query, serve, serve-token
    add_eval_commands(sub, common)  # eval, eval-deletion, report, compare
    add_explain_commands(sub, common)  # explain doc, entity, fact, batch, query
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not hasattr(args, "store"):
        args.store = None
    try:
        return int(args.func(args) or 0)
    except LightfootError as err:  # a user's mistake or a system out of reach; a bug keeps its traceback
        print(f"error: {err.line()}", file=sys.stderr)
        return 2
