"""The real-data recipe's evaluation: every model of the run on the held-out sets, one rule.

Cells (each one ``agentrl.eval.evaluate`` call, resumable, under ``OUT/eval/<cell>/``):

============  ==================  ===========  ==================================
cell          model               mode         retriever
============  ==================  ===========  ==================================
direct        starting model      direct       –
rag-bm25      starting model      rag          BM25 top-3
rag-dense     starting model      rag          dense top-3 (MiniLM + faiss)
sft           after SFT           agent        BM25 top-3
rl_full       after SFT + GRPO    agent        BM25 top-3
rl_lora       after SFT + GRPO    agent        BM25 top-3 (LoRA adapters, merged)
============  ==================  ===========  ==================================

Every cell scores its records with the answer rule ``tag-or-first-line``
(``agentrl.eval.extraction``), greedy decoding, the same budgets. The RL gain is a paired
bootstrap over the same questions (``agentrl.eval.stats.paired_bootstrap``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CELLS",
    "eval_settings",
    "evaluate_cells",
    "paired_gains",
    "plot_curves",
    "render_results",
    "rl_timing",
    "results_rows",
    "write_results",
]

CELLS: dict[str, tuple[str, str, str | None]] = {  # cell -> (phase whose model, mode, backend)
    "direct": ("model", "direct", None),
    "rag-bm25": ("model", "rag", "bm25"),
    "rag-dense": ("model", "rag", "dense"),
    "sft": ("sft", "agent", "bm25"),
    "rl_full": ("rl_full", "agent", "bm25"),
    "rl_lora": ("rl_lora", "agent", "bm25"),
}
DATASETS = ("nq", "hotpotqa", "triviaqa", "popqa")


def eval_settings(**overrides: Any) -> Any:
    """The evaluation settings of every cell (the RL rollout's budgets, greedy)."""
    from agentrl.eval import EvalSettings

    values = {
        "topk": 3,
        "max_turns": 2,
        "max_tokens_per_turn": 64,
        "max_obs_length": 512,
        "max_prompt_length": 2048,
        "max_response_length": 1280,
        "batch_size": 125,
        "answer_rule": "tag-or-first-line",
    }
    return EvalSettings(**(values | overrides))


def evaluate_cells(
    out: Path,
    models: Mapping[str, str],
    index: str,
    cells: Sequence[str],
    *,
    engine: str = "vllm",
    settings_overrides: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Run (or resume) ``cells`` whose model exists in ``models`` (phase -> model dir)."""
    from agentrl.eval import DatasetSpec, evaluate
    from retriever.process import RetrieverProcess

    datasets = [
        DatasetSpec(name, str(out / "data" / f"heldout_{name}.jsonl"))
        for name in DATASETS
        if (out / "data" / f"heldout_{name}.jsonl").is_file()
    ]
    settings = eval_settings(**(settings_overrides or {}))
    servers: dict[str, Any] = {}
    done: dict[str, Path] = {}
    try:
        for cell in cells:
            phase, mode, backend = CELLS[cell]
            if phase not in models:
                print(f"[eval] {cell}: no model yet (phase {phase} not run)")
                continue
            url = None
            if backend is not None:
                if backend not in servers:
                    servers[backend] = RetrieverProcess(
                        index, extra_args=("--backend", backend), log_path=out / f"retriever-{backend}.log"
                    ).start()
                url = servers[backend].retrieve_url
            print(f"[eval] {cell}: {mode} with {models[phase]}", flush=True)
            evaluate(
                models[phase],
                None,
                datasets,
                mode,
                url,
                settings=settings,
                out_dir=out / "eval" / cell,
                engine=engine,
                engine_kwargs={"max_batch_size": 128},
                model_name=f"{cell}:{Path(models[phase]).name}",
                corpus="wiki_mini" if backend else None,
            )
            done[cell] = out / "eval" / cell
    finally:
        for server in servers.values():
            server.stop()
    return done


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _records(cell_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """A cell's scored records (the header line has no ``em``) by (dataset, question id)."""
    from agentrl.eval.store import PREDICTIONS_FILE

    return {(r["dataset"], str(r["id"])): r for r in _jsonl(cell_dir / PREDICTIONS_FILE) if "em" in r}


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
    steps = [m for m in _jsonl(out / name / "metrics.jsonl") if "timing_s/step" in m]
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
    timing = {name: rl_timing(out, name) for name in ("rl_full", "rl_lora")}
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
    for a, b in (("rl_full", "sft"), ("rl_lora", "sft"), ("rl_full", "rag-bm25"), ("sft", "rag-bm25")):
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


def plot_curves(out: Path, path: Path) -> Path | None:
    """SFT loss per step; per RL run the training reward per step and the validation EM and F1
    (the validation split, never the held-out questions). None when nothing was trained yet."""
    sft = _jsonl(out / "sft" / "sft_metrics.jsonl")
    runs = {name: _jsonl(out / name / "metrics.jsonl") for name in ("rl_full", "rl_lora")}
    if not sft and not any(runs.values()):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot([m["step"] for m in sft], [m["loss"] for m in sft], marker=".")
    left.set(title="SFT warm start", xlabel="optimiser step", ylabel="NLL of model tokens")
    for (name, steps), color in zip(runs.items(), ("tab:blue", "tab:orange"), strict=True):
        train = [m for m in steps if "reward/score/mean" in m]
        val = [m for m in steps if "val/all/em" in m]
        if train:
            right.plot(
                [m["step"] for m in train],
                [m["reward/score/mean"] for m in train],
                color=color,
                alpha=0.5,
                label=f"{name}: training reward",
            )
        if val:
            right.plot(
                [m["step"] for m in val],
                [m["val/all/em"] for m in val],
                color=color,
                marker="o",
                label=f"{name}: validation EM",
            )
            right.plot(  # F1 moves where EM, one question in a hundred, cannot show it
                [m["step"] for m in val],
                [m["val/all/f1"] for m in val],
                color=color,
                marker="s",
                linestyle="--",
                label=f"{name}: validation F1",
            )
    right.set(title="GRPO", xlabel="step", ylabel="EM / F1")
    if right.lines:
        right.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
