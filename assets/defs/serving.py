"""Serving: the snapshot that retrieval loads (CSR graph, node tables, passage and fact vectors).

Exported only when every blocking check upstream passed: in a run, a failed blocking check skips
it; under automation, it waits for the checks to pass. It depends on the store log too
(store_log.py), so a commit it does not reflect, made by any path, makes it stale.

Check, then publish: the asset stages the snapshot, runs its own blocking check on the staged copy
(``views_match_fresh_stores``, the permission audit) and publishes it only when the check passes,
through the operation ``lightfoot snapshot`` runs (snapshot/export.py: ``publish_checked``). A
snapshot that fails stays unpublished with its reason: the check fails with it, the
materialization says ``published: false`` and names the snapshot services keep serving, and
``lightfoot status`` says why. The comparison with a fresh rebuild runs before the export, as the
graph assets' blocking check ``matches_fresh_rebuild`` (checks.py), so it is not repeated here.
"""

from pathlib import Path

import dagster as dg
from pydantic import Field

from assets.batches import dagster_batch
from assets.code_versions import code_version
from assets.keys import EXTRACTION_BATCHES, GRAPH_ASSETS, OWNERS, SERVING_GROUP, STORE_LOG
from assets.provenance import STORE_POOL, metadata_value
from assets.resources import EmbedderResource, StoreResource
from lightfoot_pipeline.evaluation.permission_audit import PERMISSION_CHECK, permission_check
from lightfoot_pipeline.progress import LOG_EVERY, StepProgress
from lightfoot_pipeline.snapshot.export import DEFAULT_KEEP, PublishReport, publish_checked
from lightfoot_pipeline.snapshot.verdict import CheckVerdict

# What the permission check audits by default: a principal's fresh store costs a build of its
# documents, which is seconds at this size (docs/deployment.md, "What each stage costs").
AUDIT_DOCUMENT_LIMIT = 20_000


class ServingConfig(dg.Config):
    """The permission check the staged snapshot must pass before it is published."""

    audit_views: bool = Field(default=True, description="Audit the staged snapshot's views before publishing "
                              "(off: the check warns that it did not, and the snapshot is published).")
    groups_file: str | None = Field(
        default=None, description='A groups file (one {"principal": NAME, "groups": [...]} a line, as for '
        "lightfoot audit-permissions) whose first principals are audited; none: principals derived from the "
        "reader groups present (public only, then each group alone, those that read the most documents first).",
    )
    principals: int = Field(default=3, ge=1, le=16, description="Principals audited at most (each costs a build).")
    questions: int = Field(default=5, ge=1, le=100, description="Questions compared per principal, drawn from the "
                           "snapshot's passages with a fixed seed.")
    document_limit: int | None = Field(
        default=AUDIT_DOCUMENT_LIMIT, description="Audit only while the snapshot holds at most this many "
        "documents (larger: the check warns that it did not, and says why); none: always audit.",
    )


def check_result(report: PublishReport) -> dg.AssetCheckResult:
    """The staged snapshot's permission check as Dagster shows it: passed, not audited (a warning),
    or failed with the reason that kept the snapshot unpublished."""
    checks = report.verdict.checks if report.verdict is not None else []
    found = next((c for c in checks if c.name == PERMISSION_CHECK), None)
    if found is None and report.kept:  # published by an export that checks nothing, or before verdicts were kept
        return dg.AssetCheckResult(
            check_name=PERMISSION_CHECK, passed=False, severity=dg.AssetCheckSeverity.WARN,
            description=f"not audited: snapshot {report.info.snapshot_id} already holds the store's state and was "
            "published without this check", metadata={"snapshot_id": dg.MetadataValue.text(report.info.snapshot_id),
                                                      "published": dg.MetadataValue.bool(True)})
    if found is None:
        found = CheckVerdict(PERMISSION_CHECK, passed=False, reason="the check did not run")
    metadata = {key: metadata_value(value) for key, value in found.metadata.items()}
    metadata["published"] = dg.MetadataValue.bool(report.published)
    if report.kept:  # what the published snapshot's check found when it was staged
        metadata["checked_when_published"] = dg.MetadataValue.bool(True)
    if found.skipped is not None:
        return dg.AssetCheckResult(check_name=PERMISSION_CHECK, passed=False, severity=dg.AssetCheckSeverity.WARN,
                                   description=f"not audited: {found.skipped}", metadata=metadata)
    if found.passed and not report.published:  # passed, yet another snapshot was published first
        return dg.AssetCheckResult(check_name=PERMISSION_CHECK, passed=True,
                                   description=f"passed; not published: {report.reason}", metadata=metadata)
    return dg.AssetCheckResult(
        check_name=PERMISSION_CHECK, passed=found.passed, metadata=metadata,
        description=None if found.passed else f"staged snapshot {report.info.snapshot_id} not published: "
        f"{found.reason}")


@dg.asset(
    # extraction_batches: so that a collection's run exports after it; automation ignores it (a
    # store that never uses the Batch API never materializes it, and would count it missing).
    deps=[*GRAPH_ASSETS, STORE_LOG, EXTRACTION_BATCHES],
    group_name=SERVING_GROUP,
    kinds={"numpy", "parquet"},
    pool=STORE_POOL,
    owners=OWNERS,
    code_version=code_version(__name__, "serving_snapshot"),
    automation_condition=(dg.AutomationCondition.eager() & dg.AutomationCondition.all_deps_blocking_checks_passed())
    .ignore(dg.AssetSelection.assets(EXTRACTION_BATCHES)),
    check_specs=[dg.AssetCheckSpec(
        PERMISSION_CHECK, asset="serving_snapshot", blocking=True,
        description="Each sampled principal's view of the staged snapshot retrieves exactly what a fresh store of "
        "its readable documents alone does: top-10 passages, scores, seed facts and explanations on a few "
        "questions (evaluation/permission_audit.py; the fresh stores are rebuilt from the store's own "
        "extractions, no model call). It runs before the snapshot is published: a failure keeps it unpublished.",
    )],
)
def serving_snapshot(
    context: dg.AssetExecutionContext, config: ServingConfig, store: StoreResource, embedder: EmbedderResource
) -> dg.MaterializeResult:
    """The store's committed state exported for retrieval: staged, checked, and published atomically
    when its permission check passes; the newest snapshots are kept and older ones pruned. An
    unchanged store keeps its current snapshot. Stages longer than a few seconds (embedding,
    indexing, writing, checking) log their progress.

    ``snapshot_id`` is the snapshot services load after this run: the staged one when it was
    published, else the one published before (``staged_snapshot_id`` and ``not_published`` say
    which was kept back, and why). ``store_commit`` is the newest commit that snapshot is known to
    equal: the one its export read, which a kept snapshot equals too (the store-log observation
    compares it with the store's); ``exported_at_commit`` is the commit it was written at."""
    lightfoot = store.open()
    model = embedder.get()
    read = lightfoot.manifest().seq  # the export reads this commit or a later one
    audit = permission_check(
        lambda: model, store.settings(), enabled=config.audit_views,
        groups_file=Path(config.groups_file) if config.groups_file else None, principals=config.principals,
        questions=config.questions, document_limit=config.document_limit, echo=context.log.info)
    with dagster_batch(context):  # registering a vector model is a commit of Dagster's own
        report = publish_checked(lightfoot, model, [audit], keep=DEFAULT_KEEP,
                                 progress=StepProgress("snapshot export", context.log.info, delay=LOG_EVERY))
    info, served = report.info, report.served
    if report.published:
        reflected = max(read, info.store_seq)
        context.log.info(f"serving snapshot {info.snapshot_id} (exported at store commit {info.store_seq}; "
                         f"the store's state at commit {reflected})")
    else:
        reflected = served.store_seq if served is not None else 0
        context.log.warning(f"staged snapshot {info.snapshot_id} not published: {report.reason}; services keep "
                            f"serving {served.snapshot_id if served else 'no snapshot'}")
    metadata = {
        "published": dg.MetadataValue.bool(report.published),
        "staged_snapshot_id": dg.MetadataValue.text(info.snapshot_id),
        "store_commit": dg.MetadataValue.int(reflected),
        "model_calls": dg.MetadataValue.int(0),
        "cost_usd": dg.MetadataValue.float(0.0),
    }
    if not report.published:
        metadata["not_published"] = dg.MetadataValue.text(report.reason or "")
    if served is not None:
        metadata.update({
            "snapshot_id": dg.MetadataValue.text(served.snapshot_id),
            "dagster/uri": dg.MetadataValue.path(served.uri),
            "fingerprint": dg.MetadataValue.text(served.fingerprint),
            "exported_at_commit": dg.MetadataValue.int(served.store_seq),
            "created_at": dg.MetadataValue.text(served.created_at),
            "dagster/row_count": dg.MetadataValue.int(int(served.counts.get("passages", 0))),
            "rows": dg.MetadataValue.json(served.counts),
            "models": dg.MetadataValue.json(served.models),
        })
    return dg.MaterializeResult(
        data_version=dg.DataVersion(served.fingerprint[:16] if served is not None else "unpublished"),
        metadata=metadata, check_results=[check_result(report)],
    )
