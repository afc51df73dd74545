"""Measuring the index: recall@k and answers by mode, runs and reports, and the deletion audits.

``evaluate`` and ``harness`` (questions through every retrieval mode), ``metrics``, ``eval_run``,
``runs`` and ``report`` (an evaluation kept in a directory and written up), ``audit`` and
``deletion_audit`` (delete a fraction of a dataset and prove the result exact).
"""
