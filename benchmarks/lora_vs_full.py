"""LoRA vs full fine-tuning: the actor's share of an RL step on SmolLM2-135M, at the recipe's shape.

    python -m benchmarks.lora_vs_full [--rows 16] [--steps 4] [--rank 16] [--model-cache DIR]

The real SmolLM2-135M-Instruct (imported once from the pip-shipped GGUF into ``--model-cache``)
in an ``ActorWorker`` driven directly (no Ray), with the search_qa recipe's actor settings: bf16
autocast over fp32 weights, Dr. GRPO aggregation, mini-batch 16, micro-batch 4. The batch is
search-agent shaped: a prompt, a model turn that searches, three retrieved passages, an answer
turn (a quarter of the rows answer without searching), seeded. For each mode the same run
measures, per step: the no-grad old-log-prob pass, the update (forward, backward, AdamW step),
exporting the weights the rollout engine would receive (LoRA: merged), and the process's
resident memory after the step; each mode runs in a process of its own. It prints medians over
the steps after the first (a warm-up), each mode's step time against full fine-tuning with the
old-log-prob pass (the baseline, what the recipe ran until ``actor.skip_old_log_prob``), the
peak resident memory and its growth per step after the warm-up.
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
from benchmarks.common.recipe_actor import actor_worker, search_batch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def export_weights(worker) -> float:
    """Seconds to produce every tensor the rollout engine would receive (copied, as a sync does)."""
    from agentrl.models.export import plain_weights

    start = time.perf_counter()
    for _, tensor in plain_weights(worker.model, lora=worker.lora):
        tensor.detach().to("cpu", copy=True)
    return time.perf_counter() - start


def measure(model_dir: Path, rank: int, rows: int, steps: int) -> dict[str, list[float]]:
    from agentrl.workers.os_memory import process_memory_gib

    worker = actor_worker(model_dir, rank, rows)
    trainable = sum(p.numel() for p in worker.model.parameters() if p.requires_grad)
    figures: dict[str, list[float]] = {"old_log_prob": [], "update": [], "export": [], "rss": []}
    for step in range(steps):
        batch = search_batch(worker.model.config.vocab_size, rows, seed=step)
        start = time.perf_counter()
        worker.compute_log_prob(batch)  # timed only: the update below takes π_old from its own forward
        figures["old_log_prob"].append(time.perf_counter() - start)
        start = time.perf_counter()
        worker.update_actor(batch)
        figures["update"].append(time.perf_counter() - start)
        figures["export"].append(export_weights(worker))
        figures["rss"].append(process_memory_gib()["rss_gib"])
        tokens = int(batch["attention_mask"].sum())
        print(
            f"  {'lora r=' + str(rank) if rank else 'full'} step {step + 1}/{steps}: {tokens} tokens, "
            f"old log-prob {figures['old_log_prob'][-1]:.1f} s, update {figures['update'][-1]:.1f} s, "
            f"export {figures['export'][-1]:.2f} s, rss {figures['rss'][-1]:.2f} GiB",
            flush=True,
        )
    figures["trainable"] = [float(trainable)]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16, help="trajectories a step (the recipe: 4 x 4)")
    parser.add_argument("--steps", type=int, default=4, help="steps per mode; the first is a warm-up")
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank (alpha = 2 x rank, as the recipe)")
    parser.add_argument("--model-cache", default=None, help="where the imported SmolLM2 directory is kept")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # a mode's own process
    args = parser.parse_args()

    import torch

    if args.one is not None:  # one mode in a fresh process, so its memory figures are its own
        report_figures(measure(Path(args.model_cache), args.one, args.rows, args.steps))
        return
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = smollm2_model_dir(args.model_cache, tmp)
        threads = torch.get_num_threads()
        print(f"SmolLM2-135M-Instruct, {args.rows} trajectories a step, torch threads {threads}", flush=True)
        shared = ["--model-cache", str(model_dir), "--rows", str(args.rows), "--steps", str(args.steps)]
        ranks = {"full": 0, "lora": args.rank}
        runs = run_modes(
            __spec__.name, [(name, ["--one", str(rank), *shared]) for name, rank in ranks.items()]
        )

    def median(name: str, key: str) -> float:
        values = runs[name][key][1:] or runs[name][key]
        return statistics.median(values)

    baseline = median("full", "old_log_prob") + median("full", "update") + median("full", "export")
    print(f"\nmedians over steps 2-{args.steps} (seconds); step = the actor's share of an RL step")
    heads = f"{'trainable':>12}{'old lp':>9}{'update':>9}{'export':>9}{'step':>9}{'vs base':>9}"
    print(f"{'mode':<34}{heads}{'rss GiB':>9}{'+GiB/step':>11}")
    for name in runs:
        old, update, export = (median(name, key) for key in ("old_log_prob", "update", "export"))
        rss = runs[name]["rss"]
        growth = (rss[-1] - rss[1]) / (len(rss) - 2) if len(rss) > 2 else float("nan")  # after the warm-up
        label = "full fine-tuning" if name == "full" else f"LoRA r={args.rank}"
        trainable = f"{runs[name]['trainable'][0] / 1e6:.2f}M"
        for suffix, step in (
            (" + old-log-prob pass", old + update + export),
            (", skip_old_log_prob", update + export),
        ):
            print(
                f"{label + suffix:<34}{trainable:>12}{old if 'pass' in suffix else 0.0:>9.1f}{update:>9.1f}"
                f"{export:>9.2f}{step:>9.1f}{baseline / step:>8.2f}x{max(rss):>9.2f}{growth:>11.3f}"
            )


if __name__ == "__main__":
    main()
