"""The quickstart's outcome: ``QuickstartResult`` and the report that shows it, written once at the end.

``report.md`` (the before/after table with each kind's paired bootstrap interval of the gain,
the reward and EM plots, the wall time of every phase and the total at the moment of writing),
``report.json`` (the same numbers), ``reward.png`` and ``em.png``. The wall-time table and the
metric curves come from the recipes' shared pieces (``agentrl.recipes.phases.phase_time_table``,
``agentrl.recipes.curves``); the before/after table per kind of question (hop; arithmetic in the
two-tool profile, with each tool's calls per question) and the SFT summary are the quickstart's own.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.quickstart.demonstrations import ARITHMETIC_SOURCE, DATA_SOURCE
from agentrl.quickstart.profiles import Profile, profile_record
from agentrl.recipes.curves import metric_series
from agentrl.recipes.phases import phase_time_table

__all__ = ["QuickstartResult", "write_report"]

REWARD_METRIC = "reward/score/mean"  # mean score of the training rollouts, per PPO step
EM_METRIC = "val/{group}/em"  # greedy validation EM: group "all" or a data_source


@dataclass
class QuickstartResult:
    """What ``run_quickstart`` returns: the before/after evaluations, timings, SFT and PPO numbers."""

    out_dir: Path
    report: Path
    before: dict[str, Any]
    after: dict[str, Any]
    seconds: dict[str, float]
    total_seconds: float
    sft_examples: int
    sft_loss: list[float]
    metrics: list[dict[str, Any]]
    sft_shortcut_examples: int = 0  # of sft_examples, those that answer without finishing the search
    gains: dict[str, dict[str, float]] = field(default_factory=dict)  # paired EM after - before, per kind


def _plot(path: Path, series: dict[str, tuple[list[float], list[float]]], title: str, ylabel: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    for label, (xs, ys) in series.items():
        if xs:
            ax.plot(xs, ys, marker="o", markersize=3, label=label)
    ax.set_xlabel("PPO step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _load() -> str:
    """The 1/5/15-minute load averages, so a reader can judge the wall times."""
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def _plots(result: QuickstartResult, config: Any) -> list[Path]:
    """``reward.png`` (training reward) and ``em.png`` (validation EM, overall and per hop)."""
    out = result.out_dir
    reward = {"mean reward (training rollouts)": metric_series(result.metrics, REWARD_METRIC)}
    em_series = {"held-out EM (all)": metric_series(result.metrics, EM_METRIC.format(group="all"))}
    for hop in (1, 2):
        em_series[f"{hop}-hop"] = metric_series(
            result.metrics, EM_METRIC.format(group=DATA_SOURCE.format(hop=hop))
        )
    # absent from a run without arithmetic questions: an empty series is not drawn
    em_series["arithmetic"] = metric_series(result.metrics, EM_METRIC.format(group=ARITHMETIC_SOURCE))
    val_n = config.data.val_limit or "all"
    return [
        _plot(out / "reward.png", reward, "Reward during PPO", "reward"),
        _plot(out / "em.png", em_series, f"Greedy held-out EM during PPO ({val_n} questions)", "EM"),
    ]


def _tables(result: QuickstartResult) -> tuple[str, str]:
    """The before/after table and the wall-time table (markdown)."""

    def row(label: str, key: str) -> str:
        b, a = result.before.get(key), result.after.get(key)
        if b is None or a is None:
            return ""
        gain = result.gains.get(key)
        interval = f"[{gain['lo']:+.3f}, {gain['hi']:+.3f}]" if gain else "n/a"
        return (
            f"| {label} | {int(b['n'])} | {b['em']:.3f} | {a['em']:.3f} | {a['em'] - b['em']:+.3f} "
            f"| {interval} | {b['searches']:.2f} | {a['searches']:.2f} |"
        )

    table = "\n".join(
        filter(
            None,
            [
                "| questions | n | EM after SFT | EM after PPO | Δ EM | Δ EM 95% interval (paired) "
                "| searches/q after SFT | searches/q after PPO |",
                "|---|---:|---:|---:|---:|---:|---:|---:|",
                row("all held-out", "all"),
                row("single-hop", "hop1"),
                row("two-hop", "hop2"),
                row("arithmetic", "arithmetic"),
            ],
        )
    )
    calls = _calls_table(result)
    if calls:
        table += "\n\n" + calls
    timing = phase_time_table(
        result.seconds, result.total_seconds, "**total** (until this report was written)"
    )
    return table, timing


def _calls_table(result: QuickstartResult) -> str:
    """Each tool's calls per question, by kind of question, after SFT and after PPO (markdown); empty
    when the evaluation did not count them per tool (every profile but the two-tool one)."""
    tools = [k.removeprefix("calls/") for k in result.before.get("all", {}) if k.startswith("calls/")]
    if not tools:
        return ""
    labels = {"all": "all held-out", "hop1": "single-hop", "hop2": "two-hop", "arithmetic": "arithmetic"}
    header = " | ".join(f"{t} calls/q after SFT | {t} calls/q after PPO" for t in tools)
    lines = [f"| questions | {header} |", "|---|" + "---:|" * (2 * len(tools))]
    for key, label in labels.items():
        b, a = result.before.get(key), result.after.get(key)
        if b is not None and a is not None:
            cells = " | ".join(f"{b[f'calls/{t}']:.2f} | {a[f'calls/{t}']:.2f}" for t in tools)
            lines.append(f"| {label} | {cells} |")
    return "\n".join(lines)


def write_report(result: QuickstartResult, profile: Profile, config: Any) -> Path:
    """``report.md`` (table, plots, timings), ``report.json``, ``reward.png``, ``em.png``."""
    plots = _plots(result, config)
    table, timing = _tables(result)
    steps = int(result.metrics[-1]["step"]) if result.metrics else 0
    oracle_examples = result.sft_examples - result.sft_shortcut_examples
    text = f"""# agentrl quickstart report

Profile `{profile.name}`, seed {config.seed}, estimator `{config.algorithm.adv_estimator}`,
{steps} PPO steps of {config.data.train_batch_size} questions × n={config.actor.rollout.n}, on
{os.cpu_count()} CPU core(s), load average {_load()} when the report was written (other jobs share the
cores: wall times grow with the load). Greedy decoding on held-out questions the policy never trained on.

{table}

SFT warm start: {profile.sft_skill_steps} steps on the {oracle_examples} oracle
demonstrations (the skill: search, read, copy the answer), then {profile.sft_habit_steps} steps on those plus
{result.sft_shortcut_examples} shortcuts that answer at once with the name the question mentions (the habit
PPO has to unlearn: the SFT model searches only some of the time, and greedy decoding not at all);
{len(result.sft_loss)} steps in all, loss {result.sft_loss[0]:.3f} → {result.sft_loss[-1]:.3f}.

![reward](reward.png)

![EM](em.png)

## Wall time per phase

{timing}

Files: `ppo/metrics.jsonl` (every PPO metric per step), `sft_data.jsonl` (the demonstrations,
viewable with `python -m agentrl.agent.viewer`), `sft_model/` and `ppo/checkpoints/` (HF dirs).
"""
    result.report.write_text(text)
    payload = {
        "profile": profile_record(profile),
        "before": result.before,
        "after": result.after,
        "gains": result.gains,
        "seconds": result.seconds,
        "total_seconds": result.total_seconds,
        "sft_examples": result.sft_examples,
        "sft_loss": result.sft_loss,
        "plots": [str(p) for p in plots],
    }
    (result.out_dir / "report.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return result.report
