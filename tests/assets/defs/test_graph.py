"""The graph asset: its embedding of new names is reported in the run's log."""

from __future__ import annotations

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
