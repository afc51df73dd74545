"""The report of a run: ``lightfoot report RUN_DIR`` writes RUN_DIR/report.md and its plots.

Everything in it is computed from the run directory (runs.py), so a report can be written again,
or for an old run, at any time:

- recall@k by mode, with the paired bootstrap 95% interval of Lightfoot against each baseline
  (a difference is significant when its interval excludes zero); plot ``recall_by_mode.png``;
- recall against what the index cost to build (model calls per passage); plot
  ``recall_vs_index_cost.png``;
- retrieval latency by mode;
- answers, when the run has them: exact match and token F1 by mode, their paired intervals, and
  the cost line (calls, tokens, dollars against the budget);
- for a deletion audit: recall of the questions whose evidence was deleted and of the intact ones,
  before and after the deletion; the deletion's time and model calls; the check against a fresh
  build of the survivors; plot ``recall_deleted_vs_intact.png``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from lightfoot_pipeline.evaluation.metrics import paired_bootstrap
from lightfoot_pipeline.evaluation.modes import BASELINES, DENSE, HIPPORAG2, LIGHTFOOT, LIGHTFOOT_RERANK
from lightfoot_pipeline.evaluation.runs import Run, RunError, compare_modes, load_run

PLOT_RECALL = "recall_by_mode.png"
PLOT_COST = "recall_vs_index_cost.png"
PLOT_DELETION = "recall_deleted_vs_intact.png"
DPI = 110
_COLOURS = {DENSE: "#8c8c8c", LIGHTFOOT: "#1f77b4", LIGHTFOOT_RERANK: "#17becf", HIPPORAG2: "#ff7f0e"}


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _reranker_line(status: dict) -> str:
    parts = [status.get("state") or "unknown", status.get("model") or ""]
    reason = status.get("reason")
    return " ".join(p for p in parts if p) + (f" ({reason})" if reason else "")


def main_phase(run: Run) -> str:
    return "before" if "before" in run.phases else run.phases[0]


def mean_table(run: Run, phase: str, columns: Sequence[str]) -> pl.DataFrame:
    frame = run.results.filter(pl.col("phase") == phase)
    return (frame.group_by("mode", maintain_order=True)
            .agg(pl.len().alias("n"), *[pl.col(c).mean().alias(c) for c in columns]))


def headline_pairs(modes: Sequence[str]) -> list[tuple[str, str]]:
    """Lightfoot modes against each baseline, and reranking against plain Lightfoot."""
    ours = [m for m in (LIGHTFOOT, LIGHTFOOT_RERANK) if m in modes]
    pairs = [(a, b) for a in ours for b in BASELINES if b in modes]
    if LIGHTFOOT in modes and LIGHTFOOT_RERANK in modes:
        pairs.append((LIGHTFOOT_RERANK, LIGHTFOOT))
    others = [m for m in modes if m not in ours and m not in BASELINES]
    pairs += [(a, b) for a in others for b in modes if b != a]
    return pairs


def significance_rows(run: Run, phase: str, metrics: Sequence[str]) -> list[list[str]]:
    rows = []
    for a, b in headline_pairs(run.modes):
        for metric in metrics:
            try:
                result = compare_modes(run, a, b, metric, phase)
            except RunError as err:
                rows.append([f"{a} − {b}", metric, "—", "—", f"not compared: {err}"])
                continue
            rows.append([f"{a} − {b}", metric, f"{result.difference:+.3f}",
                         f"[{result.low:+.3f}, {result.high:+.3f}]", "yes" if result.significant else "no"])
    return rows


# -- plots --------------------------------------------------------------------------------------


def plot_recall_by_mode(means: pl.DataFrame, metrics: Sequence[str], path: Path, title: str) -> None:
    plt = _pyplot()
    modes = means.get_column("mode").to_list()
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    width = 0.8 / max(1, len(modes))
    x = np.arange(len(metrics))
    for i, mode in enumerate(modes):
        values = [float(means.filter(pl.col("mode") == mode).get_column(m)[0]) for m in metrics]
        bars = ax.bar(x + (i - (len(modes) - 1) / 2) * width, values, width, label=mode,
                      color=_COLOURS.get(mode))
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=7, padding=1)
    ax.set_xticks(x, metrics)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("mean recall")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_recall_vs_cost(points: Sequence[tuple[str, float, dict[str, float]]], metrics: Sequence[str],
                        path: Path) -> None:
    """Each mode at its index cost (modes sharing one index are spread a little apart), one marker per k."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    markers = ["o", "s", "^", "D", "v"]
    span = max(1.0, max(c for _, c, _ in points))
    sharing: dict[float, list[str]] = {}
    for mode, cost, _ in points:
        sharing.setdefault(cost, []).append(mode)
    for mode, cost, recalls in points:
        group = sharing[cost]
        x = cost + (group.index(mode) - (len(group) - 1) / 2) * 0.07 * span
        values = [recalls[m] for m in metrics]
        ax.plot([x] * len(values), values, color=_COLOURS.get(mode), alpha=0.5, zorder=2)
        for j, value in enumerate(values):
            ax.scatter(x, value, color=_COLOURS.get(mode), marker=markers[j % len(markers)], s=42, zorder=3)
        ax.annotate(mode, (x, max(values)), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8,
                    color=_COLOURS.get(mode, "black"))
    handles = [ax.scatter([], [], color="black", marker=markers[j % len(markers)], label=m)
               for j, m in enumerate(metrics)]
    ax.legend(handles=handles, fontsize=8, loc="upper left")
    ax.set_xlim(-0.25 * span, 1.25 * span)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("language-model calls per passage to build the index")
    ax.set_ylabel("mean recall")
    ax.set_title("Recall against index cost")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_deletion(recall: dict, metric: str, path: Path) -> None:
    plt = _pyplot()
    modes = list(recall)
    series = [("intact", "before"), ("intact", "after"), ("deleted", "before"), ("deleted", "after")]
    colours = ["#2ca02c", "#98df8a", "#d62728", "#ff9896"]
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    width = 0.8 / len(series)
    x = np.arange(len(modes))
    for i, (group, phase) in enumerate(series):
        values = [recall[m].get(group, {}).get(phase, {}).get(metric, np.nan) for m in modes]
        bars = ax.bar(x + (i - 1.5) * width, values, width, color=colours[i],
                      label=f"evidence {group}, {phase} the deletion")
        ax.bar_label(bars, labels=[_fmt(v, 2) for v in values], fontsize=7, padding=1)
    ax.set_xticks(x, modes)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel(f"mean {metric}")
    ax.set_title(f"{metric}: questions whose evidence was deleted vs intact")
    ax.legend(fontsize=7, loc="upper left", ncols=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


# -- the report ---------------------------------------------------------------------------------


def _headline_metric(metrics: Sequence[str]) -> str:
    return "recall@5" if "recall@5" in metrics else metrics[len(metrics) // 2]


def index_cost_per_passage(run: Run, mode: str) -> float:
    cost = run.config.get("index_cost") or {}
    passages = cost.get("passages") or 0
    mode_config = (run.config.get("modes") or {}).get(mode, {})
    if not mode_config.get("graph", mode != DENSE) or not passages:
        return 0.0  # the dense baseline needs no extraction, only passage vectors
    return cost.get("extraction_calls", 0) / passages


def _principal_line(principal: dict) -> str:
    """Whom a run read as: the principal, its groups and the documents its view holds."""
    groups = ", ".join(f"`{g}`" for g in principal.get("groups") or []) or "no group"
    return f"{principal.get('principal')} ({groups}; {principal.get('documents')} documents)"


def write_report(run_dir: Path | str) -> Path:
    """Write ``report.md`` and its PNG plots into the run directory; returns the report's path."""
    run = load_run(run_dir)
    out_dir = run.path
    config = run.config
    metrics = run.metrics
    if not metrics:
        raise RunError(f"{run.path} has no recall columns to report")
    phase = main_phase(run)
    headline = _headline_metric(metrics)
    means = mean_table(run, phase, [*metrics, "retrieval_ms"])
    lines = [f"# Lightfoot evaluation: {config.get('kind')} run", ""]
    snapshot = (config.get("snapshots") or {}).get(phase, {})
    lines += _table(["", ""], [
        ["dataset", f"`{config.get('dataset')}`"],
        ["questions", f"`{config.get('questions')}` ({config.get('n_questions')} with gold documents)"],
        ["embedder", f"`{config.get('embedder')}`"],
        ["reranker", _reranker_line(config.get("reranker") or {})],
        ["snapshot", f"`{snapshot.get('snapshot_id')}` (store commit {snapshot.get('store_seq')})"],
        ["store fingerprint", f"`{snapshot.get('fingerprint')}`"],
        *([["read as", _principal_line(config["principal"])]] if config.get("principal") else []),
        ["created", config.get("created_at")],
        ["software", ", ".join(f"{k} {v}" for k, v in (config.get("software") or {}).items())],
    ])

    title_phase = " (before the deletion)" if phase == "before" else ""
    lines += [f"## Recall@k by mode{title_phase}", ""]
    lines += _table(["mode", "n", *metrics], [
        [row["mode"], row["n"], *[_fmt(row[m]) for m in metrics]] for row in means.iter_rows(named=True)
    ])
    lines += ["Modes:", ""]
    described = config.get("modes") or {}
    for name in run.modes:
        lines.append(f"- `{name}`: {described.get(name, {}).get('description', '')}")
    lines += ["", f"![recall@k by mode]({PLOT_RECALL})", ""]
    plot_recall_by_mode(means, metrics, out_dir / PLOT_RECALL, f"Recall@k by mode{title_phase}")

    lines += ["## Paired differences (bootstrap 95% intervals over questions)", ""]
    lines += _table(["comparison", "metric", "difference", "95% interval", "significant"],
                    significance_rows(run, phase, metrics))

    lines += ["## Recall against index cost", ""]
    cost = config.get("index_cost") or {}
    points = []
    rows = []
    for row in means.iter_rows(named=True):
        per_passage = index_cost_per_passage(run, row["mode"])
        points.append((row["mode"], per_passage, {m: float(row[m]) for m in metrics}))
        calls = round(per_passage * (cost.get("passages") or 0))
        rows.append([row["mode"], f"{per_passage:g}", f"{calls:,}", _fmt(row[headline])])
    lines += _table(["mode", "model calls per passage", "model calls to build", headline], rows)
    extractors = ", ".join(cost.get("extractors") or []) or "none"
    ledger_line = (f"the cost ledger holds {cost.get('ledger_calls', 0):,} extraction calls, "
                   f"{cost.get('ledger_tokens_in', 0):,}/{cost.get('ledger_tokens_out', 0):,} tokens in/out, "
                   f"${cost.get('ledger_cost_usd', 0.0):.4f}")
    lines += [f"The index holds {cost.get('passages', 0):,} passages, {cost.get('extraction_calls', 0):,} extracted "
              f"(extractors: {extractors}); {ledger_line}. Recorded extractions were model calls made when "
              "they were recorded; their tokens are not in the recording. Retrieval makes no model call in any "
              "mode; all graph modes share one index.", "", f"![recall against index cost]({PLOT_COST})", ""]
    plot_recall_vs_cost(points, metrics, out_dir / PLOT_COST)

    lines += ["## Retrieval latency", ""]
    latency = []
    frame = run.results.filter(pl.col("phase") == phase)
    for mode in run.modes:
        ms = frame.filter(pl.col("mode") == mode).get_column("retrieval_ms").to_numpy()
        latency.append([mode, _fmt(float(np.percentile(ms, 50)), 1), _fmt(float(np.percentile(ms, 95)), 1)])
    lines += _table(["mode", "p50 ms", "p95 ms"], latency)
    lines += ["Latency includes embedding the question (once per question, counted in every mode).", ""]

    lines += answers_section(run, phase)
    if run.kind == "deletion-audit":
        lines += deletion_section(run, metrics, headline, out_dir)
    else:
        lines += ["## Deletion", "", "This run has no deletion; `lightfoot eval-deletion` runs the deletion audit.", ""]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines))
    return path


def answers_section(run: Run, phase: str) -> list[str]:
    answers = run.config.get("answers")
    frame = run.results.filter(pl.col("phase") == phase)
    if not answers:
        return ["## Answers", "",
                "This run asked no answers (retrieval only; `lightfoot eval --answer` adds them).", ""]
    lines = ["## Answers", ""]
    rows = []
    for mode in run.modes:
        mine = frame.filter(pl.col("mode") == mode)
        asked = mine.filter(pl.col("answer_status") != "not asked")
        if asked.height == 0:
            continue
        scored = asked.filter(pl.col("em").is_not_null())
        rows.append([mode, asked.height, scored.height,
                     asked.filter(pl.col("answer_status").str.starts_with("failed")).height,
                     asked.filter(pl.col("answer_status").str.starts_with("skipped")).height,
                     _fmt(scored.get_column("em").mean() if scored.height else None),
                     _fmt(scored.get_column("f1").mean() if scored.height else None),
                     f"${float(asked.get_column('answer_cost_usd').fill_null(0.0).sum()):.4f}"])
    lines += _table(["mode", "asked", "answered", "failed", "skipped (budget)", "EM", "F1", "cost"], rows)
    lines += ["EM and F1 use the SQuAD normalisation against the answer and its aliases; failed and skipped "
              "questions are left out of the means and of the paired comparisons.", ""]
    compared = []
    answered_modes = [r[0] for r in rows]
    for a, b in headline_pairs(answered_modes):
        for metric in ("em", "f1"):
            a_scores = frame.filter(pl.col("mode") == a).select("qid", pl.col(metric).alias("score"))
            b_scores = frame.filter(pl.col("mode") == b).select("qid", pl.col(metric).alias("score"))
            both = a_scores.join(b_scores, on="qid", suffix="_b").drop_nulls()
            if both.height == 0:
                continue
            result = paired_bootstrap(both.get_column("score").to_numpy(), both.get_column("score_b").to_numpy())
            compared.append([f"{a} − {b}", metric.upper(), both.height, f"{result.difference:+.3f}",
                             f"[{result.low:+.3f}, {result.high:+.3f}]", "yes" if result.significant else "no"])
    if compared:
        lines += _table(["comparison", "metric", "questions", "difference", "95% interval", "significant"], compared)
    lines += [cost_line(answers), ""]
    deep = answers.get("deep")
    if deep:
        lines += [f"`hgmem` ran at most {deep['max_steps']} steps a question with {deep['passages']} passages a step "
                  f"and in its answer, ${deep['question_budget_usd']:g} a question; its steps are in "
                  f"`{deep['file']}` ({'with their text' if deep['traces'] else 'ids only'}).", ""]
    return lines


def cost_line(answers: dict) -> str:
    """What the answers cost, against the budget and the estimate made before the run."""
    spend, estimate = answers.get("spend") or {}, answers.get("estimate") or {}
    budget = answers.get("budget_usd")
    price_in, price_out, source = answers.get("prices") or [0.0, 0.0, "unpriced"]
    capped = f"budget ${budget:g}" if budget is not None else "no budget cap"
    if spend.get("stopped_by_budget"):
        capped += f", reached: {spend.get('skipped', 0)} calls skipped"
    return (f"**Cost**: {spend.get('calls', 0)} calls to `{answers.get('model')}` at {answers.get('endpoint')}, "
            f"{spend.get('tokens_in', 0):,} tokens in and {spend.get('tokens_out', 0):,} out, "
            f"${spend.get('cost_usd', 0.0):.4f} at ${price_in:g}/${price_out:g} per million tokens ({source}); "
            f"{capped}; estimated beforehand at ${estimate.get('cost_usd', 0.0):.4f} "
            f"(at most ${estimate.get('cost_usd_max', 0.0):.4f}).")


def deletion_section(run: Run, metrics: Sequence[str], headline: str, out_dir: Path) -> list[str]:
    d = run.deletion
    if d is None:
        return ["## Deletion audit", "", f"{run.path} is a deletion audit without its deletion.json.", ""]
    lines = ["## Deletion audit", ""]
    lines += _table(["", ""], [
        ["documents deleted", f"{d['deleted_docs']:,} of {d['documents']:,} (fraction {d['fraction']}, "
                              f"seed {d['seed']}); {d['passages_removed']:,} passages"],
        ["deletion time", f"{d['delete_seconds']:.3f} s"],
        ["model calls during the deletion", f"{d['model_calls']} (embedder calls: {d['embedder_calls']})"],
        ["fresh build of the survivors",
         f"{d['fresh_build_seconds']:.1f} s, {d['fresh_build_model_calls']} model calls"],
        ["fingerprint equal to the fresh build", "yes" if d["fingerprint_equal"] else
         f"**no**: tables differing {d['tables_differing']}"],
        ["rankings equal to the fresh build's", "yes, every mode and question" if d["rankings_equal_fresh"] else
         f"**no**: {len(d['rankings_differing_fresh'])} (mode, question) pairs differ"],
        ["rankings naming a deleted document after the deletion", str(len(d["leaks"]))],
        ["questions", f"{d['questions']['intact']} with intact evidence, "
                      f"{d['questions']['deleted']} with deleted evidence"],
    ])
    lines += ["### Recall by evidence group, before and after the deletion", ""]
    recall = {mode: d["recall"][mode] for mode in run.modes if mode in d["recall"]}  # in the run's order
    rows = []
    for mode, groups in recall.items():
        for group in ("intact", "deleted"):
            phases = groups.get(group)
            if not phases:
                continue
            for phase in ("before", "after", "fresh"):
                if phase in phases:
                    rows.append([mode, group, phase, phases[phase]["n"], *[_fmt(phases[phase][m]) for m in metrics]])
    lines += _table(["mode", "evidence", "phase", "n", *metrics], rows)
    lines += ["A question's evidence is *deleted* when any of its gold documents was deleted; recall after the "
              "deletion counts the deleted gold documents as missed. *fresh* is the same questions on a fresh "
              "build of the survivors.", ""]
    changes = []
    for mode in recall:
        for group in ("intact", "deleted"):
            before = run.results.filter((pl.col("phase") == "before") & (pl.col("mode") == mode)
                                        & (pl.col("evidence") == group)).select("qid", pl.col(headline).alias("score"))
            after = run.results.filter((pl.col("phase") == "after") & (pl.col("mode") == mode)
                                       & (pl.col("evidence") == group)).select("qid", pl.col(headline).alias("score"))
            both = after.join(before, on="qid", suffix="_b")
            if both.height == 0:
                continue
            result = paired_bootstrap(both.get_column("score").to_numpy(), both.get_column("score_b").to_numpy())
            changes.append([mode, group, both.height, f"{result.difference:+.3f}",
                            f"[{result.low:+.3f}, {result.high:+.3f}]", "yes" if result.significant else "no"])
    lines += [f"### Change in {headline} (after − before, paired bootstrap 95% intervals)", ""]
    lines += _table(["mode", "evidence", "questions", "change", "95% interval", "significant"], changes)
    plot_deletion(recall, headline, out_dir / PLOT_DELETION)
    lines += [f"![recall of evidence-deleted vs intact questions]({PLOT_DELETION})", ""]
    return lines
