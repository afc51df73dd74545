"""The deletion-audit core: build, delete, build the survivors afresh, compare; in this process or another."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.evaluation.deletion_trial import (
    AFTER,
    BEFORE,
    FRESH,
    CountingEmbedder,
    audit_deletion,
    choose_deletions,
    run_trial,
)
from lightfoot_pipeline.evaluation.harness import HarnessError
from lightfoot_pipeline.ingest.dataset import DatasetError, load_corpus, load_recorded_extractions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.llm import LLMClient, LLMSettings
from lightfoot_pipeline.store.fingerprint import counts, fingerprint
from lightfoot_pipeline.store.store import Store

DATA = Path(__file__).parents[1] / "data" / "query-corpus"


def test_the_counting_embedder_counts_batches_and_questions(hashing_embedder):
    counting = CountingEmbedder(hashing_embedder)
    vectors = counting.embed(["a", "b", "c"])
    np.testing.assert_array_equal(vectors, hashing_embedder.embed(["a", "b", "c"]))
    np.testing.assert_array_equal(counting.embed_query("d"), hashing_embedder.embed_query("d"))
    assert (counting.calls, counting.texts) == (2, 4)
    assert counting.model_id == hashing_embedder.model_id and counting.dim == hashing_embedder.dim


@pytest.mark.slow
def test_a_trial_is_exact_and_shows_the_store_at_each_phase(small_dataset, hashing_embedder, tmp_path):
    seen = []

    def observe(phase, store):
        seen.append((phase, store.uri, fingerprint(store).digest, counts(store)["documents"]))

    full, fresh = Store(str(tmp_path / "full")), Store(str(tmp_path / "fresh"))
    trial = run_trial(small_dataset, full, fresh, hashing_embedder, fraction=0.1, seed=5, observe=observe)
    doc_ids = [d.doc_id for d in load_corpus(small_dataset)]
    assert trial.doomed == choose_deletions(doc_ids, 0.1, 5) == sorted(trial.deleted.deleted)
    assert len(trial.survivors) == 144 and not set(trial.doomed) & {d.doc_id for d in trial.survivors}
    assert [(phase, uri, documents) for phase, uri, _, documents in seen] == [
        (BEFORE, full.uri, 160), (AFTER, full.uri, 144), (FRESH, fresh.uri, 144)]
    assert seen[0][2] != seen[1][2] == seen[2][2] == trial.mine.digest == trial.theirs.digest
    assert trial.fingerprint_equal and trial.mine.differences(trial.theirs) == []
    assert trial.counts_built["documents"] == 160 and trial.counts_deleted == counts(full)
    assert (trial.model_calls, trial.embedder_calls, trial.built.model_calls, trial.fresh_model_calls) == (0, 0, 0, 0)


@pytest.mark.slow
def test_a_model_call_made_while_deleting_is_counted(chat_server, hashing_embedder, tmp_path, monkeypatch):
    client = LLMClient(LLMSettings(base_url=chat_server.base_url, model="m", max_retries=0))
    delete = operations.delete

    def delete_and_ask(*args, **kwargs):
        client.complete([{"role": "user", "content": "which documents go?"}])
        return delete(*args, **kwargs)

    monkeypatch.setattr(operations, "delete", delete_and_ask)
    trial = run_trial(DATA, Store(str(tmp_path / "full")), Store(str(tmp_path / "fresh")), hashing_embedder,
                      fraction=0.25, seed=0)
    assert trial.model_calls == 1 == chat_server.count and trial.fingerprint_equal


def test_the_audit_refuses_a_store_it_did_not_build_and_a_dataset_without_extractions(hashing_embedder, tmp_path):
    full = Store(str(tmp_path / "full"))
    operations.ingest(full, load_corpus(DATA)[:1], ReplayExtractor(load_recorded_extractions(DATA)), hashing_embedder)
    with pytest.raises(HarnessError, match="already holds one"):
        run_trial(DATA, full, Store(str(tmp_path / "fresh")), hashing_embedder)
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(DATA / "corpus.jsonl", bare / "corpus.jsonl")
    with pytest.raises(DatasetError, match=r"no extractions\.jsonl"):
        run_trial(bare, Store(str(tmp_path / "a")), Store(str(tmp_path / "b")), hashing_embedder)


@pytest.mark.slow
def test_audit_deletion_builds_the_survivors_in_a_separate_process(tmp_path):
    from lightfoot_pipeline.models.embedder import load_embedder

    report = audit_deletion(DATA, Store(str(tmp_path / "full")), load_embedder("hashing:32"), "hashing:32",
                            fraction=0.25, seed=1, work_dir=tmp_path / "work")
    json.dumps(report)
    assert report["fingerprint_equal"] and report["tables_differing"] == []
    assert report["fingerprint_after_delete"] == report["fingerprint_fresh"]
    assert report["deleted_docs"] == 3 and report["surviving_docs"] == 9
    assert report["deleted_doc_ids"] == choose_deletions([d.doc_id for d in load_corpus(DATA)], 0.25, 1)
    assert report["counts_after_delete"] == report["counts_fresh_store"]
    assert report["counts_full_store"]["documents"] == 12 and report["counts_after_delete_tables"]["documents"] == 9
    assert (report["model_calls"], report["build_model_calls"], report["rebuild_model_calls"]) == (0, 0, 0)
    # the survivors' dataset and the fresh store stay in the work directory
    assert report["fresh_store"] == str(tmp_path / "work" / "fresh-store")
    survivors = load_corpus(tmp_path / "work" / "survivors")
    assert len(survivors) == 9 and not {d.doc_id for d in survivors} & set(report["deleted_doc_ids"])

