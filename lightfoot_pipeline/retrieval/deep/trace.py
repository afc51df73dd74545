"""The steps of a deep question, for ``lightfoot query --mode deep --trace`` and ``lightfoot explain``.

:func:`step_trace` returns the steps as data (with or without text); :func:`trace_lines` writes a
result (``DeepResult.as_dict()``, as the query service returns it under ``deep``) for a terminal:
each step's subqueries and what each retrieved, the memory operations and what came of them, the
sufficiency check, then how the question ended and what its calls cost.
:func:`provenance_lines` lists the memory points the answer used with their passages and facts.
"""

from __future__ import annotations

from lightfoot_pipeline.retrieval.deep.loop import DeepResult


def step_trace(result: DeepResult, text: bool = True) -> list[dict]:
    """Every step: subqueries with the ids they retrieved, operations, the check."""
    return [step.as_dict(text) for step in result.steps]


def _operation_line(op: dict) -> list[str]:
    if not op["applied"]:
        return [f"  {op['op']} refused: {op['reason']}"]
    made = f"{' + '.join(op['points'])} -> {op['point']}" if op["op"] == "merge" else op["point"]
    counts = f"{len(op['entities'])} entities, {len(op['facts'])} facts, {len(op['chunks'])} passages"
    described = f": {op['description']}" if op.get("description") else ""
    return [f"  {op['op']} {made} ({counts}){described}", *[f"    note: {n}" for n in op["notes"]]]


def trace_lines(deep: dict) -> list[str]:
    """A deep result's steps, one line per subquery, operation and check."""
    lines: list[str] = []
    for step in deep["steps"]:
        lines.append(f"step {step['step']}:")
        for item in step["subqueries"]:
            target = f" on {item['point']}" if item["point"] else ""
            query = f" \"{item['query']}\"" if item.get("query") else ""
            lines.append(f"  {item['kind']}{target}{query}: {len(item['entities'])} entities, {len(item['facts'])} "
                         f"facts, {len(item['chunks'])} passages ({', '.join(item['docs'])})"
                         + (f"; {item['note']}" if item["note"] else ""))
        for op in step["operations"]:
            lines += _operation_line(op)
        if not step["operations"]:
            lines.append("  no memory operation")
        lines += [f"  note: {n}" for n in step["notes"]]
        check = step["check"]
        if check is not None:
            verdict = "sufficient" if check["sufficient"] else f"insufficient, {len(check['subqueries'])} subqueries"
            lines.append(f"  check: {verdict}" + (f": {check['reason']}" if check.get("reason") else ""))
            lines += [f"    note: {n}" for n in check["notes"]]
    lines.append(deep["status"] + (f": {deep['reason']}" if deep["reason"] else ""))
    lines.append(f"{len(deep['calls'])} model calls, {deep['tokens_in']:,}/{deep['tokens_out']:,} tokens, "
                 f"${deep['cost_usd']:.6f}, {deep['seconds']:.2f}s")
    return lines


def provenance_lines(deep: dict) -> list[str]:
    """The memory points the answer used, each with its passages and facts."""
    lines = []
    for entry in deep["points"]:
        lines.append(f"  {entry['point']}: {entry.get('description', '')}")
        lines += [f"    passage [{c['doc_id']}] {c['chunk_id']}" for c in entry["chunks"]]
        lines += [f"    fact {f.get('text', f['fact_id'])}" for f in entry["facts"]]
    return lines
