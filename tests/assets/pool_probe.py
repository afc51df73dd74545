"""A small job for the tests of the instance's storages (test_pooled_sqlite.py, test_pooled_postgres.py):
two assets, the second logging 20 lines, so that a run writes some 40 events."""

from __future__ import annotations

import dagster as dg


@dg.asset
def one() -> int:
    return 1


@dg.asset(deps=[one])
def two(context) -> None:
    for i in range(20):
        context.log.info(f"line {i}")


DEFS = dg.Definitions(assets=[one, two], jobs=[dg.define_asset_job("pool_probe", selection=[one, two])])


def run_probe(instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """A run of the job on ``instance``, in process."""
    return DEFS.resolve_job_def("pool_probe").execute_in_process(instance=instance)
