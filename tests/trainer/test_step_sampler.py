"""A step's samples without Ray: the seed of each generation round, the rounds dynamic sampling
draws, and what the step says when it runs out of rounds."""

from __future__ import annotations

import torch
from support.in_process import Collected

from agentrl.agent.generation import RolloutResult
from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory
from agentrl.config.schema import ExperimentConfig
from agentrl.seeding import derive_seed
from agentrl.trainer.dataset import StatefulLoader
from agentrl.trainer.roles import Roles
from agentrl.trainer.step_metrics import StepTimer
from agentrl.trainer.step_sampler import StepSampler

INFORMATIVE = {3}  # the prompt whose samples differ in score; every other group ties at 0


class ActorGroup:
    """The actor group's rollout in this process: one trajectory per sample, recording each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], int, int | None, bool]] = []
        self.versions: list[int] = []  # the weights version each call said the engine holds

    def submit_chunks(
        self, method: str, prompts: list[int], n: int, seed: int | None, validate: bool, **kw: int
    ) -> Collected:
        assert method == "generate_sequences"
        self.versions.append(kw["weights_version"])
        return self.generate(prompts, n, seed, validate)

    def generate(self, prompts: list[int], n: int, seed: int | None, validate: bool) -> Collected:
        self.calls.append((list(prompts), n, seed, validate))
        trajectories = [
            Trajectory(PromptSpec([p + 1]), f"c{len(self.calls)}-p{p}", f"{k}", [7], [Segment.MODEL], [0.0])
            for p in prompts
            for k in range(n)
        ]
        return Collected(RolloutResult(trajectories, {"rollout/tool_calls": 1.0}))


class RewardGroup:
    """The reward role: sample 0 of an informative prompt scores 1, everything else 0."""

    def run_rank0(self, method: str, batch):
        prompts = batch["prompts"][:, -1].tolist()
        scores = [
            float(p - 1 in INFORMATIVE and uid == "0") for p, uid in zip(prompts, batch["uid"], strict=True)
        ]
        return torch.tensor(scores), {"reward/em": sum(scores) / len(scores)}


def _sampler(tokenizer, dynamic: bool) -> tuple[StepSampler, ActorGroup, list[str]]:
    config = ExperimentConfig()
    config.seed = 11
    config.data.train_batch_size = 2
    config.actor.rollout.n = 2
    config.algorithm.dynamic_sampling.enable = dynamic
    config.algorithm.dynamic_sampling.max_rounds = 3
    actor, warnings = ActorGroup(), []
    roles = Roles(actor=actor, critic=None, reference=None, reward=RewardGroup())
    loader = StatefulLoader(list(range(20)), batch_size=2, shuffle=False, seed=0)
    return StepSampler(config, roles, tokenizer, loader, grouped=True, warn=warnings.append), actor, warnings


def test_without_dynamic_sampling_a_step_draws_once_with_the_steps_own_seed(tokenizer):
    sampler, actor, warnings = _sampler(tokenizer, dynamic=False)
    scored, metrics = sampler.sample(sampler.loader.next_batch(), 5, StepTimer())
    assert actor.calls == [([0, 1], 2, derive_seed(11, "rollout", 5), False)]
    assert actor.versions == [5]  # step 5 samples with the weights of 5 updates
    assert len(scored.batch) == 4 and scored.batch["scores"].tolist() == [0.0] * 4
    assert metrics == {"signal/score_mean": 0.0, "signal/score_spread": 0.0, "signal/tied_group_share": 1.0}
    assert warnings == []


def test_dynamic_sampling_rounds_draw_new_prompts_with_their_own_seeds_and_say_when_they_pad(tokenizer):
    sampler, actor, warnings = _sampler(tokenizer, dynamic=True)
    timer = StepTimer()
    scored, metrics = sampler.sample(sampler.loader.next_batch(), 5, timer)
    seeds = [derive_seed(11, "rollout", 5), derive_seed(11, "rollout", 5, "round", 1)]
    seeds.append(derive_seed(11, "rollout", 5, "round", 2))
    assert actor.calls == [(p, 2, s, False) for p, s in zip([[0, 1], [2, 3], [4, 5]], seeds, strict=True)]
    assert len(set(seeds)) == 3, "each round samples afresh"
    # prompt 3's group, then the first tied group drawn (prompt 0's) to fill the batch
    assert [t.group_id for t in scored.rollout.trajectories] == ["c1-p0", "c1-p0", "c2-p3", "c2-p3"]
    assert scored.batch["scores"].tolist() == [0.0, 0.0, 1.0, 0.0]
    assert metrics["dynamic_sampling/padded_groups"] == 1 and metrics["signal/tied_group_share"] == 5 / 6
    assert warnings == [
        "step 6: 1 informative groups in 3 rounds (algorithm.dynamic_sampling.max_rounds); "
        "1 tied groups fill the batch"
    ]
    assert sampler.loader.state_dict()["position"] == 3, "every round's prompts are consumed"
    assert set(timer.seconds) == {"gen", "reward"}


def test_a_rollout_drawn_ahead_says_the_weights_version_it_was_submitted_on(tokenizer):
    sampler, actor, _ = _sampler(tokenizer, dynamic=False)
    first = sampler.take_ahead(0, StepTimer()).rollout  # nothing in flight: submitted now, on weights 0
    sampler.draw_ahead(1, weights_version=0)  # step 1's rollout generates during step 0's update
    assert sampler.in_flight and sampler.loader_state()["position"] == 1  # a resume redraws batch 1
    second = sampler.take_ahead(1, StepTimer()).rollout
    assert actor.versions == [0, 0] and not sampler.in_flight
    assert [c[0] for c in actor.calls] == [[0, 1], [2, 3]]
    assert len(first.trajectories) == len(second.trajectories) == 4
