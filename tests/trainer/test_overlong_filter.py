"""Overlong filtering in the driver, without Ray: a truncated sample leaves the loss after its
score has counted in its group's advantages."""

from __future__ import annotations

import torch
from test_old_log_prob_source import RecordingGroup, SeededScores, grpo_trainer, sampled_rollout

from agentrl.trainer.roles import Roles
from agentrl.trainer.step_metrics import StepTimer
from agentrl.trainer.step_sampler import StepSampler
from agentrl.workers.actor import ActorWorker, ReferenceWorker


def test_a_truncated_sample_leaves_the_loss_but_its_score_still_moves_its_group(tiny_model_dir, tmp_path):
    trainer = grpo_trainer(tiny_model_dir, tmp_path, skip_old_log_prob=True)
    trainer.config.algorithm.overlong_filter = True
    actor = RecordingGroup(ActorWorker(trainer.config.actor, trainer.context))
    reference = RecordingGroup(ReferenceWorker(trainer.config.actor, trainer.context))
    trainer.roles = Roles(
        actor=actor, critic=None, reference=reference, reward=RecordingGroup(SeededScores())
    )
    rollout = sampled_rollout(trainer)
    rollout.trajectories[1].truncation.response_budget = True  # group g0's second sample
    rollout.trajectories[6].truncation.context = True  # group g3's first sample
    timer = StepTimer()
    scored = StepSampler(trainer.config, trainer.roles, trainer.tokenizer, trainer.loader, True).score(
        rollout, timer
    )
    unmasked = scored.batch["response_mask"].clone()
    batch, metrics = trainer.learn(scored, timer, off_policy=False)

    mask = batch["response_mask"]
    assert mask[1].sum() == 0 and mask[6].sum() == 0, "the overlong rows leave every loss"
    kept = [i for i in range(8) if i not in (1, 6)]
    assert torch.equal(mask[kept], unmasked[kept])
    assert metrics["overlong_filter/masked_share"] == 2 / 8
    # g0's kept sample: its advantage is its score against the group mean, truncated sample included
    scores = batch["scores"]
    mean = (scores[0] + scores[1]) / 2
    std = torch.std(scores[0:2])
    first = batch["advantages"][0][unmasked[0].bool()]
    assert torch.allclose(first, ((scores[0] - mean) / (std + 1e-6)).expand_as(first), atol=1e-5)
