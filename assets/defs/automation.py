"""Automation: the sensor that evaluates the assets' automation conditions, running by default.

The graph assets and the serving snapshot carry ``AutomationCondition.eager()`` (the snapshot
also waits for every blocking check upstream to pass): when their upstream changes outside the
ingestion and deletion jobs (a batch's partition materialized by hand, a failed run's graph step
left undone, a write from the command line that the store log's observation reports, store_log.py),
this sensor asks for the runs that bring them up to date. It replaces Dagster's
default automation sensor, which a new deployment would start stopped; turn it off in the UI's
Automation tab to keep only the jobs, schedules and inbox sensors.
"""

import dagster as dg

from assets.keys import GRAPH_GROUP, SERVING_GROUP

automation_sensor = dg.AutomationConditionSensorDefinition(
    "automation_sensor",
    target=dg.AssetSelection.groups(GRAPH_GROUP, SERVING_GROUP),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Evaluates the eager automation conditions of the graph assets and the serving snapshot.",
)
