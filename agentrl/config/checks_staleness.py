"""Checks of how far the rollout may run ahead of the update: the staleness bound, partial rollouts and
the rollout workers that generate beside the actor; each error names its key and what was expected."""

from __future__ import annotations

from agentrl.config.schema import ExperimentConfig, staleness_bound


def check_staleness(cfg: ExperimentConfig, problems: list[str]) -> None:
    """``trainer.max_staleness``, ``trainer.partial_rollout`` and the rollout workers, together."""
    trainer = cfg.trainer
    if trainer.max_staleness < 0:
        problems.append(f"config key 'trainer.max_staleness' must be >= 0, got {trainer.max_staleness}")
    if trainer.one_step_off_policy and trainer.max_staleness > 1:
        problems.append(
            "trainer.one_step_off_policy=true is trainer.max_staleness=1, but trainer.max_staleness is "
            f"{trainer.max_staleness}: set only trainer.max_staleness"
        )
    elif staleness_bound(trainer) > 1 and cfg.resources.rollout_workers == 0:
        problems.append(
            f"trainer.max_staleness={trainer.max_staleness} needs resources.rollout_workers >= 1: the "
            "actor's own engine serves one rollout at a time (0 or 1 without rollout workers)"
        )
    _check_rollout_workers(cfg, problems)
    _check_take_groups(cfg, problems)
    partial = trainer.partial_rollout
    if partial != "off":
        if staleness_bound(trainer) == 0:
            problems.append(
                f"trainer.partial_rollout={partial} needs trainer.max_staleness >= 1: on-policy, no rollout "
                "is in flight when the weights change"
            )
        if cfg.actor.rollout.engine != "hf":
            problems.append(
                f"trainer.partial_rollout={partial} needs actor.rollout.engine=hf (the transformers engine "
                f"takes new weights between two decode steps), got {cfg.actor.rollout.engine!r}"
            )
    if partial == "recompute" and not cfg.actor.rollout.continuous_batching:
        problems.append(
            "trainer.partial_rollout=recompute needs actor.rollout.continuous_batching=true: the running "
            "batch is what is re-prefilled under new weights (a coalesced batch runs to completion)"
        )


def _check_rollout_workers(cfg: ExperimentConfig, problems: list[str]) -> None:
    """Rollout workers (resources.rollout_workers): their engine, and what a rollout in flight does."""
    workers = cfg.resources.rollout_workers
    if workers < 0:
        problems.append(f"config key 'resources.rollout_workers' must be >= 0, got {workers}")
    if workers <= 0:
        return
    if cfg.actor.rollout.engine != "hf":
        problems.append(
            "resources.rollout_workers > 0 needs actor.rollout.engine=hf (a rollout worker's "
            f"transformers engine takes each update's weights between two decode steps), got "
            f"{cfg.actor.rollout.engine!r}"
        )
    if staleness_bound(cfg.trainer) > 0 and cfg.trainer.partial_rollout == "off":
        problems.append(
            "resources.rollout_workers > 0 with trainer.max_staleness > 0 needs "
            "trainer.partial_rollout=continue or recompute: a rollout worker takes each update's "
            "weights at once, so the rollouts in flight go on with them"
        )
    if cfg.actor.rollout.agent.entry is not None:
        problems.append(
            "resources.rollout_workers > 0 runs the built-in rollout loop; an agent function "
            f"(actor.rollout.agent.entry={cfg.actor.rollout.agent.entry!r}) generates on the actor: set "
            "resources.rollout_workers=0"
        )
    trajectories = cfg.data.train_batch_size * cfg.actor.rollout.n
    if trajectories % workers:
        problems.append(
            f"resources.rollout_workers={workers} must divide the step's {trajectories} trajectories "
            "(data.train_batch_size × actor.rollout.n)"
        )


def _check_take_groups(cfg: ExperimentConfig, problems: list[str]) -> None:
    """``trainer.take_groups=first_done`` and ``trainer.stale_group``: what they need."""
    trainer = cfg.trainer
    ahead = trainer.groups_ahead
    if (
        ahead is not None
        and trainer.take_groups == "first_done"
        and not 1 <= ahead <= staleness_bound(trainer)
    ):
        problems.append(
            f"config key 'trainer.groups_ahead' must be between 1 and trainer.max_staleness="
            f"{trainer.max_staleness} (or null), got {ahead}"
        )
    if trainer.take_groups == "by_step":
        if ahead is not None:
            problems.append(
                "trainer.groups_ahead needs trainer.take_groups=first_done: by step, max_staleness "
                "steps' rollouts are drawn ahead"
            )
        if trainer.stale_group == "drop":
            problems.append(
                "trainer.stale_group=drop needs trainer.take_groups=first_done: by step, every group "
                "is trained by the step it was drawn for, never past the bound"
            )
        return
    if cfg.resources.rollout_workers == 0:
        problems.append(
            "trainer.take_groups=first_done needs resources.rollout_workers >= 1: the groups generate "
            "side by side on the rollout workers (the actor's engine serves one rollout at a time)"
        )
    if staleness_bound(trainer) == 0:
        problems.append(
            "trainer.take_groups=first_done needs trainer.max_staleness >= 1: on-policy, a step's "
            "groups are all drawn for it"
        )
