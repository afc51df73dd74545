"""The relink job: the whole graph derived again, its link stage spread over steps.

``relink_job`` does what ``lightfoot migrate`` does to a store of this layout — every graph table
derived again from the live documents and extractions with the deployment's embedder and index
settings, in one commit — with the links computed in pieces (``lightfoot_pipeline/relink.py``):
an operator runs it after changing the link settings or the embedder, or to build the graph of a
large corpus whose documents were committed without it (the per-batch assets alone). Its steps:

1. ``prepare_relink`` stages every live name's band keys (embedding names that have no vector);
2. ``plan_link_pieces`` cuts the work into steps of at most LIGHTFOOT_LINK_PIECE_SIZE names x
   bands, one dynamic output each;
3. ``link_pieces`` computes one step's pieces and stages their links, one step per output;
4. ``commit_relink`` (in the ``lightfoot_store`` pool) unions the links and commits the graph,
   refusing a store that changed since step 1.

Steps run in processes of their own (the multiprocess executor), or in Kubernetes Jobs of their
own with LIGHTFOOT_RELINK_EXECUTOR=k8s (``dagster_k8s.k8s_job_executor``, from the ``deploy``
extra). Step outputs are small (the prepared names' counts, the pieces) and are kept in the run's
staging area under the store root, so steps on other machines read them there. A failed step
removes the staging area (a failure hook), the run fails with that step's error, and the store is
left as it was; running the job again starts afresh.
"""

import re
import time

import dagster as dg

from assets.keys import GRAPH_ASSETS
from assets.provenance import STORE_POOL
from assets.resources import EmbedderResource, StoreResource
from lightfoot_pipeline.operations import relink
from lightfoot_pipeline.operations.relink import LinkPiece, Prepared, RelinkError, StagingArea
from lightfoot_pipeline.progress import name_progress, peak_rss_mb
from lightfoot_pipeline.settings import SettingsError, relink_executor
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store

RELINK_JOB = "relink_job"
OUTPUTS = "relink_outputs"  # the IO manager of the job's steps


class StagedOutputs(dg.IOManager):
    """Keeps step outputs (JSON values) in the run's staging area, where every step can read them."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @staticmethod
    def _name(context: dg.OutputContext) -> str:
        mapped = f".{context.mapping_key}" if context.mapping_key else ""  # one of a dynamic output's values
        return "outputs/" + re.sub(r"[^A-Za-z0-9_.-]", "_", f"{context.step_key}.{context.name}{mapped}") + ".json"

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        if obj is None:  # the commit step returns nothing once the area is gone
            return
        area = StagingArea(self.store, context.run_id)
        if not area.alive():  # removed since the step began (the run failed, or an erasure ran)
            raise RelinkError(f"relink staging {area.uri} was removed (the run failed or was cleaned up)")
        area.write_json(self._name(context), obj)

    def load_input(self, context: dg.InputContext):
        upstream = context.upstream_output
        return StagingArea(self.store, upstream.run_id).read_json(self._name(upstream))


@dg.io_manager(required_resource_keys={"store"})
def staged_outputs(init_context: dg.InitResourceContext) -> StagedOutputs:
    return StagedOutputs(init_context.resources.store.open())


@dg.failure_hook(required_resource_keys={"store"})
def remove_staging_on_failure(context: dg.HookContext) -> None:
    """A failed step leaves no staged names behind (steps still running stop when they see it gone)."""
    StagingArea(context.resources.store.open(), context.run_id).remove()
    context.log.info("relink failed: its staging area is removed, the store is as it was")


@dg.op(out=dg.Out(dict, io_manager_key=OUTPUTS), description="Stage every live name's band keys, one file per type.")
def prepare_relink(context: dg.OpExecutionContext, store: StoreResource, embedder: EmbedderResource) -> dict:
    prepared = relink.prepare(store.open(), embedder.get(), store.settings(), context.run.run_id,
                              name_progress(context.log.info))
    context.log.info(f"prepared {sum(prepared.names.values()):,} names of {len(prepared.names)} types at store "
                     f"commit {prepared.seq}")
    context.add_output_metadata({"names": sum(prepared.names.values()), "store_commit": prepared.seq,
                                 "peak_rss_mb": peak_rss_mb()})
    return prepared.as_dict()


@dg.op(out=dg.DynamicOut(list, io_manager_key=OUTPUTS), description="Cut the links into steps of pieces (type, band range).")
def plan_link_pieces(context: dg.OpExecutionContext, store: StoreResource, prepared: dict):
    steps = relink.plan(store.open(), Prepared.of(prepared)) or [[]]  # no pair to link: one empty step
    context.log.info(f"{sum(len(s) for s in steps)} link pieces in {len(steps)} steps")
    for k, step in enumerate(steps):
        yield dg.DynamicOutput([p.as_dict() for p in step], mapping_key=f"step_{k:04d}")


@dg.op(out=dg.Out(dict, io_manager_key=OUTPUTS), description="Compute one step's link pieces and stage their links.")
def link_pieces(context: dg.OpExecutionContext, store: StoreResource, prepared: dict, pieces: list) -> dict:
    started = time.process_time()
    found = relink.link_pieces(store.open(), Prepared.of(prepared), [LinkPiece.of(p) for p in pieces],
                               store.settings())
    context.log.info(f"{sum(found.values()):,} links from {len(found)} pieces")
    context.add_output_metadata({"links": sum(found.values()), "pieces": len(found),
                                 "cpu_s": round(time.process_time() - started, 3),
                                 "peak_rss_mb": peak_rss_mb()})
    return found


@dg.op(pool=STORE_POOL, out=dg.Out(dg.Nothing), description="Union the staged links and commit the graph derived again.")
def commit_relink(context: dg.OpExecutionContext, store: StoreResource, prepared: dict, found: list) -> None:
    lightfoot = store.open()
    change = relink.commit(lightfoot, Prepared.of(prepared), store.settings())
    manifest = lightfoot.manifest()
    context.log.info(f"store commit {manifest.seq}: {change.names_added:,} names, {change.links_added:,} links, "
                     f"{change.entities_after:,} entities")
    metadata = {"store_commit": dg.MetadataValue.int(manifest.seq), "operation": dg.MetadataValue.text("relink"),
                "links": dg.MetadataValue.int(change.links_added),
                "link_pieces": dg.MetadataValue.int(sum(len(f) for f in found)),
                "entities": dg.MetadataValue.int(change.entities_after),
                "derived_in_batches": dg.MetadataValue.int(int(manifest.details.get("derived_in_batches") or 0)),
                "peak_rss_mb": dg.MetadataValue.float(peak_rss_mb())}
    if store.report_fingerprint:
        metadata["store_fingerprint"] = dg.MetadataValue.text(fingerprint(lightfoot, manifest).digest)
    for key in GRAPH_ASSETS:  # the graph's tables are new: what reads them is stale
        context.log_event(dg.AssetMaterialization(asset_key=key, metadata=metadata))


def _executor() -> dg.ExecutorDefinition:
    if relink_executor() == "k8s":
        try:
            from dagster_k8s import k8s_job_executor
        except ImportError:
            raise SettingsError("LIGHTFOOT_RELINK_EXECUTOR=k8s needs dagster-k8s",
                                hint="install the deploy extra (pip install -e '.[deploy]')") from None
        return k8s_job_executor
    return dg.multiprocess_executor


@dg.job(
    name=RELINK_JOB, executor_def=_executor(),
    hooks={remove_staging_on_failure}, tags={"lightfoot/operation": "relink"},
    description="Derive the whole graph again, its links computed in pieces, one step each (lightfoot migrate "
                "--pieces in one process).",
)
def relink_job():
    prepared = prepare_relink()
    found = plan_link_pieces(prepared).map(lambda pieces: link_pieces(prepared, pieces))
    commit_relink(prepared, found.collect())


@dg.definitions
def relink_definitions() -> dg.Definitions:
    """The job and the IO manager of its steps (a module with definitions gives the loader those alone)."""
    return dg.Definitions(jobs=[relink_job], resources={OUTPUTS: staged_outputs})


def relink_job_for(store_uri: str, embedder: str | None = None) -> dg.JobDefinition:
    """The relink job bound to one store and embedder, outside a code location: a target for
    ``dg.build_reconstructable_job`` (benchmarks, scripts, tests)."""
    defs = dg.Definitions(jobs=[relink_job], resources={
        "store": StoreResource(uri=store_uri), "embedder": EmbedderResource(model=embedder), OUTPUTS: staged_outputs})
    return defs.resolve_job_def(RELINK_JOB)
