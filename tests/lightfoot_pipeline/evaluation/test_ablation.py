"""The index-rule ablation: one store per setting, recall per setting with intervals, differences
from the defaults paired over the same questions; and ``lightfoot eval``'s settings options."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lightfoot_pipeline.evaluation.ablation import (
    DEFAULT,
    POOLED,
    SETTINGS,
    ablation_table,
    compare_settings,
    run_ablation,
)
from lightfoot_pipeline.evaluation.evaluate import ensure_dataset_indexed
from lightfoot_pipeline.evaluation.metrics import bootstrap_interval, paired_bootstrap
from lightfoot_pipeline.evaluation.runs import load_run
from lightfoot_pipeline.ingest.dataset import load_questions
from lightfoot_pipeline.operations.config import IndexConfigError
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def report(small_dataset, hashing_embedder, tmp_path_factory):
    questions = [q for q in load_questions(small_dataset / "questions-dev.jsonl") if q.gold_doc_ids]
    sets = {"first": questions[:4], "second": questions[4:]}
    chosen = {DEFAULT: SETTINGS[DEFAULT], "numbers-off": SETTINGS["numbers-off"],
              "exhaustive": SETTINGS["exhaustive"]}
    work = tmp_path_factory.mktemp("ablation")
    return run_ablation(small_dataset, sets, hashing_embedder, work, settings=chosen, resamples=500), work


@pytest.mark.slow  # three stores of 160 documents
def test_each_setting_is_built_once_with_its_own_rules(report):
    found, work = report
    assert sorted(p.name for p in work.iterdir()) == sorted(found["settings"])
    for name, described in found["settings"].items():
        config = Store(str(work / name / "store")).manifest().config["settings"]
        assert config == described["index_settings"] == SETTINGS[name].shape_of_index()
    counts = {name: d["counts"] for name, d in found["settings"].items()}
    # The numbers rule only ever removes links: without it, at least as many, and on this slice more.
    assert counts["numbers-off"]["name_links"] > counts[DEFAULT]["name_links"]
    assert counts["numbers-off"]["aliases"] == counts[DEFAULT]["aliases"]


@pytest.mark.slow  # three stores of 160 documents, and one more
def test_later_settings_embed_nothing_and_equal_a_build_of_their_own(report, small_dataset, hashing_embedder,
                                                                     tmp_path):
    found, work = report
    embedded = {name: d["texts_embedded"] for name, d in found["settings"].items()}
    assert embedded[DEFAULT] > 0 and embedded["numbers-off"] == embedded["exhaustive"] == 0
    own = Store(str(tmp_path / "store"))
    ensure_dataset_indexed(own, small_dataset, hashing_embedder, settings=SETTINGS["numbers-off"])
    assert fingerprint(own) == fingerprint(Store(str(work / "numbers-off" / "store")))


@pytest.mark.slow  # three stores of 160 documents
def test_every_set_and_the_pooled_one_has_every_setting_mode_and_cutoff(report):
    found, _ = report
    assert set(found["sets"]) == {"first", "second", POOLED}
    assert found["questions"] == {"first": 4, "second": 4, POOLED: 8}
    for cells in found["sets"].values():
        keys = {(c["setting"], c["mode"], c["metric"]) for c in cells}
        assert keys == {(s, m, f"recall@{k}") for s in found["settings"] for m in found["modes"] for k in found["ks"]}
        for c in cells:
            assert c["low"] <= c["mean"] <= c["high"]
            assert (c["difference"] is None) == (c["setting"] == DEFAULT)
    # Dense retrieval reads no link: every setting scores it the same, with a zero difference.
    dense = [c for c in found["sets"][POOLED] if c["mode"] == "dense" and c["setting"] != DEFAULT]
    assert dense and all(c["difference"] == 0.0 and not c["significant"] for c in dense)
    rows = ablation_table(found, POOLED, "lightfoot")
    assert len(rows) == 2 + len(found["settings"]) and rows[2].startswith(f"| {DEFAULT} |")


@pytest.mark.slow  # three stores of 160 documents
def test_the_pooled_set_is_the_union_of_the_sets(report):
    found, _ = report
    for setting in found["settings"]:
        for metric in ("recall@2", "recall@10"):
            def mean(set_name, setting=setting, metric=metric):
                return next(c["mean"] for c in found["sets"][set_name]
                            if c["setting"] == setting and c["mode"] == "lightfoot" and c["metric"] == metric)
            assert mean(POOLED) == pytest.approx((mean("first") + mean("second")) / 2)


def test_differences_are_paired_over_the_same_questions():
    per_setting = {DEFAULT: {"a": 1.0, "b": 0.0, "c": 0.5}, "other": {"a": 1.0, "b": 1.0, "c": 0.5}}
    cells = {c.setting: c for c in compare_settings(per_setting, mode="lightfoot", metric="recall@5", resamples=200)}
    expected = paired_bootstrap([1.0, 1.0, 0.5], [1.0, 0.0, 0.5], resamples=200)
    assert cells["other"].difference == pytest.approx(1 / 3)
    assert (cells["other"].versus.low, cells["other"].versus.high) == (expected.low, expected.high)
    assert cells["other"].as_dict()["difference_low"] == expected.low
    assert cells[DEFAULT].difference is None and cells[DEFAULT].significant is None
    with pytest.raises(ValueError, match="other questions"):
        compare_settings({DEFAULT: {"a": 1.0}, "other": {"b": 1.0}}, mode="lightfoot", metric="recall@5")


def test_a_mean_interval_covers_the_mean_and_is_zero_wide_for_a_constant():
    low, high = bootstrap_interval(np.array([0.0, 1.0] * 20), resamples=500)
    assert low < 0.5 < high
    assert bootstrap_interval(np.ones(10), resamples=100) == (1.0, 1.0)


@pytest.mark.slow  # three stores of 160 documents
def test_a_store_of_other_settings_is_refused_even_when_it_holds_every_document(report, small_dataset,
                                                                                hashing_embedder):
    _, work = report
    store = Store(str(work / DEFAULT / "store"))
    assert ensure_dataset_indexed(store, small_dataset, hashing_embedder)["built"] is False
    with pytest.raises(IndexConfigError, match="built with index settings"):
        ensure_dataset_indexed(store, small_dataset, hashing_embedder, settings=IndexSettings(numbers_must_agree=False))


@pytest.mark.slow  # three `lightfoot eval` processes and a `compare`
def test_eval_builds_with_the_settings_it_names_and_compare_says_how_the_runs_differ(small_dataset, tmp_path):
    def lightfoot(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "lightfoot_pipeline.cli", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=600)

    runs = {}
    for name, options in {"default": [], "off": ["--numbers-rule", "off", "--links", "exhaustive"]}.items():
        run = lightfoot("eval", "--store", str(tmp_path / name), "--dataset", str(small_dataset),
                        "--embedder", "hashing", "--modes", "dense,lightfoot", "--run-dir", str(tmp_path / f"run-{name}"),
                        *options)
        assert run.returncode == 0, run.stderr
        runs[name] = run
    assert "numbers rule on, links banded" in runs["default"].stdout
    assert "numbers rule off, links exhaustive" in runs["off"].stdout
    config = load_run(tmp_path / "run-off").config
    assert config["index_settings"] == {**IndexSettings().shape_of_index(), "numbers_must_agree": False, "lsh_bands": 0}

    again = lightfoot("eval", "--store", str(tmp_path / "default"), "--dataset", str(small_dataset),
                      "--embedder", "hashing", "--modes", "dense", "--numbers-rule", "off", "--out", str(tmp_path / "x.json"))
    assert again.returncode != 0 and "built with index settings" in again.stderr

    compared = lightfoot("compare", str(tmp_path / "run-default"), str(tmp_path / "run-off"))
    assert compared.returncode == 0, compared.stderr
    assert "A: numbers rule on, links banded; B: numbers rule off, links exhaustive" in compared.stdout
    assert "the runs' indexes differ in lsh_bands, numbers_must_agree" in compared.stdout
