"""The runs of a receipt: what the instance holds of the runs asked for one taken drop.

A run asked for a receipt (see lightfoot_pipeline/ingest/receipts.py) carries the receipt's id, under a
tag that names its kind, and the attempt number. The receipt is found again by that tag whatever
happened to the sensor's cursor or the daemon, and its state follows from those runs:

- **succeeded**: a run of its latest attempt (a run of its batch's partition) has succeeded;
- **in flight**: one is queued, starting, running or being canceled;
- otherwise it needs a run: attempt 0 when it has none (never asked, dropped, or the instance
  wiped), the next attempt after a failed or canceled one, the same attempt when its run was
  created but never launched (the daemon then launches that run, found by its run key).

Run keys come from the receipt id and the attempt, never from a counter, so no two receipts
share one and a retry never reuses a key that Dagster would drop as a duplicate.

A receipt whose runs keep failing backs off (lightfoot_pipeline/ingest/receipts.py:
``retry_delay_s``), each failed run left in the instance.
"""

from __future__ import annotations

import dagster as dg

from lightfoot_pipeline.ingest.receipts import ERASURE, INGESTION, Receipt, ReceiptRuns, retry_delay_s

ATTEMPT_TAG = "lightfoot/attempt"
RECEIPT_TAGS = {ERASURE: "lightfoot/erasure-request", INGESTION: "lightfoot/inbox-drop"}
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
# Also a run created and not yet launched: what a schedule or a poll waits for, where a receipt's
# sensor would ask again (its run key makes the daemon launch that run).
BUSY = [*IN_FLIGHT, dg.DagsterRunStatus.NOT_STARTED]


def runs_in_flight(instance: dg.DagsterInstance, jobs: list[str], statuses: list = IN_FLIGHT,
                   limit: int = 20) -> list[str]:
    """The ids of the runs of ``jobs`` in one of ``statuses`` (queued, starting, running or being
    canceled), each job's newest first."""
    return [r.dagster_run.run_id for job in jobs
            for r in instance.get_run_records(dg.RunsFilter(job_name=job, statuses=statuses), limit=limit)]


def receipt_tags(receipt: Receipt, attempt: int) -> dict[str, str]:
    return {RECEIPT_TAGS[receipt.kind]: receipt.receipt_id, ATTEMPT_TAG: str(attempt)}


def receipt_run_key(prefix: str, receipt: Receipt, attempt: int) -> str:
    return f"{prefix}-{receipt.receipt_id}-{attempt}"


def _attempt(run: dg.DagsterRun) -> int:
    try:
        return int(run.tags.get(ATTEMPT_TAG, "0"))
    except ValueError:
        return 0


def receipt_runs(instance: dg.DagsterInstance, receipt: Receipt) -> ReceiptRuns:
    """The runs tagged with this receipt, and what they make of it."""
    records = instance.get_run_records(dg.RunsFilter(tags={RECEIPT_TAGS[receipt.kind]: receipt.receipt_id}))
    runs = [r.dagster_run for r in records]
    if not runs:
        return ReceiptRuns()
    in_flight = sorted(r.run_id for r in runs if r.status in IN_FLIGHT)
    failed = sorted(r.run_id for r in runs if r.is_failure_or_canceled)
    latest = max(_attempt(r) for r in runs)
    current = [r for r in runs if _attempt(r) == latest]
    success = next((r for r in current if r.is_success), None)
    retry = success is None and any(r.is_failure_or_canceled for r in current)
    return ReceiptRuns(success.run_id if success else None, in_flight, failed, latest + 1 if retry else latest,
                       _retry_at(records) if retry else None, started=True)


def _retry_at(records: list) -> float | None:
    failed = [r for r in records if r.dagster_run.is_failure_or_canceled]
    ended = [r.end_time or r.update_timestamp.timestamp() for r in failed]
    attempts = len({_attempt(r.dagster_run) for r in failed})
    return max(ended) + retry_delay_s(attempts) if ended else None
