"""Names the definitions refer to each other by (asset keys, jobs, checks, groups)."""

import dagster as dg

# Per-batch assets, a partition per ingestion batch (assets/partitions.py); documents are rows.
SOURCE_FILES = dg.AssetKey("source_files")
PASSAGES = dg.AssetKey("passages")
EXTRACTION_CACHE = dg.AssetKey("extraction_cache")
EXTRACTIONS = dg.AssetKey("extractions")
FORMS = dg.AssetKey("forms")
PER_BATCH_ASSETS = (PASSAGES, EXTRACTION_CACHE, EXTRACTIONS, FORMS)

# Global assets, updated incrementally by one graph-stage commit.
NAME_VECTORS = dg.AssetKey("name_vectors")
NAME_LINKS = dg.AssetKey("name_links")
ENTITIES = dg.AssetKey("entities")
SYNONYM_EDGES = dg.AssetKey("synonym_edges")
FACTS = dg.AssetKey("facts")
GRAPH_ASSETS = (NAME_VECTORS, NAME_LINKS, ENTITIES, SYNONYM_EDGES, FACTS)

# The answers of a provider's extraction batches, collected (assets/defs/extraction_batches.py).
EXTRACTION_BATCHES = dg.AssetKey("extraction_batches")

SERVING_SNAPSHOT = dg.AssetKey("serving_snapshot")
# The store's log: what the graph and the snapshot are computed from, whoever wrote it (assets/defs/store_log.py).
STORE_LOG = dg.AssetKey("store_log")
TOMBSTONES = dg.AssetKey("tombstones")
ERASURES = dg.AssetKey("erasures")

SOURCES_GROUP = "sources"
BATCH_GROUP = "batches"  # the per-batch assets (a partition per ingestion batch)
GRAPH_GROUP = "graph"
SERVING_GROUP = "serving"
RETENTION_GROUP = "retention"
EXTRACTION_BATCHES_GROUP = "extraction_batches"

INGESTION_JOB = "ingestion_job"
DELETION_JOB = "deletion_job"
SYNC_JOB = "sync_job"
EXTRACTION_BATCHES_JOB = "extraction_batches_job"

PASSAGES_CHECK = dg.AssetCheckKey(EXTRACTIONS, "passages_accounted_for")
REBUILD_CHECK = "matches_fresh_rebuild"

TRIGGER_TAG = "lightfoot/trigger"
DELETION_TAG = "lightfoot/deletion"  # a deletion run's key (erase-…, retention-…), its batch in the store log
# What a run paid for model calls, on the run page: its steps' totals, summed (assets/provenance.py).
MODEL_CALLS_TAG = "lightfoot/model_calls"
TOKENS_IN_TAG = "lightfoot/tokens_in"
TOKENS_OUT_TAG = "lightfoot/tokens_out"
COST_USD_TAG = "lightfoot/cost_usd"
COST_RUN_TAG = "lightfoot/cost_of_run"  # the run those totals are of (a re-execution inherits its parent's tags)

# Who answers for every asset (Dagster takes an email address or "team:<name>").
OWNERS = ["team:lightfoot"]
