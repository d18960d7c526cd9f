"""The π_old source: decided once from the config, followed by the driver's stages (no Ray).

The trainer's ``learn`` runs here on in-process workers behind a stand-in for the worker group
that records which methods the driver asked for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agentrl.agent.generation import RolloutResult
from agentrl.agent.trajectory import Trajectory
from agentrl.config import load_config
from agentrl.core.batch import Batch
from agentrl.core.masked import masked_mean
from agentrl.trainer.ppo_trainer import PPOTrainer
from agentrl.trainer.roles import Roles
from agentrl.trainer.step_metrics import StepTimer
from agentrl.trainer.step_sampler import StepSampler
from agentrl.workers.actor import ActorWorker, ReferenceWorker


class RecordingGroup:
    """A worker group of one in-process worker that records each method the driver calls."""

    world_size = 1

    def __init__(self, worker: object) -> None:
        self.worker = worker
        self.calls: list[str] = []

    def run_sharded(self, method: str, *args: object) -> object:
        self.calls.append(method)
        return getattr(self.worker, method)(*args)

    run_rank0 = run_sharded

    def run_shards(self, method: str, shards: list[Batch]) -> object:
        (shard,) = shards
        return self.run_sharded(method, shard)


class SeededScores:
    """The reward role, scoring each trajectory at random (seeded): the advantages are not zero."""

    def compute_scores(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        return torch.rand(len(batch), generator=torch.Generator().manual_seed(0)), {"reward/stub": 1.0}


def grpo_trainer(tiny_model_dir: Path, tmp_path: Path, skip_old_log_prob: bool) -> PPOTrainer:
    """Four prompts of two samples each, one on-policy optimiser step per update."""
    rows = [
        {
            "data_source": "toy",
            "prompt": [{"role": "user", "content": f"question {i}"}],
            "reward_model": {"ground_truth": {"target": [f"answer {i}"]}},
        }
        for i in range(4)
    ]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in rows))
    overrides = [
        f"actor.model_path={tiny_model_dir}",
        f"data.train_files=[{train}]",
        "data.train_batch_size=4",
        "actor.rollout.n=2",
        "actor.update.mini_batch_size=8",
        "actor.update.micro_batch_size=4",
        f"actor.skip_old_log_prob={str(skip_old_log_prob).lower()}",
        f"trainer.run_dir={tmp_path / 'run'}",
    ]
    return PPOTrainer(load_config("grpo", overrides))


def sampled_rollout(trainer: PPOTrainer) -> RolloutResult:
    """Two sampled responses per prompt, with the engine's log-probs of their tokens."""
    generator = torch.Generator().manual_seed(1)
    vocab = trainer.tokenizer.vocab_size
    trajectories = []
    for number, prompt in enumerate(trainer.loader.next_batch()):
        for k in range(trainer.config.actor.rollout.n):
            traj = Trajectory(prompt=prompt, group_id=f"g{number}", uid=f"{number}-{k}")
            length = 4 + 2 * k + number
            ids = torch.randint(3, vocab, (length,), generator=generator).tolist()
            # one sampled turn, by the weights of the step that trains it (version 0)
            traj.add_turn(ids, (-torch.rand(length, generator=generator) * 3).tolist(), "stop", version=0)
            trajectories.append(traj)
    return RolloutResult(trajectories, {})


@pytest.mark.parametrize("skip", [False, True], ids=["recomputed", "update_forward"])
def test_the_driver_decides_the_pi_old_source_once_and_its_stages_follow_it(tiny_model_dir, tmp_path, skip):
    trainer = grpo_trainer(tiny_model_dir, tmp_path, skip)
    source = trainer.context.old_log_prob_source
    assert source == ("update_forward" if skip else "recomputed")
    actor = RecordingGroup(ActorWorker(trainer.config.actor, trainer.context))
    reference = RecordingGroup(ReferenceWorker(trainer.config.actor, trainer.context))
    trainer.roles = Roles(
        actor=actor, critic=None, reference=reference, reward=RecordingGroup(SeededScores())
    )
    timer = StepTimer()
    sampler = StepSampler(trainer.config, trainer.roles, trainer.tokenizer, trainer.loader, grouped=True)
    batch, metrics = trainer.learn(sampler.score(sampled_rollout(trainer), timer), timer, off_policy=False)

    assert actor.worker.context is trainer.context, "the actor is given the driver's decision"
    assert "actor/logprob_diff" not in metrics, "the gap is emitted under its final name"
    if skip:  # no stage-2 pass: the update's forward is π_old, and the update reports the gap
        assert actor.calls == ["update_actor"]
        assert "old_log_probs" not in batch and "old_log_prob" not in timer.seconds
        assert "kl/mean" not in metrics, "no π_old before the update: the KL loss reports the KL"
        assert metrics["actor/kl_loss"] >= 0
    else:
        assert actor.calls == ["compute_log_prob", "update_actor"]
        gap = masked_mean((batch["old_log_probs"] - batch["rollout_log_probs"]).abs(), batch["response_mask"])
        assert metrics["rollout/logprob_diff"] == pytest.approx(float(gap))
        assert "kl/mean" in metrics
    assert metrics["rollout/logprob_diff"] > 0.1, "random engine log-probs are far from the policy's"
