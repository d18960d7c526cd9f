"""A training step's samples: the rollouts of its prompts, scored by the reward role (stage 1 and 5).

With ``algorithm.dynamic_sampling`` a step draws further rounds of prompts from the loader until
enough groups differ in score (``group_filter.fill_groups``); without it, one round. Either way
the step's signal metrics (``group_filter.signal_metrics``) cover every sample generated.

Rollouts drawn ahead (``trainer.max_staleness`` k) are held by the sampler's ``ahead``, chosen once
from ``trainer.take_groups``: a step's rollout at a time (``rollout_ahead.StepsAhead``), or groups
taken as they finish (``group_buffer.GroupBuffer``). Either is filled before a step's update
(``fill_ahead``) and taken from by the steps after (``take_ahead``); the sampler alone holds it: it
waits for it before the engine serves anything else (``drain``), and says where a checkpoint resumes
drawing prompts from (``loader_state``, ``ahead_record``). Generation runs on ``Roles.generator``:
the rollout workers when the run has them, else the actor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tqdm import tqdm

from agentrl.agent.collate import collate
from agentrl.agent.generation import RolloutResult
from agentrl.config.schema import ExperimentConfig, staleness_bound
from agentrl.core.batch import Batch
from agentrl.seeding import derive_seed
from agentrl.trainer.dataset import StatefulLoader
from agentrl.trainer.group_buffer import GroupBuffer, Screen
from agentrl.trainer.group_filter import Scored, fill_groups, informative, merge_scored, signal_metrics
from agentrl.trainer.roles import Roles
from agentrl.trainer.rollout_ahead import RolloutAhead, StepsAhead, Taken
from agentrl.trainer.step_metrics import StepTimer
from agentrl.workers.reward import turn_scores

__all__ = ["StepSampler"]


class StepSampler:
    """Rollouts of a step's prompts on the actor group, scored on the reward group."""

    def __init__(
        self,
        config: ExperimentConfig,
        roles: Roles,
        tokenizer: Any,
        loader: StatefulLoader,
        grouped: bool,
        warn: Callable[[str], None] = tqdm.write,
    ) -> None:
        self.config, self.roles, self.tokenizer, self.loader = config, roles, tokenizer, loader
        self.grouped = grouped  # a group estimator: the tied-group share means something
        self.warn = warn
        trainer = config.trainer
        # how many steps' worth are drawn ahead after each fill: the bound, or fewer by groups
        self.ahead_steps = trainer.groups_ahead or staleness_bound(trainer)
        self.ahead = self.build_ahead()

    def build_ahead(self) -> StepsAhead | GroupBuffer:
        """What holds the rollouts drawn ahead, by ``trainer.take_groups``."""
        trainer = self.config.trainer
        if trainer.take_groups == "first_done":
            return GroupBuffer(
                self.loader,
                self.roles.generator,
                self.submit_group,
                self.config.data.train_batch_size,
                staleness_bound(trainer),
                trainer.stale_group,
            )
        # without rollout workers the actor generates, one rollout at a time
        serves_one = self.config.resources.rollout_workers == 0
        return StepsAhead(self.submit, self.loader, waits_before_serving=serves_one)

    @property
    def in_flight(self) -> int:
        """How many steps the rollouts drawn ahead can fill (their prompts drawn: steps still to train)."""
        return self.ahead.in_flight

    def drain(self) -> None:
        """Before the generator serves something else (a validation): wait for the rollouts in flight
        where it serves one rollout at a time."""
        self.ahead.drain()

    def loader_state(self) -> dict:
        """Where a run resumed from a checkpoint written now draws its prompts: before the prompts of
        the oldest rollout in flight (those in flight are redrawn), else where the loader stands."""
        return self.ahead.loader_state()

    def ahead_record(self) -> dict:
        """What else a checkpoint keeps of the rollouts drawn ahead (the groups already trained)."""
        return self.ahead.record()

    def restore_ahead(self, record: dict) -> None:
        """Resume the rollouts drawn ahead from a checkpoint's ``ahead_record``."""
        self.ahead.restore(record)

    def take_ahead(self, step: int, timer: StepTimer) -> Taken:
        """The rollout (0-based) step ``step`` trains on, waited for, and the figures of what holds
        it. Its trajectories carry the version of the weights that sampled each turn. With dynamic
        sampling (groups taken as they finish: the config refuses it by step) each group is scored
        as the take finds it done, and only those with a signal are trained (``group_buffer.Screen``)."""
        sampling = self.config.algorithm.dynamic_sampling
        if not sampling.enable:
            return self.ahead.take(step)
        by_turns = sampling.signal == "outcome_or_turns"
        screen = Screen(
            score=lambda rollout: self.score(rollout, timer),
            informative=lambda group: informative(group, by_turns),
            extra_draws=sampling.max_rounds - 1,
        )
        return self.ahead.take(step, screen)

    def scored_ahead(self, taken: Taken, step: int, timer: StepTimer) -> tuple[Scored, dict[str, float]]:
        """(0-based) step ``step``'s taken rollout scored (where a screen already scored its groups:
        their scores merged, the turns scored anew on the merged rows), and the step's signal
        metrics, over every group judged (those left out too), with the figures of what held it."""
        if taken.scored is None:
            scored = self.score(taken.rollout, timer)
            return scored, self.signal(scored) | taken.metrics
        scored = merge_scored(taken.scored, self.collate, taken.left_out)
        scored.batch["turn_scores"], _ = turn_scores(scored.batch, self.config.reward)
        judged = taken.scored + taken.left_out
        signal = signal_metrics(
            [gid for part in judged for gid in part.group_ids],
            torch.cat([part.outcomes for part in judged]),
            grouped=self.grouped,
            turn_values=[values for part in judged for values in part.turn_values],
        )
        padded = int(taken.metrics["dynamic_sampling/padded_groups"])
        if padded:
            extra = int(taken.metrics["dynamic_sampling/extra_draws"])
            self.warn(
                f"step {step + 1}: {padded} tied groups fill the batch after {extra} extra draws "
                "(algorithm.dynamic_sampling.max_rounds)"
            )
        return scored, signal | taken.metrics

    def draw_ahead(self, step: int, weights_version: int) -> None:
        """Submit (0-based) step ``step``'s rollout now, on the generator's weights of
        ``weights_version`` updates (``take_groups=by_step``: a step's rollout at a time)."""
        self.ahead.draw(step, weights_version)

    def fill_ahead(
        self, step: int, will_run: Callable[[int], bool], before_draw: Callable[[], Any] | None
    ) -> None:
        """Keep ``ahead_steps`` steps' worth drawn ahead during (0-based) step ``step``, fewer where
        the steps they are for will not run (``will_run(j)``: whether step ``step + j`` does), each
        drawn on the weights of now; ``before_draw``, when given, runs before each draw (a weight sync)."""
        self.ahead.fill(step, self.ahead_steps, will_run, before_draw)

    def sample(self, prompts: list, step: int, timer: StepTimer) -> tuple[Scored, dict[str, float]]:
        """The scored rollout of ``prompts`` for (0-based) step ``step``; with dynamic sampling, more
        rounds of prompts until ``data.train_batch_size`` groups differ in score. Also returns the
        signal metrics of every sample generated (and ``dynamic_sampling/*``)."""
        first = self.generate_scored(prompts, step, 0, timer)
        sampling = self.config.algorithm.dynamic_sampling
        if not sampling.enable:
            return first, self.signal(first)

        def draw(round_index: int) -> Scored:
            return self.generate_scored(self.loader.next_batch(), step, round_index, timer)

        target = self.config.data.train_batch_size
        by_turns = sampling.signal == "outcome_or_turns"
        kept, metrics = fill_groups(first, draw, self.collate, target, sampling.max_rounds, by_turns)
        kept.batch["turn_scores"], _ = turn_scores(kept.batch, self.config.reward)
        padded = int(metrics["dynamic_sampling/padded_groups"])
        if padded:
            self.warn(
                f"step {step + 1}: {target - padded} informative groups in {sampling.max_rounds} rounds "
                f"(algorithm.dynamic_sampling.max_rounds); {padded} tied groups fill the batch"
            )
        return kept, metrics

    def submit(self, step: int, weights_version: int) -> RolloutAhead:
        """Draw the prompts of (0-based) step ``step`` and start their rollout without waiting, on
        the generator's weights now (``weights_version`` updates)."""
        loader_state = self.loader.state_dict()
        prompts = self.loader.next_batch()
        seed = derive_seed(self.config.seed, "rollout", step)
        n = self.config.actor.rollout.n
        pending = self.roles.generator.submit_chunks(
            "generate_sequences", prompts, n, seed, False, weights_version=weights_version
        )
        return RolloutAhead(pending, loader_state)

    def submit_group(self, prompt: Any, draw: int, index: int, weights_version: int, rank: int) -> Any:
        """Start one prompt's group on generator rank ``rank`` without waiting: draw ``draw``'s
        seed, from row ``index``·n of its stream, as the draw's whole rollout would sample it."""
        seed = derive_seed(self.config.seed, "rollout", draw)
        n = self.config.actor.rollout.n
        return self.roles.generator.submit_to(
            rank,
            "generate_sequences",
            [prompt],
            n,
            seed,
            False,
            first_index=index,
            weights_version=weights_version,
        )

    def generate(
        self, prompts: list, step: int, validate: bool = False, round_index: int = 0
    ) -> RolloutResult:
        """The rollout of ``prompts``: seeded per step (and per dynamic-sampling round after the
        first), ``actor.rollout.n`` samples each; one unseeded sample each when validating. The
        engine samples with the weights of ``step`` updates (the version its turns record)."""
        n = 1 if validate else self.config.actor.rollout.n
        parts = ("rollout", step) + (("round", round_index) if round_index else ())
        seed = None if validate else derive_seed(self.config.seed, *parts)
        return self.roles.generator.submit_chunks(
            "generate_sequences", prompts, n, seed, validate, weights_version=step
        ).result()

    def generate_scored(self, prompts: list, step: int, round_index: int, timer: StepTimer) -> Scored:
        """One round of the step's rollout, scored; round 0 draws the step's own seed."""
        with timer("gen"):
            rollout = self.generate(prompts, step, round_index=round_index)
        return self.score(rollout, timer)

    def score(self, rollout: RolloutResult, timer: StepTimer) -> Scored:
        """The rollout's trajectories collated and scored by the reward role (stage 5)."""
        batch = self.collate(rollout.trajectories)
        with timer("reward"):
            batch["scores"], reward_metrics = self.roles.reward.run_rank0("compute_scores", batch)
            batch["turn_scores"], turn_metrics = turn_scores(batch, self.config.reward)
        return Scored(rollout, batch, reward_metrics | turn_metrics)

    def signal(self, scored: Scored) -> dict[str, float]:
        """The signal metrics of one scored rollout (``group_filter.signal_metrics``)."""
        return signal_metrics(
            scored.group_ids, scored.outcomes, grouped=self.grouped, turn_values=scored.turn_values
        )

    def collate(self, trajectories: list) -> Batch:
        """Trajectories padded into a ``Batch`` with this run's tokenizer (``agent.collate``)."""
        return collate(trajectories, pad_token_id=self.tokenizer.pad_token_id, tokenizer=self.tokenizer)
