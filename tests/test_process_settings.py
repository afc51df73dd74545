"""The suite fails a test that leaves process-wide settings changed (tests/conftest.py:
``leaves_process_settings_as_found``), and lets one that changes them through ``monkeypatch`` or a
context that restores them pass."""

from __future__ import annotations

from pathlib import Path

CONFTEST = Path(__file__).with_name("conftest.py")

TESTS = '''
import os

import torch
from threadpoolctl import threadpool_limits

from lightfoot_pipeline.retrieval.retrieve import query_thread_limits


def test_leaves_torch_on_one_thread():
    torch.set_num_threads(1)


def test_leaves_blas_on_one_thread():
    threadpool_limits(limits=1, user_api="blas")


def test_leaves_a_variable_set():
    os.environ["LIGHTFOOT_LEFT_BEHIND"] = "1"


def test_leaves_a_variable_removed():
    del os.environ["HOME"]


def test_sets_a_variable_with_monkeypatch(monkeypatch):
    monkeypatch.setenv("LIGHTFOOT_LEFT_BEHIND", "1")
    monkeypatch.delenv("HOME")


def test_limits_threads_inside_the_query_context():
    with query_thread_limits():
        assert torch.get_num_threads() == 1


def test_runs_after_the_others_with_the_settings_restored():
    assert "LIGHTFOOT_LEFT_BEHIND" not in os.environ and "HOME" in os.environ
    assert torch.get_num_threads() == TORCH_THREADS
'''


def test_a_test_that_leaves_threads_or_the_environment_changed_fails(pytester):
    import torch
    from threadpoolctl import threadpool_limits

    # The tests inside leave torch and BLAS on one thread, so they start from two: the suite's
    # workers may run on one thread each (scripts/test.sh), and a change to what is set shows no leak.
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with threadpool_limits(limits=2, user_api="blas"):
            pytester.makeconftest(CONFTEST.read_text())
            pytester.makepyfile(test_leaks=TESTS.replace("TORCH_THREADS", "2"))
            result = pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    finally:
        torch.set_num_threads(threads)
    result.assert_outcomes(passed=7, errors=4)
    output = result.stdout.str()
    assert "torch threads: " in output and "blas threads of " in output
    assert "environment variable LIGHTFOOT_LEFT_BEHIND: None -> '1'" in output
    assert "environment variable HOME: " in output
