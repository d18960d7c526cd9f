"""Trainer overhead: one actor update's wall time vs a raw forward + backward of the same tokens.

    python -m benchmarks.trainer_overhead [--repeats 5] [--hidden 256] [--layers 4]

Both sides run the same model on the same micro-batches (the update's own cut of a batch of
search-agent-shaped trajectories) and end with one AdamW step. The raw side is the least a
trainer must do: ``model(...)``, log-softmax of the response logits, gather, a masked mean,
``backward``, ``step``. The update side is ``ActorWorker.update_actor``: the trimmed and
memory-lean log-prob pass, the clipped PPO loss, entropy and KL metrics, the weighted
accumulation and the gradient-norm checks. The figure is the ratio of median wall times,
measured in one run; the sharded-training issue's target is <= 1.15.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from agentrl.core.masked import masked_mean
from agentrl.models.forward import micro_batches
from agentrl.models.tiny import DEFAULT_TEXTS, build_tiny_causal_lm, train_tokenizer
from agentrl.workers.actor import ActorWorker
from agentrl.workers.synthetic import actor_section, context, ppo_batch


def raw_step(worker: ActorWorker, batch, micro_batch_size: int) -> None:
    """The bare minimum: forward, response log-probs, masked mean, backward, one step."""
    model, optimizer = worker.model, worker.optimizer
    model.train()
    optimizer.zero_grad(set_to_none=True)
    prompt_width = batch["prompts"].shape[1]
    for micro in micro_batches(batch, micro_batch_size):
        logits = model(
            input_ids=micro["input_ids"],
            attention_mask=micro["attention_mask"],
            position_ids=micro["position_ids"],
        ).logits
        response = logits[:, prompt_width - 1 : -1].float()
        log_probs = torch.log_softmax(response, -1).gather(-1, micro["responses"].unsqueeze(-1)).squeeze(-1)
        (-masked_mean(log_probs, micro["response_mask"]) * (len(micro) / len(batch))).backward()
    optimizer.step()


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument(
        "--scale", type=int, default=8, help="segment length multiplier (8: ~150-300 tokens/row)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = train_tokenizer(DEFAULT_TEXTS, 2048)
        model_dir = build_tiny_causal_lm(
            tokenizer, Path(tmp) / "model", hidden_size=args.hidden, layers=args.layers, heads=8
        )
        section = actor_section(str(model_dir))
        section.update.mini_batch_size = args.rows
        section.update.micro_batch_size = args.rows // 2
        worker = ActorWorker(section, context("dp"))
        batch = ppo_batch(worker.model.config.vocab_size, rows=args.rows, scale=args.scale)
        tokens = int(batch["attention_mask"].sum())
        update = median_seconds(lambda: worker.update_actor(batch), args.repeats)
        raw = median_seconds(lambda: raw_step(worker, batch, section.update.micro_batch_size), args.repeats)
        print(f"batch: {args.rows} trajectories, {tokens} tokens; hidden {args.hidden}, {args.layers} layers")
        print(f"actor update (update_actor):    {update * 1000:8.1f} ms  ({tokens / update:,.0f} tokens/s)")
        print(f"raw forward + backward + step:  {raw * 1000:8.1f} ms  ({tokens / raw:,.0f} tokens/s)")
        print(f"trainer overhead (update / raw): {update / raw:.3f}  (target <= 1.15)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
