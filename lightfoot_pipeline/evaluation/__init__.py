"""Measuring the index: recall@k and answers by retrieval mode, kept runs and their reports, and
what deleting documents does (exactness against a fresh build, retrieval before and after), and
whether each principal's view retrieves what a store of its readable documents alone does.

Each public name loads its module when first used, so that importing one module of the package
(the command line imports ``modes`` to build its parser) does not import the engine.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "AnswerOptions": "evaluate", "EvalPlan": "evaluate", "eval_json": "evaluate", "plan_evaluation": "evaluate",
    "run_evaluation": "evaluate",
    "AuditOutcome": "deletion_eval", "run_deletion_audit": "deletion_eval",
    "PrincipalAudit": "permission_audit", "audit_dataset": "permission_audit", "audit_permissions": "permission_audit",
    "Trial": "deletion_trial", "audit_deletion": "deletion_trial", "run_trial": "deletion_trial",
    "HarnessError": "harness", "QuestionResult": "harness", "run_questions": "harness",
    "exact_match": "metrics", "paired_bootstrap": "metrics", "recall_at_k": "metrics", "token_f1": "metrics",
    "Mode": "modes", "available_modes": "modes", "standard_modes": "modes",
    "write_report": "report",
    "Run": "runs", "RunError": "runs", "compare_modes": "runs", "compare_runs": "runs", "load_run": "runs",
    "write_run": "runs",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
