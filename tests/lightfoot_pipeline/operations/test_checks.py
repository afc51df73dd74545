"""The checks' own judgement (operations/checks.py), with no orchestrator: why a comparison with a
fresh rebuild does not run, and what an account of passages says is wrong."""

from __future__ import annotations

from lightfoot_pipeline.operations.checks import PassageAccount, rebuild_skip_reason


def test_a_rebuild_comparison_says_why_it_does_not_run_in_order_of_precedence():
    def why(**changed):
        return rebuild_skip_reason(**{"configured": True, "enabled": True, "mid_way": [], **changed})

    assert why() is None, "at any size: above the whole-store limit the run's changes are compared"
    assert "disabled in this run's config" in why(configured=False, enabled=False)
    assert "compare_with_rebuild" in why(enabled=False, mid_way=["r1"])
    assert why(mid_way=["r1"]).startswith("run r1 is mid-way")
    assert why(mid_way=["r1", "r2"]).startswith("runs r1, r2 are mid-way")


def test_an_account_names_the_first_documents_of_each_problem():
    account = PassageAccount(store_commit=3, problems={"without an extraction": [f"d{i}" for i in range(7)],
                                                       "with several extractions": []})
    assert not account.passed
    assert account.describe() == "7 documents have passages without an extraction (d0, d1, d2, d3, d4, …)"
    assert PassageAccount(store_commit=3, problems={"with an unknown status": []}).describe() is None
