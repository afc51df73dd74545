"""The Dagster layer: Lightfoot's engine as partitioned assets, checks, sensors and schedules.

``definitions.py`` is the code location's one entry point; it loads every module of ``defs/``
(one per domain: ingestion, extraction, graph, serving, retention, checks, resources). The modules
beside it hold what those share: the resources, the ``documents`` partitions and the metadata
every materialization reports. All the work is the engine's (``lightfoot_pipeline``); these
modules only call it, and add partitions, checks, metadata and automation.
"""
