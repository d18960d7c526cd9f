"""GRPO with and without dynamic sampling on the quickstart world: validation EM against training time.

    python -m benchmarks.dynamic_sampling [--quickstart runs/quickstart] [--minutes 4] [--target-em 0.4]

Both runs start from the quickstart's SFT model (the quickstart is run first when
``--quickstart`` holds none), with the same seed, the quickstart's rollout and the ``grpo``
preset, and the same wall-time budget (``trainer.time_budget_minutes``); they validate greedily
on the same 96 held-out questions every ``--test-freq`` steps. The baseline trains on whatever
each step draws; the other drops the groups whose samples tie and draws more prompts
(``algorithm.dynamic_sampling``). Printed and written to ``--json``: each run's validation
curve against its cumulative step time (validation excluded: both pay it per validation, not
per step), the steps and minutes to reach ``--target-em``, the EM at the budget, the tied-group
share and rounds per step; both runs' EM at the training minutes the shorter one reached; the ratio of
minutes-to-target baseline / dynamic. ``--plot`` draws
both curves.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

MODES = {
    "baseline": ["algorithm.dynamic_sampling.enable=false"],
    "dynamic": ["algorithm.dynamic_sampling.enable=true", "algorithm.dynamic_sampling.max_rounds=4"],
}


def quickstart_dir(path: Path, seed: int) -> Path:
    """A quickstart output with its world, index and SFT model; run the quickstart if it lacks one."""
    if not (path / "sft_model" / "config.json").is_file():
        from agentrl.quickstart import run_quickstart

        run_quickstart(path, seed=seed)
    return path


def grpo_config(
    qs: Path, run_dir: Path, url: str, minutes: float, test_freq: int, seed: int, mode: str
) -> Any:
    """The quickstart's GRPO config (its profile's overrides on the ``grpo`` preset) from its SFT model."""
    from agentrl.config import load_config
    from agentrl.quickstart import FULL
    from agentrl.quickstart.phases import WorldFiles, ppo_overrides

    files = WorldFiles(qs / "world" / "corpus.jsonl", qs / "train.jsonl", qs / "test.jsonl")
    overrides = ppo_overrides(FULL, run_dir, qs / "sft_model", files, url, [], seed)
    overrides += [
        f"trainer.run_dir={run_dir}",
        "trainer.total_steps=10000",
        f"trainer.time_budget_minutes={minutes}",
        f"trainer.test_freq={test_freq}",
        "trainer.logger=[jsonl]",
        *MODES[mode],
    ]
    return load_config("grpo", overrides)


def curve(metrics: list[dict[str, Any]]) -> list[dict[str, float]]:
    """(step, cumulative step minutes, validation EM) at each validation."""
    from agentrl.recipes.curves import metric_series, minutes_series

    steps, em = metric_series(metrics, "val/all/em")
    minutes, _ = minutes_series(metrics, "val/all/em")
    return [
        {"step": int(s), "minutes": round(m, 3), "em": e} for s, m, e in zip(steps, minutes, em, strict=True)
    ]


def em_at(points: list[dict[str, float]], minutes: float) -> float | None:
    """The last validation EM at or before ``minutes`` of training."""
    before = [p["em"] for p in points if p["minutes"] <= minutes]
    return before[-1] if before else None


def summary(metrics: list[dict[str, Any]], target: float) -> dict[str, Any]:
    steps = [row for row in metrics if "timing_s/step" in row]
    if not steps:
        raise SystemExit("a run logged no training step: raise --minutes")
    points = curve(metrics)
    reached = next((p for p in points if p["em"] >= target), None)
    mean = lambda key: sum(r.get(key, 0.0) for r in steps) / max(len(steps), 1)  # noqa: E731
    return {
        "steps": len(steps),
        "train_minutes": round(sum(r["timing_s/step"] for r in steps) / 60, 2),
        "seconds_per_step": round(mean("timing_s/step"), 2),
        "final_em": points[-1]["em"] if points else None,
        "best_em": max((p["em"] for p in points), default=None),
        "steps_to_target": reached["step"] if reached else None,
        "minutes_to_target": reached["minutes"] if reached else None,
        "tied_group_share": round(mean("signal/tied_group_share"), 3),
        "rounds_per_step": round(mean("dynamic_sampling/rounds"), 2)
        if "dynamic_sampling/rounds" in steps[0]
        else 1.0,
        "curve": points,
    }


def run_mode(qs: Path, out: Path, url: str, args: argparse.Namespace, mode: str) -> dict[str, Any]:
    import ray

    from agentrl.recipes.curves import read_jsonl
    from agentrl.trainer.supervisor import train_to_policy

    run_dir = out / mode
    shutil.rmtree(run_dir, ignore_errors=True)  # the metrics log appends: one run per directory
    config = grpo_config(qs, run_dir, url, args.minutes, args.test_freq, args.seed, mode)
    try:
        train_to_policy(config)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    return summary(read_jsonl(run_dir / "metrics.jsonl"), args.target_em)


def plot(results: dict[str, dict[str, Any]], target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for mode, figures in results.items():
        xs = [p["minutes"] for p in figures["curve"]]
        ax.plot(xs, [p["em"] for p in figures["curve"]], marker="o", label=mode)
    ax.axhline(target, color="grey", linestyle=":", label=f"target EM {target}")
    ax.set(xlabel="training minutes (step time, validation excluded)", ylabel="validation EM (greedy)")
    ax.set_title("GRPO on the quickstart world: dynamic sampling vs not")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quickstart", default="runs/quickstart", help="a quickstart output dir (made if missing)"
    )
    p.add_argument("--out", default="runs/bench_dynamic_sampling")
    p.add_argument("--minutes", type=float, default=4.0, help="each run's wall-time budget")
    p.add_argument("--test-freq", type=int, default=2)
    p.add_argument("--target-em", type=float, default=0.4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None)
    args = p.parse_args(argv)

    from retriever.process import RetrieverProcess

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("AGENTRL_TORCH_THREADS", str(os.cpu_count() or 1))
    qs, out = quickstart_dir(Path(args.quickstart), args.seed), Path(args.out)
    server = RetrieverProcess(qs / "index", log_path=out / "retriever.log").start()
    try:
        results = {mode: run_mode(qs, out, server.retrieve_url, args, mode) for mode in MODES}
    finally:
        server.stop()
    print(f"\nGRPO on the quickstart world, {args.minutes} min budget each, target EM {args.target_em}")
    columns = ["steps", "seconds_per_step", "tied_group_share", "rounds_per_step"]
    columns += ["steps_to_target", "minutes_to_target", "final_em", "best_em"]
    print("| run | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for mode, figures in results.items():
        print(f"| {mode} | " + " | ".join(str(figures[c]) for c in columns) + " |")
    # both at the training minutes the shorter run reached (validation time is not in them)
    common = min(results[m]["train_minutes"] for m in MODES)
    at_common = {m: em_at(results[m]["curve"], common) for m in MODES}
    print(f"validation EM at {common} training minutes: {at_common}")
    base, dyn = results["baseline"]["minutes_to_target"], results["dynamic"]["minutes_to_target"]
    ratio = round(base / dyn, 2) if base and dyn else None
    print(f"minutes to target EM, baseline / dynamic: {ratio}  (None: a run did not reach it)")
    results["ratio_minutes_to_target"] = ratio  # type: ignore[assignment]
    results["em_at_common_minutes"] = {"minutes": common, **at_common}  # type: ignore[assignment]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    if args.plot:
        plot({m: results[m] for m in MODES}, args.target_em, Path(args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
