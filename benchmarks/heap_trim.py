"""Resident memory of an actor across CPU updates, with and without handing the freed heap back.

    python -m benchmarks.heap_trim [--rows 8] [--steps 8] [--model-cache DIR]

The real SmolLM2-135M-Instruct in an ``ActorWorker`` (no Ray) with the search_qa recipe's
actor settings (``benchmarks/common/recipe_actor.py``, as in ``lora_vs_full``) updates on
search-agent-shaped batches whose size changes every step (``rows/2`` to ``rows`` trajectories,
seeded), as a real run's do. Each mode runs in a process of its own: the baseline with
``release_free_heap`` switched off (the worker before it), then as shipped, where every update
ends with glibc's ``malloc_trim``. It prints, per step, the resident memory after the update,
and at the end the mean resident GiB between updates (what the rollout that follows has to live
with), the growth per step after the first two and the seconds the trim takes, each against the
baseline.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common.models import smollm2_model_dir
from benchmarks.common.modes import report_figures, run_modes

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def run_mode(model_dir: Path, trim: bool, rows: int, steps: int) -> dict[str, list[float]]:
    import torch

    import agentrl.workers.base as base
    from benchmarks.common.recipe_actor import actor_worker, search_batch

    # replaced where the update looks it up: the name workers.base imports from workers.os_memory
    shipped = base.release_free_heap
    trim_seconds: list[float] = []

    def timed() -> bool:
        start = time.perf_counter()
        done = shipped()
        trim_seconds.append(time.perf_counter() - start)
        return done

    base.release_free_heap = timed if trim else (lambda: False)  # the baseline: no trim
    worker = actor_worker(model_dir, 0, rows)
    sizes = torch.Generator().manual_seed(1)
    figures: dict[str, list[float]] = {"rss": [], "update": [], "trim": trim_seconds}
    for step in range(steps):
        n = int(torch.randint(rows // 2, rows + 1, (1,), generator=sizes))
        batch = search_batch(worker.model.config.vocab_size, n, seed=100 + step)
        start = time.perf_counter()
        metrics = worker.update_actor(batch)
        figures["update"].append(time.perf_counter() - start)
        figures["rss"].append(metrics["actor/rss_gib"])
        print(
            f"  {'trim' if trim else 'no trim'} step {step + 1}/{steps}: {n} trajectories, "
            f"{int(batch['attention_mask'].sum())} tokens, update {figures['update'][-1]:.1f} s, "
            f"rss after it {figures['rss'][-1]:.2f} GiB",
            flush=True,
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8, help="most trajectories a step")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--model-cache", default=None, help="where the imported SmolLM2 directory is kept")
    parser.add_argument("--one", choices=["trim", "no-trim"], default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.one is not None:  # one mode in a fresh process, so its memory is its own
        report_figures(run_mode(Path(args.model_cache), args.one == "trim", args.rows, args.steps))
        return
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = smollm2_model_dir(args.model_cache, tmp)
        shared = ["--model-cache", str(model_dir), "--rows", str(args.rows), "--steps", str(args.steps)]
        runs = run_modes(__spec__.name, [(mode, ["--one", mode, *shared]) for mode in ("no-trim", "trim")])

    def summary(mode: str) -> tuple[float, float, float, float, float]:
        rss, update = runs[mode]["rss"], runs[mode]["update"]
        growth = (rss[-1] - rss[1]) / (len(rss) - 2) if len(rss) > 2 else float("nan")
        trim = statistics.median(runs[mode]["trim"]) if runs[mode]["trim"] else 0.0
        return statistics.mean(rss), growth, statistics.median(update), statistics.mean(update), trim

    base_rss, _, _, base_mean, _ = summary("no-trim")
    print(
        f"\n{'mode':<10}{'mean rss GiB':>14}{'vs base':>9}{'+GiB/step':>11}"
        f"{'update s median':>17}{'mean':>7}{'vs base':>9}{'trim s':>8}"
    )
    for mode in runs:
        rss, growth, median, mean, trim = summary(mode)
        print(
            f"{mode:<10}{rss:>14.2f}{rss / base_rss:>8.2f}x{growth:>11.3f}"
            f"{median:>17.1f}{mean:>7.1f}{base_mean / mean:>8.2f}x{trim:>8.3f}"
        )


if __name__ == "__main__":
    main()
