"""Supervised fine-tuning of a search agent on multi-turn trajectories (the RL warm start).

The data are trajectory records in the rollout dump format (``agentrl.agent.dump``): the
prompt ids, the response ids and a segment label per response token. The loss is the
token-mean negative log-likelihood of the MODEL tokens only; observation tokens (the
retrieved documents, tool output) are context, never targets — the same mask PPO uses,
read from the same labels, through the same forward pass (``policy_forward``).

Because SFT data share the dump format, the trainer is reusable beyond cold starts:
rejection-sampling fine-tuning is ``--min-reward 1`` over the trainer's own
``trajectories/step_*.jsonl`` dumps.

Cold-start data from scripted turns are recorded through the real rollout by
``agentrl.agent.demonstrations.record_scripted_trajectories`` and dumped in this format.

CLI::

    python -m agentrl.trainer.sft --data traj.jsonl --model DIR --out DIR [--epochs 2 --lr 1e-3 ...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from agentrl.agent.collate import collate
from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory
from agentrl.config.errors import report_error
from agentrl.config.schema import OptimConfig
from agentrl.core.batch import Batch
from agentrl.models.forward import policy_forward
from agentrl.models.loading import DTYPES, load_causal_lm, load_tokenizer
from agentrl.models.optim import build_optimizer
from agentrl.models.update import optimizer_step
from agentrl.seeding import seed_everything

__all__ = [
    "SFTConfig",
    "SFTExample",
    "SFTTrainer",
    "load_sft_examples",
]


# --- data --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SFTExample:
    """One training sequence: prompt ids, response ids, and a ``Segment`` label per response id."""

    prompt_ids: list[int]
    response_ids: list[int]
    segments: list[int]

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError("SFTExample.prompt_ids must not be empty")
        if len(self.response_ids) != len(self.segments):
            raise ValueError(
                f"SFTExample: response_ids ({len(self.response_ids)}) and segments ({len(self.segments)}) "
                "differ in length"
            )
        bad = sorted(set(self.segments) - {Segment.MODEL, Segment.OBSERVATION})
        if bad:
            raise ValueError(f"SFTExample.segments may only hold MODEL (1) and OBSERVATION (2), found {bad}")
        if Segment.MODEL not in self.segments:
            raise ValueError("SFTExample has no MODEL tokens: nothing to train on")

    def to_trajectory(self) -> Trajectory:
        """As a ``Trajectory``, so ``collate`` builds the very batch layout PPO trains on."""
        traj = Trajectory(prompt=PromptSpec(list(self.prompt_ids)), group_id="sft", uid="sft")
        traj.response_ids = list(self.response_ids)
        traj.segments = [int(s) for s in self.segments]
        traj.log_probs = [0.0] * len(self.response_ids)
        return traj

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def load_sft_examples(path: str | Path, min_reward: float | None = None) -> list[SFTExample]:
    """Examples from a trajectory dump (jsonl, one ``dump_record`` per line).

    Needs ``prompt_ids``, ``response_ids`` and ``segments`` on every line; a trajectory of
    several steps (a non-empty ``steps``) gives one example per step. With ``min_reward``,
    lines whose ``reward`` is missing or lower are skipped (rejection sampling). Errors name
    the file, line and field.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--data: {str(p)!r} is not a file")
    examples = []
    with p.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{p}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: not valid JSON ({error.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
            if min_reward is not None:
                reward = record.get("reward")
                if not isinstance(reward, (int, float)) or reward < min_reward:
                    continue
            steps = record.get("steps") or [record]
            for k, part in enumerate(steps):
                at = where if part is record else f"{where}: steps[{k}]"
                for name in ("prompt_ids", "response_ids", "segments"):
                    value = part.get(name) if isinstance(part, dict) else None
                    if not isinstance(value, list) or not all(isinstance(v, int) and v >= 0 for v in value):
                        raise ValueError(f"{at}: field '{name}' must be a list of non-negative ints")
                try:
                    examples.append(SFTExample(part["prompt_ids"], part["response_ids"], part["segments"]))
                except ValueError as error:
                    raise ValueError(f"{at}: {error}") from None
    if not examples:
        raise ValueError(
            f"{p}: no usable examples" + (f" with reward >= {min_reward}" if min_reward is not None else "")
        )
    return examples


# --- training -----------------------------------------------------------------------------


@dataclass
class SFTConfig:
    """How long and how hard to fine-tune. ``max_steps`` (if set) stops before ``epochs`` end,
    which is how a warm start is kept deliberately short of convergence."""

    epochs: int = 1
    max_steps: int | None = None
    batch_size: int = 16  # sequences per optimiser step
    micro_batch_size: int = 8  # sequences per forward/backward
    seed: int = 0
    # The dtype forward and backward compute in (autocast); weights and optimiser state stay fp32.
    compute_dtype: str = "float32"
    optim: OptimConfig = field(
        default_factory=lambda: OptimConfig(
            lr=1e-3, warmup_ratio=0.05, lr_schedule="cosine", min_lr_ratio=0.1
        )
    )

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "micro_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"sft.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"sft.max_steps must be >= 1 or None, got {self.max_steps}")
        if self.optim.lr <= 0:
            raise ValueError(f"sft.optim.lr must be > 0, got {self.optim.lr}")
        if self.compute_dtype not in DTYPES:
            raise ValueError(f"sft.compute_dtype must be one of {sorted(DTYPES)}, got {self.compute_dtype!r}")

    def total_steps(self, num_examples: int) -> int:
        per_epoch = math.ceil(num_examples / self.batch_size)
        total = per_epoch * self.epochs
        return min(total, self.max_steps) if self.max_steps is not None else total


class SFTTrainer:
    """Token-level NLL on MODEL tokens of multi-turn trajectories; AdamW with the PPO
    optimiser's schedule (``build_optimizer``); saves an ordinary HF directory."""

    def __init__(self, model_path: str | Path, config: SFTConfig | None = None, device: str = "cpu") -> None:
        self.config = config or SFTConfig()
        self.model_path = Path(model_path)
        seed_everything(self.config.seed)
        self.model = load_causal_lm(self.model_path, device=device)
        self.tokenizer = load_tokenizer(self.model_path)
        self.device = torch.device(device)
        if self.tokenizer.pad_token_id is None:
            raise ValueError(f"{self.model_path}: the tokenizer has no pad token (collate needs one)")

    def _batch(self, examples: Sequence[SFTExample]) -> Batch:
        return collate([e.to_trajectory() for e in examples], pad_token_id=self.tokenizer.pad_token_id).to(
            self.device
        )

    def loss(self, batch: Batch) -> tuple[torch.Tensor, float]:
        """Summed NLL over the batch's MODEL tokens (not yet averaged), and that token count."""
        dtype = DTYPES[self.config.compute_dtype]
        with torch.autocast(self.device.type, dtype=dtype, enabled=dtype != torch.float32):
            log_probs, _ = policy_forward(self.model, batch)
        mask = batch["response_mask"]
        return -(log_probs * mask).sum(), float(mask.sum())

    def summed_nll(self, micro: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training loss of one micro-batch: NLL summed over its MODEL tokens (``optimizer_step``
        divides by the batch's token count, so the step is that of the batch's token-mean NLL)."""
        return self.loss(micro)[0], {}

    def evaluate(self, examples: Sequence[SFTExample]) -> float:
        """Token-mean NLL on MODEL tokens (no gradient)."""
        self.model.eval()
        total, tokens = 0.0, 0.0
        with torch.no_grad():
            for start in range(0, len(examples), self.config.micro_batch_size):
                nll, count = self.loss(self._batch(examples[start : start + self.config.micro_batch_size]))
                total, tokens = total + float(nll), tokens + count
        return total / max(tokens, 1.0)

    def fit(
        self,
        examples: Sequence[SFTExample],
        on_step: Callable[[dict[str, float]], None] | None = None,
        progress: bool = True,
    ) -> list[dict[str, float]]:
        """Train; returns one metrics dict per optimiser step (``loss`` is that step's token-mean NLL).

        Each step is ``optimizer_step`` (the one PPO uses): micro-batches weighted by their
        MODEL tokens, so the step is that of one token-mean loss over the batch.
        """
        if not examples:
            raise ValueError("SFTTrainer.fit needs at least one example")
        cfg = self.config
        total_steps = cfg.total_steps(len(examples))
        optimizer, scheduler = build_optimizer(self.model.parameters(), cfg.optim, total_steps)
        generator = torch.Generator().manual_seed(cfg.seed)
        history: list[dict[str, float]] = []
        bar = tqdm(total=total_steps, desc="sft", unit="step", disable=not progress)
        step, start = 0, time.perf_counter()
        self.model.train()
        while step < total_steps:
            order = torch.randperm(len(examples), generator=generator).tolist()
            for first in range(0, len(order), cfg.batch_size):
                if step >= total_steps:
                    break
                batch = self._batch([examples[i] for i in order[first : first + cfg.batch_size]])
                result = optimizer_step(
                    self.model,
                    optimizer,
                    batch,
                    self.summed_nll,
                    micro_batch_size=cfg.micro_batch_size,
                    weighting="tokens",
                    reduction="sum",
                    grad_clip=cfg.optim.grad_clip,
                    what=f"sft step {step + 1}",
                )
                scheduler.step()
                step += 1
                metrics = {
                    "step": float(step),
                    "loss": result.loss,
                    "grad_norm": result.grad_norm,
                    "lr": float(optimizer.param_groups[0]["lr"]),
                    "tokens": float(batch["response_mask"].sum()),
                    "elapsed_s": time.perf_counter() - start,
                }
                history.append(metrics)
                if on_step is not None:
                    on_step(metrics)
                bar.set_postfix(loss=f"{result.loss:.3f}")
                bar.update(1)
        bar.close()
        self.model.eval()
        return history

    def save(self, out_dir: str | Path) -> Path:
        """The fine-tuned policy as a plain HF directory (model + tokenizer)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        return out


# --- CLI ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m agentrl.trainer.sft",
        description="SFT of a causal LM on multi-turn trajectories (loss on model tokens only).",
    )
    p.add_argument("--data", required=True, help="trajectory jsonl (agentrl.agent.dump format)")
    p.add_argument("--model", required=True, help="HF model directory to start from")
    p.add_argument("--out", required=True, help="where to save the fine-tuned model")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many optimiser steps")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--micro-batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-ratio", type=float, default=0.05)
    p.add_argument("--lr-schedule", default="cosine", choices=["constant", "cosine", "linear"])
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--min-reward", type=float, default=None, help="train only on records with reward >= this")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = SFTConfig(
            epochs=args.epochs,
            max_steps=args.max_steps,
            batch_size=args.batch_size,
            micro_batch_size=args.micro_batch_size,
            seed=args.seed,
            optim=OptimConfig(
                lr=args.lr,
                warmup_ratio=args.warmup_ratio,
                lr_schedule=args.lr_schedule,
                weight_decay=args.weight_decay,
                min_lr_ratio=0.1,
            ),
        )
        examples = load_sft_examples(args.data, args.min_reward)
        trainer = SFTTrainer(args.model, config)
    except (ValueError, FileNotFoundError) as error:
        return report_error(error, 2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "sft_metrics.jsonl").open("w") as log:
        history = trainer.fit(examples, on_step=lambda m: log.write(json.dumps(m) + "\n"))
    trainer.save(out)
    print(
        json.dumps(
            {
                "examples": len(examples),
                "steps": len(history),
                "final_loss": history[-1]["loss"],
                "out": str(out),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
