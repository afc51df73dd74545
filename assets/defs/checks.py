"""Asset checks that guard the index's invariants; each is blocking, so a failure stops the
serving snapshot from being exported.

- every passage of a batch's documents is accounted for: extracted, or failed with its reason;
- no reference dangles: nothing points at a deleted document, passage, name or entity;
- the store equals a fresh rebuild of its live documents (after every ingestion and deletion;
  configurable, since it costs a rebuild).

The permission check of the serving snapshot (``views_match_fresh_stores``) is the asset's own: it
runs on the staged snapshot before publishing it (serving.py).

Each runs in every job that can change its answer: the ingestion and sync jobs run all of them,
the deletion job those of the graph (a deletion removes passages with their extractions, so it
cannot leave one unaccounted for, and another batch's unfinished extraction is no failure of a
deletion run). Every message names documents, never passages.
"""



import dagster as dg
from pydantic import Field

from assets.keys import (
    DELETION_JOB,
    ENTITIES,
    EXTRACTIONS,
    FACTS,
    GRAPH_ASSETS,
    INGESTION_JOB,
    NAME_LINKS,
    NAME_VECTORS,
    REBUILD_CHECK,
    SYNC_JOB,
    SYNONYM_EDGES,
)
from assets.partitions import PARTITION_TAG
from assets.provenance import report_metadata
from assets.resources import EmbedderResource, StoreResource
from lightfoot_pipeline.operations.batches import batch_doc_ids
from lightfoot_pipeline.operations.checks import (
    account_for_passages,
    compare_with_rebuild,
    dangling_references,
    live_documents,
    rebuild_skip_reason,
)
from lightfoot_pipeline.store.store import Store


@dg.asset_check(asset=EXTRACTIONS, blocking=True)
def passages_accounted_for(context: dg.AssetCheckExecutionContext, store: StoreResource) -> dg.AssetCheckResult:
    """Every live passage of the batch's documents (of every document, when run without a batch)
    has one extraction: a record, or a failure that says why (operations/checks.py:
    ``account_for_passages``). Other batches' documents may be between their passages and their
    extractions, since runs extract in parallel: those of runs mid-way are set aside."""
    lightfoot = store.open()
    batch = _partition(context)
    if batch is not None:
        account = account_for_passages(lightfoot, batch_doc_ids(lightfoot, batch))
    else:
        own = own_run_id(context)
        theirs = set() if own is None else documents_of(context.instance, lightfoot, runs_mid_way(context.instance, own))
        account = account_for_passages(lightfoot, None, set_aside=theirs)
    return dg.AssetCheckResult(
        passed=account.passed, description=account.describe(),
        metadata={
            "batch": batch or "",
            **report_metadata(account, ["passages", "extracted", "failed", "missing", "set_aside",
                                        "failed_without_reason", "failure_reasons", "store_commit"],
                              names={"set_aside": "mid_way_passages"}),
            "documents_missing_extractions": dg.MetadataValue.json(account.problems["without an extraction"][:20]),
        },
    )


def _partition(context: dg.AssetCheckExecutionContext) -> str | None:
    """The batch a check runs for: its run's partition (None when invoked outside a run, or in a run
    of none)."""
    run_id = own_run_id(context)
    if run_id is None:
        return None
    return context.run.tags.get(PARTITION_TAG)


@dg.asset_check(asset=ENTITIES, blocking=True)
def no_dangling_references(store: StoreResource) -> dg.AssetCheckResult:
    """Nothing in the index points at a deleted document, passage, name or entity, and every live
    name belongs to an entity."""
    counts = dangling_references(store.open())
    bad = {k: v for k, v in counts.items() if v}
    return dg.AssetCheckResult(
        passed=not bad,
        description=None if not bad else "dangling: " + ", ".join(f"{k} ({v})" for k, v in bad.items()),
        metadata={"dangling": dg.MetadataValue.json(counts), "total": sum(counts.values())},
    )


# What the ingestion job compares by default: a rebuild costs a full build, which is seconds at this
# size (docs/deployment.md, "What each stage costs"); the deletion job always compares.
INGESTION_REBUILD_LIMIT = 20_000


class RebuildCheckConfig(dg.Config):
    enabled: bool = Field(default=True, description="Rebuild and compare (off: the check warns that it did not).")
    reuse_vector_cache: bool = Field(
        default=True, description="Seed the rebuild's name-vector cache from the store's (vectors depend on "
        "model and name only); off: embed every name again.",
    )
    ingestion_limit: int | None = Field(
        default=INGESTION_REBUILD_LIMIT, description="In the ingestion job, compare only while the store holds at "
        "most this many live documents (larger: the check warns that it did not compare, and says why); none: "
        "always compare. The deletion job always compares.",
    )


# The jobs whose runs commit to the store in several steps, the graph step last.
GRAPH_WRITING_JOBS = (INGESTION_JOB, DELETION_JOB, SYNC_JOB)
GRAPH_STEP = "reconcile_graph"  # the step of the graph multi-asset (assets/defs/graph.py)
IN_PROGRESS = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def runs_mid_way(instance: dg.DagsterInstance, own_run_id: str) -> list[str]:
    """Other runs in progress whose graph step has not succeeded: their documents, extractions,
    forms or tombstones may be in the store while the graph does not reflect them yet, so that the
    store equals no fresh rebuild until their graph step has run (their own check compares then)."""
    mid_way = []
    for job in GRAPH_WRITING_JOBS:
        for record in instance.get_run_records(dg.RunsFilter(job_name=job, statuses=IN_PROGRESS)):
            run_id = record.dagster_run.run_id
            if run_id == own_run_id:
                continue
            done = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS).records
            if not any(r.event_log_entry.step_key == GRAPH_STEP for r in done):
                mid_way.append(run_id)
    return mid_way


def own_run_id(context: dg.AssetCheckExecutionContext) -> str | None:
    """The run a check executes in; None when it is invoked directly, outside any run."""
    try:
        return context.run.run_id
    except dg.DagsterError:
        return None


def documents_of(instance: dg.DagsterInstance, store: Store, run_ids: list[str]) -> set[str]:
    """The documents of the batches that runs ingest (their partitions)."""
    documents: set[str] = set()
    for run_id in run_ids:
        run = instance.get_run_by_id(run_id)
        batch = run.tags.get(PARTITION_TAG) if run is not None else None
        if batch:
            documents.update(batch_doc_ids(store, batch))
    return documents


# The tables whose digests each graph asset's check compares.
REBUILD_TABLES: dict[dg.AssetKey, list[str]] = {
    NAME_VECTORS: ["name_vectors"],
    NAME_LINKS: ["name_links"],
    ENTITIES: ["entities", "aliases", "mentions", "forms"],
    SYNONYM_EDGES: ["synonym_edges"],
    FACTS: ["facts", "fact_sources"],
}


@dg.multi_asset_check(
    specs=[
        dg.AssetCheckSpec(
            REBUILD_CHECK, asset=key, blocking=True,
            description="The table equals the same table of a fresh index built from the store's live documents "
            "and extractions (no model call).",
        )
        for key in GRAPH_ASSETS
    ],
    can_subset=False,
)
def matches_fresh_rebuild(
    context: dg.AssetCheckExecutionContext, config: RebuildCheckConfig, store: StoreResource, embedder: EmbedderResource
):
    """After deletions the store must equal a fresh index of the survivors: rebuild one in a scratch
    store from the live documents and their stored extractions, and compare fingerprints."""
    source = store.open()
    enabled = config.enabled and store.compare_with_rebuild
    # A disabled comparison asks the instance nothing.
    mid_way = runs_mid_way(context.instance, context.run.run_id) if enabled else []
    seq = source.manifest().seq
    if enabled:  # and any that began since
        mid_way = sorted(set(mid_way) | set(runs_mid_way(context.instance, context.run.run_id)))
    live = live_documents(source)
    limit = config.ingestion_limit if context.run.job_name == INGESTION_JOB else None
    skipped = rebuild_skip_reason(configured=config.enabled, enabled=store.compare_with_rebuild, live=live,
                                  limit=limit, mid_way=mid_way)
    if skipped:
        for key in GRAPH_ASSETS:
            yield dg.AssetCheckResult(
                asset_key=key, check_name=REBUILD_CHECK, passed=False, severity=dg.AssetCheckSeverity.WARN,
                description=f"not compared: {skipped}",
                metadata={"live_documents": dg.MetadataValue.int(live), "store_commit": dg.MetadataValue.int(seq)},
            )
        return
    found = compare_with_rebuild(source, embedder.get(), store.settings(),
                                 reuse_vector_cache=config.reuse_vector_cache)
    differing = found.differing
    context.log.info(f"fresh rebuild in {found.seconds:.1f}s; fingerprints equal: "
                     f"{found.store_fingerprint == found.rebuild_fingerprint}")
    common = {
        "store_fingerprint": dg.MetadataValue.text(found.store_fingerprint),
        "rebuild_fingerprint": dg.MetadataValue.text(found.rebuild_fingerprint),
        "store_commit": dg.MetadataValue.int(found.store_commit),
        "differing_tables": dg.MetadataValue.json(differing),
        "rebuild_seconds": dg.MetadataValue.float(round(found.seconds, 3)),
    }
    for key, tables in REBUILD_TABLES.items():
        wrong = [t for t in tables if t in differing]
        yield dg.AssetCheckResult(
            asset_key=key, check_name=REBUILD_CHECK, passed=not wrong,
            description=None if not wrong else f"differs from a fresh rebuild in {', '.join(wrong)}",
            metadata={**common, "rows": dg.MetadataValue.json({t: found.rows[t] for t in tables if t in found.rows})},
        )
