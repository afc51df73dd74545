"""The Dagster layer: Lightfoot's engine as partitioned assets, checks, sensors and schedules.

``definitions.py`` is the code location's one entry point; it loads every module of ``defs/``
(one per domain: ingestion, extraction, graph, serving, retention, checks, resources). The modules
beside it hold what those share: the resources, the ``batches`` partitions and the metadata
every materialization reports. All the work is the engine's: each asset calls one operation of
``lightfoot_pipeline/operations/`` (the one the command line runs) and adds partitions, checks,
metadata and automation; no module here opens a store transaction or names a table.
"""
