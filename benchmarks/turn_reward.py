"""PPO on the quickstart world with and without a reward for each search that finds the answer.

    python -m benchmarks.turn_reward [--quickstart runs/quickstart] [--seeds 0 1 2] [--search-hit 0.2]

Every run starts from the quickstart's SFT model with the quickstart's own PPO config (its
profile's overrides on the ``ppo`` preset), for ``--steps`` steps, validating greedily on the
same 96 held-out questions every ``--test-freq`` steps. The baseline's reward is the EM outcome
alone; the other adds ``reward.turn.search_hit`` (each turn whose search results hold a
gold answer earns it on that turn's last token: ``rewards/turns.py``). Each seed (``seed``: the
rollout's sampling streams and the data order; the world and the SFT model are the
quickstart's) runs both. Printed and written to ``--json``: per run the steps to the first
validation at or above ``--target-em``, the final and best EM, searches per training trajectory
(first and last step) and per validation question; per seed the difference in steps to target
(with the turn reward minus without); ``--plot`` draws every curve.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from benchmarks.dynamic_sampling import curve, quickstart_dir

ARMS = ("outcome", "outcome+search_hit")


def ppo_config(qs: Path, run_dir: Path, url: str, args: argparse.Namespace, seed: int, arm: str) -> Any:
    """The quickstart's PPO config from its SFT model, with the arm's reward and this seed."""
    from agentrl.config import load_config
    from agentrl.quickstart import FULL
    from agentrl.quickstart.phases import WorldFiles, ppo_overrides

    files = WorldFiles(qs / "world" / "corpus.jsonl", qs / "train.jsonl", qs / "test.jsonl")
    overrides = ppo_overrides(FULL, run_dir, qs / "sft_model", files, url, [], seed)
    overrides += [
        f"trainer.run_dir={run_dir}",
        f"trainer.test_freq={args.test_freq}",
        f"trainer.total_steps={args.steps}",
        "trainer.logger=[jsonl]",
        f"reward.turn.search_hit={args.search_hit if arm != 'outcome' else 0.0}",
    ]
    return load_config("ppo", overrides)


def summary(metrics: list[dict[str, Any]], target: float) -> dict[str, Any]:
    steps = [row for row in metrics if "timing_s/step" in row]
    points = curve(metrics)
    reached = next((p for p in points if p["em"] >= target), None)
    searches = [row.get("rollout/tool_calls/search", 0.0) for row in steps]
    vals = [row for row in metrics if "val/all/searches" in row]
    return {
        "steps": len(steps),
        "seconds_per_step": round(sum(r["timing_s/step"] for r in steps) / max(len(steps), 1), 2),
        "steps_to_target": reached["step"] if reached else None,
        "final_em": points[-1]["em"] if points else None,
        "best_em": max((p["em"] for p in points), default=None),
        "train_searches_first_last": [round(searches[0], 2), round(searches[-1], 2)] if searches else None,
        "val_searches_last": round(vals[-1]["val/all/searches"], 2) if vals else None,
        "curve": points,
    }


def run(qs: Path, out: Path, url: str, args: argparse.Namespace, seed: int, arm: str) -> dict[str, Any]:
    import ray

    from agentrl.recipes.curves import read_jsonl
    from agentrl.trainer.supervisor import train_to_policy

    run_dir = out / f"{arm}_s{seed}"
    done = run_dir / "summary.json"
    if done.is_file():  # resumable: a finished run is read back, not trained again
        return json.loads(done.read_text())
    shutil.rmtree(run_dir, ignore_errors=True)  # the metrics log appends: one run per directory
    try:
        train_to_policy(ppo_config(qs, run_dir, url, args, seed, arm))
    finally:
        if ray.is_initialized():
            ray.shutdown()
    figures = summary(read_jsonl(run_dir / "metrics.jsonl"), args.target_em)
    done.write_text(json.dumps(figures) + "\n")
    return figures


def plot(results: dict[str, dict[str, Any]], target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    seeds = sorted({name.rsplit("_s", 1)[1] for name in results})
    for name, figures in results.items():
        arm, seed = name.rsplit("_s", 1)
        style = "-" if arm == ARMS[0] else "--"  # one colour per seed, one line style per arm
        color = f"C{seeds.index(seed)}"
        xs, ys = [p["step"] for p in figures["curve"]], [p["em"] for p in figures["curve"]]
        ax.plot(xs, ys, style, color=color, label=f"{arm}, seed {seed}")
    ax.axhline(target, color="grey", linestyle=":", label=f"target EM {target}")
    ax.set(xlabel="PPO step", ylabel="validation EM (greedy)")
    ax.set_title("PPO, quickstart world: with and without a search reward", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quickstart", default="runs/quickstart", help="a quickstart output dir (made if missing)"
    )
    p.add_argument("--out", default="runs/bench_turn_reward")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--search-hit", type=float, default=0.2)
    p.add_argument("--test-freq", type=int, default=4)
    p.add_argument("--steps", type=int, default=40, help="PPO steps a run takes (the quickstart's: 40)")
    p.add_argument("--target-em", type=float, default=0.55)
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None)
    args = p.parse_args(argv)

    from retriever.process import RetrieverProcess

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("AGENTRL_TORCH_THREADS", str(os.cpu_count() or 1))
    qs, out = quickstart_dir(Path(args.quickstart), 0), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    server = RetrieverProcess(qs / "index", log_path=out / "retriever.log").start()
    results: dict[str, dict[str, Any]] = {}
    try:
        for seed in args.seeds:
            for arm in ARMS:
                results[f"{arm}_s{seed}"] = run(qs, out, server.retrieve_url, args, seed, arm)
    finally:
        server.stop()
    print(f"\nPPO on the quickstart world, search_hit {args.search_hit}, target EM {args.target_em}")
    columns = ["steps", "seconds_per_step", "steps_to_target", "final_em", "best_em"]
    columns += ["train_searches_first_last", "val_searches_last"]
    print("| run | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name, figures in results.items():
        print(f"| {name} | " + " | ".join(str(figures[c]) for c in columns) + " |")
    differences = {}
    for seed in args.seeds:
        base, hit = (results[f"{arm}_s{seed}"]["steps_to_target"] for arm in ARMS)
        differences[seed] = hit - base if base is not None and hit is not None else None
    print(
        f"steps to target, with the search reward minus without, per seed: {differences}  (None: not reached)"
    )
    results["steps_to_target_difference"] = differences  # type: ignore[assignment]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    if args.plot:
        plot({k: v for k, v in results.items() if "curve" in v}, args.target_em, Path(args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
