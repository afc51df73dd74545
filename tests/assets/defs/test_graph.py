"""The graph asset: its embedding of new names is reported in the run's log, and its materializations
count the documents the graph gained and lost."""

from __future__ import annotations

import dagster as dg
import pytest

from lightfoot_pipeline import progress

pytestmark = [pytest.mark.dagster]


def test_embedding_new_names_logs_progress_lines(lightfoot, twenty, sample_records, monkeypatch):
    import assets.defs.graph as graph_module

    # Every chunk is reported (the shipped interval is five seconds; a pass here takes less).
    monkeypatch.setattr(graph_module, "name_progress", lambda emit: progress.name_progress(emit, every_seconds=0.0))
    lightfoot.ingest_through_the_inbox(twenty, sample_records)
    runs = lightfoot.instance.get_run_records()
    messages = [entry.user_message for run in runs for entry in lightfoot.instance.all_logs(run.dagster_run.run_id)
                if entry.user_message and entry.user_message.startswith("embedding names:")]
    assert messages, "no progress line in the run's log"
    counts = [message.split(": ", 1)[1].split(" ", 1)[0].replace(",", "").split("/") for message in messages]
    finished = [int(total) for done, total in counts if done == total]  # the last line of each pass
    names = lightfoot.store().read("aliases").get_column("name").n_unique()  # a vector per name
    assert sum(finished) == names  # every name of the new store was embedded, in passes that all ended

    # The run's graph materializations count the documents the graph gained and lost (ints, never ids).
    (run,) = runs
    records = lightfoot.instance.get_records_for_run(
        run.dagster_run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=1000).records
    graph = {r.event_log_entry.dagster_event.asset_key.to_user_string():
             r.event_log_entry.dagster_event.event_specific_data.materialization.metadata for r in records}
    in_graph = lightfoot.store().read("mentions").get_column("doc_id").n_unique()
    for asset in ("name_vectors", "name_links", "entities", "synonym_edges", "facts"):
        assert graph[asset]["documents_added"].value == in_graph > 0
        assert graph[asset]["documents_removed"].value == 0
