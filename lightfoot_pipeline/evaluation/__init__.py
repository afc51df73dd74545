"""Measuring the index: recall@k and answers by mode, runs and reports, and the deletion audits.

``modes`` (the retrieval modes and recall cut-offs), ``harness`` (questions through every mode),
``metrics``, ``eval_run`` (an evaluation of one store), ``runs`` and ``report`` (an evaluation
kept in a directory and written up), ``audit`` (delete a fraction of a dataset and prove the result
exact) and ``deletion_audit`` (the same audit with retrieval before and after).
"""
