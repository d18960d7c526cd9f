"""PPO runs for the trainer tests: fit a config on Ray or on in-process roles, and read what it logged."""

from __future__ import annotations

import json
from pathlib import Path

from agentrl.config import load_config
from agentrl.trainer.ppo_trainer import PPOTrainer
from support.in_process import start_in_process

REQUIRED_METRICS = [
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/entropy",
    "actor/grad_norm",
    "actor/lr",
    "reward/score/mean",
    "reward/kl_penalized/mean",
    "advantages/mean",
    "returns/mean",
    "rollout/response_length",
    "rollout/num_turns",
    "rollout/tool_calls",
    "rollout/tool_calls/search",
    "rollout/finished",
    "rollout/tool_busy_s",
    "kl/coef",
    "rollout/logprob_diff",
    "timing_s/gen",
    "timing_s/ref",
    "timing_s/old_log_prob",
    "timing_s/adv",
    "timing_s/update_actor",
    "timing_s/step",
    "throughput/tokens_per_s",
]
CRITIC_METRICS = [
    "critic/vf_loss",
    "critic/vf_clipfrac",
    "critic/values/mean",
    "timing_s/values",
    "timing_s/update_critic",
]


def read_metrics(run_dir: Path) -> list[dict]:
    """The rows of ``run_dir/metrics.jsonl``, one a step."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def run(preset: str, overrides: list[str], in_process: bool = False) -> tuple[PPOTrainer, dict, dict]:
    """Fit and return the trainer with reference/actor weight checksums before and after (after: each
    actor rank's too, ``actor_ranks``); the roles are started on Ray, or with ``in_process`` built in
    this process (``support.in_process``)."""
    trainer = PPOTrainer(load_config(preset, overrides))
    if in_process:
        start_in_process(trainer)
    else:
        trainer.init_workers()
    before = {"actor": trainer.roles.actor.run_all("weight_checksum")[0]}
    if trainer.roles.reference is not None:
        before["reference"] = trainer.roles.reference.run_all("weight_checksum")[0]
    trainer.init_workers = lambda: None  # already up
    try:
        trainer.fit()
        ranks = trainer.roles.actor.run_all("weight_checksum")
        after = {"actor": ranks[0], "actor_ranks": ranks}
        if trainer.roles.reference is not None:
            after["reference"] = trainer.roles.reference.run_all("weight_checksum")[0]
    finally:
        trainer.shutdown()
    return trainer, before, after
