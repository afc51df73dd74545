"""Asset checks that guard the index's invariants; each is blocking, so a failure stops the
serving snapshot from being exported.

- every passage of a batch's documents is accounted for: extracted, or failed with its reason;
- no reference dangles: nothing points at a deleted document, passage, name or entity;
- the store equals a fresh build of its live documents (after every ingestion and deletion): the
  whole store against a rebuild while that is cheap, above that the components and facts the run
  changed, derived again, and a sample of the rest, within a stated bound.

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
from assets.provenance import metadata_value, report_metadata
from assets.resources import EmbedderResource, StoreResource
from lightfoot_pipeline.operations.batches import batch_doc_ids
from lightfoot_pipeline.operations.checks import (
    EXACTNESS_MODES,
    FULL_REBUILD_LIMIT,
    ExactnessBounds,
    account_for_passages,
    check_exactness,
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


class RebuildCheckConfig(dg.Config):
    enabled: bool = Field(default=True, description="Check the store against a fresh build (off: the check warns "
                          "that it did not).")
    mode: str = Field(default="auto", description="'auto': the whole store against a rebuild up to full_limit live "
                      "documents, the changed components above; 'full': always the whole store (costs a build); "
                      "'changed': always the components and facts the run changed, and a sample of the rest.")
    full_limit: int | None = Field(
        default=FULL_REBUILD_LIMIT, description="In mode 'auto', rebuild the whole store while it holds at most "
        "this many live documents; none: always.",
    )
    changed_bound: int = Field(default=ExactnessBounds.changed, description="Changed components compared at most; "
                               "a run that changed more compares a deterministic sample of this many (and as many "
                               "times 2.5 facts).")
    untouched_sample: int = Field(default=ExactnessBounds.untouched, description="Components the run did not "
                                  "change compared too, a deterministic sample (twice as many facts).")
    reuse_vector_cache: bool = Field(
        default=True, description="Seed a whole-store rebuild's name-vector cache from the store's (vectors depend "
        "on model and name only); off: embed every name again.",
    )

    def bounds(self) -> ExactnessBounds:
        return ExactnessBounds(changed=self.changed_bound, changed_facts=self.changed_bound * 5 // 2,
                               untouched=self.untouched_sample, untouched_facts=2 * self.untouched_sample)


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


# The tables whose digests each graph asset's check compares (the changed-components way compares
# aliases, entities, mentions, synonym edges and facts; name vectors and links are compared whole only).
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
            "and extractions (no model call): the whole table while a rebuild is cheap, the rows of the "
            "components and facts the run changed (and a sample of the rest) above.",
        )
        for key in GRAPH_ASSETS
    ],
    can_subset=False,
)
def matches_fresh_rebuild(
    context: dg.AssetCheckExecutionContext, config: RebuildCheckConfig, store: StoreResource, embedder: EmbedderResource
):
    """The store must equal a fresh index of its live documents (operations/checks.py:
    ``check_exactness``): up to ``full_limit`` live documents a rebuild in a scratch store compared
    by fingerprints; above it the components and facts this run changed derived again and
    compared row for row, with a sample of the rest (operations/exactness.py)."""
    if config.mode not in EXACTNESS_MODES:
        raise dg.Failure(f"mode {config.mode!r}: expected one of {', '.join(EXACTNESS_MODES)}")
    source = store.open()
    enabled = config.enabled and store.compare_with_rebuild
    # A disabled comparison asks the instance nothing.
    mid_way = runs_mid_way(context.instance, context.run.run_id) if enabled else []
    seq = source.manifest().seq
    if enabled:  # and any that began since
        mid_way = sorted(set(mid_way) | set(runs_mid_way(context.instance, context.run.run_id)))
    skipped = rebuild_skip_reason(configured=config.enabled, enabled=store.compare_with_rebuild, mid_way=mid_way)
    if skipped:
        for key in GRAPH_ASSETS:
            yield dg.AssetCheckResult(
                asset_key=key, check_name=REBUILD_CHECK, passed=False, severity=dg.AssetCheckSeverity.WARN,
                description=f"not compared: {skipped}",
                metadata={"live_documents": dg.MetadataValue.int(live_documents(source)),
                          "store_commit": dg.MetadataValue.int(seq)},
            )
        return
    found = check_exactness(source, store.settings(), embedder.get, run_id=context.run.run_id, mode=config.mode,
                            full_limit=config.full_limit, bounds=config.bounds(),
                            reuse_vector_cache=config.reuse_vector_cache)
    differing = found.differing
    context.log.info(f"exactness check ({found.mode}) in {found.seconds:.1f}s: {found.describe()}")
    common = {name: metadata_value(value) for name, value in found.metadata().items()}
    for key, tables in REBUILD_TABLES.items():
        compared = [t for t in tables if t in found.compared_tables]
        wrong = [t for t in compared if t in differing]
        description = None if not wrong else f"differs from a fresh build in {', '.join(wrong)}: {found.describe()}"
        rows = found.full.rows if found.full is not None else found.changes.rows if found.changes else {}
        metadata = {**common, "rows": dg.MetadataValue.json({t: rows[t] for t in compared if t in rows})}
        if not compared:  # a check that compared nothing does not pass: it warns, and says what would compare it
            yield dg.AssetCheckResult(
                asset_key=key, check_name=REBUILD_CHECK, passed=False, severity=dg.AssetCheckSeverity.WARN,
                description=f"not compared: {', '.join(tables)} are compared by the whole-store check only (mode "
                "full, or auto up to full_limit live documents), and this run's was by its changes",
                metadata=metadata)
            continue
        yield dg.AssetCheckResult(asset_key=key, check_name=REBUILD_CHECK, passed=not wrong, description=description,
                                  metadata=metadata)

