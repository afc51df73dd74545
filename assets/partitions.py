"""The ``documents`` partitions: one dynamic partition per document id.

A run over many documents is one run over a range of partition keys (a single-run backfill), not
one run per document. Keys added together are contiguous in the partition order, so a batch of new
documents is one range; :func:`key_ranges` splits any other set of keys into as few ranges as the
order allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import dagster as dg

from assets.keys import DOCUMENTS_GROUP
from assets.provenance import STORE_POOL
from lightfoot_pipeline.ingest.doc_ids import doc_id_problem

DOCUMENTS = dg.DynamicPartitionsDefinition(name="documents")
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
# What every per-document asset is (``@dg.asset(**PER_DOCUMENT, deps=…, kinds=…)``): one partition
# per document, a range of them in one run, in the documents group, writing through the store pool.
PER_DOCUMENT = {
    "partitions_def": DOCUMENTS,
    "backfill_policy": dg.BackfillPolicy.single_run(),
    "group_name": DOCUMENTS_GROUP,
    "pool": STORE_POOL,
}


def invalid_key_reason(doc_id: str) -> str | None:
    """Why a document id cannot be a partition key, or None when it can: the engine's one rule for
    doc ids (lightfoot_pipeline.ingest.doc_ids), which refuses all that Dagster refuses in a key."""
    return doc_id_problem(doc_id)


def key_ranges(ordered_keys: Sequence[str], wanted: Iterable[str]) -> list[tuple[str, str]]:
    """The fewest (first, last) ranges of ``ordered_keys`` that cover exactly the ``wanted`` keys."""
    position = {key: i for i, key in enumerate(ordered_keys)}
    indices = sorted(position[k] for k in set(wanted))
    ranges: list[tuple[str, str]] = []
    for index in indices:
        if ranges and position[ranges[-1][1]] == index - 1:
            ranges[-1] = (ranges[-1][0], ordered_keys[index])
        else:
            ranges.append((ordered_keys[index], ordered_keys[index]))
    return ranges


def range_tags(first: str, last: str) -> dict[str, str]:
    return {RANGE_START_TAG: first, RANGE_END_TAG: last}
