"""The real-data recipe's results block, read from a run's evaluation cells and training logs.

Reads ``OUT/eval/<cell>/`` (``metrics.json`` and the per-question records), ``OUT/sft/`` and
``OUT/rl_*/metrics.jsonl``; writes the markdown block of ``docs/results.md`` (table, paired
bootstrap gains, LoRA vs full) and the learning curves. A run's artefacts are large (checkpoints,
full trajectories) and live outside the repository; :func:`archive_run` keeps the small part
that the block needs (per-question scores without the trajectories, the metric logs, the phase
markers) in a directory that can be committed, so a later run's cells can be paired with these.
The logs are read, and their curves taken, with ``agentrl.recipes.curves`` as in the
quickstart's report; the rest (cells, paired gains, LoRA vs full timing) is this recipe's own.

Command line (archive a run, then render from the archive)::

    python -m agentrl.recipes.search_qa_report runs/search_qa --archive docs/results/search_qa \
        --doc docs/results.md --plot docs/assets/search_qa_curves.png
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.recipes.curves import metric_series, minutes_series, read_jsonl
from agentrl.recipes.search_qa_eval import CELLS, DATASETS

__all__ = [
    "BEGIN",
    "END",
    "SCORE_FIELDS",
    "archive_run",
    "main",
    "paired_gains",
    "plot_by_time",
    "plot_curves",
    "render_results",
    "results_rows",
    "rl_timing",
    "write_results",
]

SCORES_FILE = "scores.jsonl.gz"
# what a paired comparison or a re-rendered table reads per question; no question text, golds
# or trajectories, which belong to the datasets and the run
SCORE_FIELDS = (
    "dataset",
    "id",
    "em",
    "f1",
    "cover_em",
    "answered",
    "extracted",
    "num_searches",
    "num_turns",
    "response_tokens",
    "truncated",
)
RL_RUNS = ("rl_full", "rl_lora", "rl_dyn", "rl_turn")
PAIRS = (
    ("rl_full", "sft"),
    ("rl_lora", "sft"),
    ("rl_dyn", "sft"),
    ("rl_dyn", "rl_full"),
    ("rl_turn", "sft"),
    ("rl_turn", "rl_dyn"),
)
PAIRS += (("rl_full", "rag-bm25"), ("sft", "rag-bm25"))


def _records(cell_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """A cell's scored records (the header line has no ``em``) by (dataset, question id): the full
    predictions of a run, or the archived scores where the run is not at hand."""
    from agentrl.eval.store import PREDICTIONS_FILE

    full = cell_dir / PREDICTIONS_FILE
    lines = read_jsonl(full) if full.is_file() else read_jsonl(cell_dir / SCORES_FILE)
    return {(r["dataset"], str(r["id"])): r for r in lines if "em" in r}


def results_rows(out: Path) -> list[dict[str, Any]]:
    """One row per (dataset, cell) from the cells' ``metrics.json``."""
    rows = []
    for cell in CELLS:
        path = out / "eval" / cell / "metrics.json"
        if path.is_file():
            summary = json.loads(path.read_text())
            for name, m in summary["metrics"].items():
                rows.append({"dataset": name, "system": cell, **m})
    rows.sort(key=lambda r: DATASETS.index(r["dataset"]) if r["dataset"] in DATASETS else 99)
    return rows


def paired_gains(out: Path, a: str, b: str, metric: str = "em") -> dict[str, tuple[float, float, float, int]]:
    """Per dataset: ``metric`` of cell ``a`` minus cell ``b`` on the questions both scored, as
    (mean difference, 95% low, 95% high, n) from a paired bootstrap."""
    from agentrl.eval.stats import paired_bootstrap

    ra, rb = _records(out / "eval" / a), _records(out / "eval" / b)
    gains = {}
    for name in DATASETS:
        keys = sorted(k for k in ra if k[0] == name and k in rb)
        if keys:
            diff, lo, hi = paired_bootstrap([ra[k][metric] for k in keys], [rb[k][metric] for k in keys])
            gains[name] = (diff, lo, hi, len(keys))
    return gains


BEGIN, END = "<!-- trained:begin -->", "<!-- trained:end -->"


TIMING_COLUMNS = (  # (metric in the RL run's metrics.jsonl, column of the LoRA-vs-full table)
    ("timing_s/step", "s / step"),
    ("timing_s/gen", "rollout s"),
    ("timing_s/old_log_prob", "old log-prob s"),
    ("timing_s/update_actor", "update s"),
    ("throughput/tokens_per_s", "tokens / s"),
)


def rl_timing(out: Path, name: str) -> dict[str, float] | None:
    """Medians over the run's steps of each :data:`TIMING_COLUMNS` metric (a median, so the few
    steps that shared the cores with something else do not set the figure), the step count and
    the actor's peak resident memory; None before the run has a step."""
    steps = [m for m in read_jsonl(out / name / "metrics.jsonl") if "timing_s/step" in m]
    if not steps:
        return None
    timing = {"steps": float(len(steps))}
    for key, _ in TIMING_COLUMNS:
        values = [m[key] for m in steps if key in m]
        timing[key] = float(np.median(values)) if values else float("nan")
    rss = [m["actor/peak_rss_gib"] for m in steps if "actor/peak_rss_gib" in m]
    timing["actor/peak_rss_gib"] = max(rss) if rss else float("nan")
    return timing


def _timing_table(out: Path, rows: list[dict]) -> list[str]:
    timing = {name: rl_timing(out, name) for name in RL_RUNS}
    if not any(timing.values()):
        return []
    heads = [column for _, column in TIMING_COLUMNS]
    lines = [
        "",
        "| RL | steps | " + " | ".join(heads) + " | peak actor RSS GiB | NQ EM | HotpotQA EM |",
        "|---|" + "---:|" * (len(heads) + 4),
    ]
    by_cell = {(r["system"], r["dataset"]): r for r in rows}
    for name, t in timing.items():
        if t is None:
            continue
        figures = [t[key] for key, _ in TIMING_COLUMNS] + [t["actor/peak_rss_gib"]]
        figures += [by_cell.get((name, d), {}).get("em", float("nan")) for d in ("nq", "hotpotqa")]
        cells = " | ".join("–" if math.isnan(x) else f"{x:.3f}" if x < 1 else f"{x:.1f}" for x in figures)
        lines.append(f"| {name} | {int(t['steps'])} | {cells} |")
    lines.append("")
    lines.append(
        "Timings are medians over the steps (seconds; tokens / s counts prompt and response tokens)."
    )
    return lines


def render_results(out: Path) -> str:
    """The markdown block of the trained-model results: the table, the RL gains, LoRA vs full."""
    from agentrl.eval.report import markdown_table

    rows = results_rows(out)
    lines = [BEGIN, "", markdown_table(rows, ["dataset", "system"]) if rows else "(no cell evaluated yet)\n"]
    for a, b in PAIRS:
        if (out / "eval" / a).is_dir() and (out / "eval" / b).is_dir():
            gains = paired_gains(out, a, b)
            cells = ", ".join(
                f"{name} {d:+.3f} [{lo:+.3f}, {hi:+.3f}]" for name, (d, lo, hi, _) in gains.items()
            )
            lines.append(f"- EM of `{a}` − `{b}` (paired bootstrap, 95%): {cells}")
    lines += _timing_table(out, rows)
    lines += ["", END]
    return "\n".join(lines)


def write_results(out: Path, doc: Path) -> str:
    """Put :func:`render_results` between the doc's trained markers (added at the end if absent)."""
    block = render_results(out)
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Results\n"
    if BEGIN not in text:
        text = text.rstrip("\n") + f"\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    doc.write_text(head + block + rest.split(END, 1)[1], encoding="utf-8")
    return block


def _rolling_mean(values: list[float], window: int) -> list[float]:
    """Mean of the last ``window`` values at each position (fewer at the start)."""
    return [float(np.mean(values[max(0, i + 1 - window) : i + 1])) for i in range(len(values))]


def plot_curves(out: Path, path: Path, *, window: int = 4) -> Path | None:
    """Three panels: SFT loss per step; per RL run the training reward per step (faint) and its
    ``window``-step rolling mean; per RL run the validation EM and F1 (the validation split,
    never the held-out questions), on their own axis since they sit far below the training
    reward. None when nothing was trained yet."""
    sft = read_jsonl(out / "sft" / "sft_metrics.jsonl")
    runs = {name: read_jsonl(out / name / "metrics.jsonl") for name in RL_RUNS}
    if not sft and not any(runs.values()):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(14, 3.6))
    left.plot(*metric_series(sft, "loss"), marker=".")
    left.set(title="SFT warm start", xlabel="optimiser step", ylabel="NLL of model tokens")
    for (name, steps), color in zip(
        runs.items(), ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=True
    ):
        # the reward role's EM over every sample the step generated: under dynamic sampling the
        # batch's reward/score/mean covers only the kept groups
        x, reward = metric_series(steps, "reward/em")
        if x:
            middle.plot(x, reward, color=color, alpha=0.25, linewidth=1)
            middle.plot(x, _rolling_mean(reward, window), color=color, label=f"{name} ({window}-step mean)")
        x, em = metric_series(steps, "val/all/em")
        if x:
            right.plot(x, em, color=color, marker="o", label=f"{name}: EM")
            x, f1 = metric_series(steps, "val/all/f1")  # F1 moves where EM (1 question in 100) cannot
            right.plot(x, f1, color=color, marker="s", linestyle="--", label=f"{name}: F1")
    middle.set(title="GRPO: training reward (EM of the samples)", xlabel="step", ylabel="EM")
    right.set(title="GRPO: validation (greedy)", xlabel="step", ylabel="EM / F1")
    for ax in (middle, right):
        if ax.lines and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    return _save(fig, path)


def plot_by_time(out: Path, path: Path, runs: Sequence[str] = ("rl_full", "rl_dyn")) -> Path | None:
    """Validation EM and F1 of ``runs`` against training minutes, in one figure; None when no run
    has a validation."""
    logs = {name: read_jsonl(out / name / "metrics.jsonl") for name in runs}
    if not any(minutes_series(steps, "val/all/f1")[0] for steps in logs.values()):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    for (name, steps), color in zip(logs.items(), ("tab:blue", "tab:green", "tab:orange"), strict=False):
        for metric, style in (("val/all/f1", "-"), ("val/all/em", ":")):
            x, y = minutes_series(steps, metric)
            ax.plot(x, y, color=color, linestyle=style, marker="o", label=f"{name}: {metric.split('/')[-1]}")
    ax.set(title="GRPO validation (greedy) against training time", xlabel="training minutes (step time)")
    ax.set(ylabel="EM / F1")
    ax.legend(fontsize=8)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    """Write a report figure to ``path`` (its folder made) and release it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def archive_run(out: Path, dest: Path) -> list[Path]:
    """Copy the small part of run ``out`` that :func:`render_results` and :func:`plot_curves` read
    into ``dest`` (same layout): each evaluation cell's ``metrics.json`` and its per-question
    :data:`SCORE_FIELDS` (gzipped, with the settings header), the SFT and RL metric logs and the
    phase markers. A cell, log or marker already in ``dest`` is replaced only by one the run has,
    so archives of several sessions merge. Returns the files written."""
    from agentrl.eval.store import PREDICTIONS_FILE

    written = []

    def copy(src: Path) -> None:
        if src.is_file():
            target = dest / src.relative_to(out)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
            written.append(target)

    for cell in CELLS:
        cell_dir = out / "eval" / cell
        lines = read_jsonl(cell_dir / PREDICTIONS_FILE)
        if not lines or not (cell_dir / "metrics.json").is_file():
            continue
        copy(cell_dir / "metrics.json")
        target = dest / "eval" / cell / SCORES_FILE
        # mtime=0: the same scores give the same bytes, so a re-archive is no diff
        with target.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            for line in lines:
                row = {k: line[k] for k in SCORE_FIELDS if k in line} if "em" in line else line
                gz.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
        written.append(target)
    copy(out / "sft" / "sft_metrics.jsonl")
    for name in RL_RUNS:
        copy(out / name / "metrics.jsonl")
    for marker in sorted((out / "phases").glob("*.json")):
        copy(marker)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the recipe's output directory (OUT)")
    parser.add_argument("--archive", type=Path, help="merge the run's small files here, then render from it")
    parser.add_argument("--doc", type=Path, help="write the results block into this markdown file")
    parser.add_argument("--plot", type=Path, help="write the learning curves to this image")
    parser.add_argument("--time-plot", type=Path, help="write the RL runs' validation by training time here")
    args = parser.parse_args(argv)
    source = args.run
    if args.archive is not None:
        print(f"archived {len(archive_run(args.run, args.archive))} files into {args.archive}")
        source = args.archive
    block = write_results(source, args.doc) if args.doc else render_results(source)
    if args.plot and plot_curves(source, args.plot):
        print(f"curves: {args.plot}")
    if args.time_plot and plot_by_time(source, args.time_plot):
        print(f"validation by training time: {args.time_plot}")
    if not args.doc:
        print(block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
