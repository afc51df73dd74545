"""The ``deep`` query mode: multi-step answers with a working memory over the Lightfoot graph.

HGMem (Zhou et al., arXiv 2512.23959) on a serving snapshot: the model keeps a memory of points
(hyperedges over entities, each with the facts and passages it rests on), checks at each step
whether it suffices, and if not asks subqueries that investigate a point locally or explore the
graph globally; what they retrieve updates, extends and merges the memory; the answer is written
from it. One module per concept: ``memory`` (points and operations), ``schemas`` and ``parse``
(the replies), ``evidence`` (the two retrieval calls), ``prompts``, ``loop`` (the steps, budgets
and calls), ``trace`` (the steps for a reader) and ``estimate`` (the dry run's cost).

The one-step mode stays the default; this mode makes model calls before the answer, so it runs
only where answers are on, and each call is budgeted and charged to the cost ledger.
"""

from lightfoot_pipeline.retrieval.deep.loop import DeepQuery, DeepQueryError, DeepResult, DeepSettings, charges
from lightfoot_pipeline.retrieval.deep.trace import provenance_lines, step_trace, trace_lines

__all__ = ["DeepQuery", "DeepQueryError", "DeepResult", "DeepSettings", "charges", "provenance_lines",
           "step_trace", "trace_lines"]
