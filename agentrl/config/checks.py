"""The config checks: every choice, number and cross-key rule, reported together by key.

``validate_config`` checks every ``Literal`` field of the tree generically (the closed
choices of ``schema.py``), the choices that live in ``core``'s open registries, and the rules
that span keys; ``load_config`` calls it after merging, and code that builds a config by hand
may call it too.
"""

from __future__ import annotations

import difflib
from dataclasses import fields, is_dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from agentrl.config.checks_plugins import check_plugins
from agentrl.config.checks_staleness import check_staleness
from agentrl.config.schema import ExperimentConfig, staleness_bound

__all__ = ["ConfigError", "check_choice", "literal_choices", "ranks_divide", "validate_config"]


class ConfigError(ValueError):
    """A config key is unknown, has the wrong type, or a value breaks a rule."""


def check_choice(problems: list[str], key: str, value: Any, choices: list[str] | tuple[str, ...]) -> None:
    if value not in choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        problems.append(f"config key '{key}' must be one of {list(choices)}, got '{value}'{hint}")


def ranks_divide(cfg: ExperimentConfig, role: str, workers: int) -> bool:
    """Whether ``workers`` ranks of ``role`` ("actor" or "critic") divide the step's trajectories
    and the role's mini-batch: data-parallel ranks must run the same number of optimiser steps,
    or their gradient all-reduces would wait on each other forever."""
    trajectories = cfg.data.train_batch_size * cfg.actor.rollout.n
    mini = getattr(cfg, role).update.mini_batch_size
    return workers == 1 or (trajectories % workers == 0 and mini % workers == 0)


def validate_config(cfg: ExperimentConfig, check_files: bool = True) -> None:
    """Rules that span keys or need the registries. Raises one ConfigError listing all problems."""
    problems: list[str] = []
    _check_literals(cfg, "", problems)
    _check_registries(cfg, problems)
    _check_numbers(cfg, problems)
    _check_layout(cfg, problems)
    if check_files:
        _check_files(cfg, problems)
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))


def literal_choices(annotation: Any) -> tuple[Any, ...] | None:
    """The choices of a ``Literal[...]`` annotation (also inside ``X | None``); None for any other."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    if get_origin(annotation) in (Union, UnionType):
        for arm in get_args(annotation):
            if get_origin(arm) is Literal:
                return get_args(arm)
    return None


def _check_literals(node: Any, prefix: str, problems: list[str]) -> None:
    """Every ``Literal`` field of the tree (and every element of a ``list[Literal]``) holds a choice.

    Merging YAML or overrides already refuses a bad choice; this also covers configs built in
    code (``ExperimentConfig()`` then attributes set), which never pass through OmegaConf.
    """
    hints = get_type_hints(type(node))
    for f in fields(node):
        key, value, hint = f"{prefix}{f.name}", getattr(node, f.name), hints[f.name]
        if is_dataclass(value):
            _check_literals(value, f"{key}.", problems)
        elif get_origin(hint) is list and isinstance(value, list):
            choices = literal_choices(get_args(hint)[0]) if get_args(hint) else None
            if choices is not None:
                for i, item in enumerate(value):
                    check_choice(problems, f"{key}[{i}]", item, choices)
            for i, item in enumerate(value):
                if is_dataclass(item):
                    _check_literals(item, f"{key}[{i}].", problems)
        else:
            choices = literal_choices(hint)
            if choices is not None and not (value is None and type(None) in get_args(hint)):
                check_choice(problems, key, value, choices)


def _check_registries(cfg: ExperimentConfig, problems: list[str]) -> None:
    """Choices that live in ``core``'s registries (estimators, KL estimators, loss aggregation)."""
    # core imports torch: reading or writing a config (prepare_qa, the eval CLI) should not pay for it
    from agentrl.core.advantages import ADVANTAGE_ESTIMATORS
    from agentrl.core.kl_control import KL_CONTROLLERS
    from agentrl.core.losses import KL_KINDS, LOSS_AGG_MODES

    algo, actor, rollout = cfg.algorithm, cfg.actor, cfg.actor.rollout
    check_choice(problems, "algorithm.adv_estimator", algo.adv_estimator, sorted(ADVANTAGE_ESTIMATORS))
    estimator = ADVANTAGE_ESTIMATORS.get(algo.adv_estimator)
    if estimator is not None and estimator.needs_groups and rollout.n < 2:
        problems.append(
            f"algorithm.adv_estimator={algo.adv_estimator} compares samples of the same prompt and needs "
            f"actor.rollout.n >= 2 (got {rollout.n})"
        )
    if estimator is not None and algo.dynamic_sampling.enable and not estimator.needs_groups:
        problems.append(
            f"algorithm.dynamic_sampling.enable drops groups whose samples tie, which only a group "
            f"estimator (grpo, drgrpo, rloo) has; algorithm.adv_estimator={algo.adv_estimator} has none"
        )
    check_choice(problems, "algorithm.kl_penalty", algo.kl_penalty, KL_KINDS)
    check_choice(problems, "actor.kl_loss_type", actor.kl_loss_type, KL_KINDS)
    check_choice(problems, "algorithm.kl_ctrl.type", algo.kl_ctrl.type, KL_CONTROLLERS)
    check_choice(problems, "actor.loss_agg_mode", actor.loss_agg_mode, LOSS_AGG_MODES)
    check_choice(problems, "critic.loss_agg_mode", cfg.critic.loss_agg_mode, LOSS_AGG_MODES)


def _check_numbers(cfg: ExperimentConfig, problems: list[str]) -> None:
    algo, actor, rollout = cfg.algorithm, cfg.actor, cfg.actor.rollout
    positive = {
        "data.train_batch_size": cfg.data.train_batch_size,
        "data.max_prompt_length": cfg.data.max_prompt_length,
        "data.max_response_length": cfg.data.max_response_length,
        "actor.rollout.n": rollout.n,
        "actor.rollout.max_tokens_per_turn": rollout.max_tokens_per_turn,
        "actor.rollout.max_obs_length": rollout.max_obs_length,
        "actor.rollout.max_calls_per_turn": rollout.max_calls_per_turn,
        "actor.rollout.tensor_parallel_size": rollout.tensor_parallel_size,
        **{
            f"{role}.update.{key}": getattr(getattr(cfg, role).update, key)
            for role in ("actor", "critic")
            for key in (
                "mini_batch_size",
                "micro_batch_size",
                "epochs",
                "max_tokens_per_micro_batch",
                "logit_chunk_tokens",
            )
        },
        "reward.micro_batch_size": cfg.reward.micro_batch_size,
        "trainer.total_steps": cfg.trainer.total_steps,
        "resources.actor_workers": cfg.resources.actor_workers,
        "resources.critic_workers": cfg.resources.critic_workers,
    }
    problems += [f"config key '{k}' must be >= 1, got {v}" for k, v in positive.items() if v < 1]
    res, trainer = cfg.resources, cfg.trainer
    seconds = {
        "resources.rendezvous_timeout_s": res.rendezvous_timeout_s,
        "resources.node_timeout_s": res.node_timeout_s,
        "resources.call_timeout_s": res.call_timeout_s,
        "trainer.restart_wait_s": trainer.restart_wait_s,
    }
    late = {k: v for k, v in seconds.items() if v is not None and v <= 0}
    problems += [f"config key '{k}' must be > 0 seconds, got {v}" for k, v in late.items()]
    if trainer.max_restarts < 0:
        problems.append(f"config key 'trainer.max_restarts' must be >= 0, got {trainer.max_restarts}")
    if rollout.max_turns < 0:
        problems.append(f"config key 'actor.rollout.max_turns' must be >= 0, got {rollout.max_turns}")
    most_calls = rollout.max_calls_per_trajectory
    if most_calls is not None and most_calls < 1:
        problems.append(
            f"config key 'actor.rollout.max_calls_per_trajectory' must be >= 1 or null, got {most_calls}"
        )
    if cfg.reward.format_penalty < 0:
        problems.append(f"config key 'reward.format_penalty' must be >= 0, got {cfg.reward.format_penalty}")
    for key, value in {
        "actor.clip_ratio_low": actor.clip_ratio_low,
        "actor.clip_ratio_high": actor.clip_ratio_high,
    }.items():
        if not 0 <= value < 10:
            problems.append(f"config key '{key}' must be in [0, 10), got {value}")
    if actor.dual_clip_c is not None and actor.dual_clip_c <= 1:
        problems.append(f"config key 'actor.dual_clip_c' must be > 1 or null, got {actor.dual_clip_c}")
    if algo.tis_cap <= 0 or (algo.is_mode == "reject" and algo.tis_cap < 1):
        problems.append(
            f"config key 'algorithm.tis_cap' must be > 0 (>= 1 with algorithm.is_mode=reject: the band "
            f"[1/tis_cap, tis_cap] must hold 1), got {algo.tis_cap}"
        )
    check_staleness(cfg, problems)
    if not 0 <= algo.gamma <= 1 or not 0 <= algo.lam <= 1:
        problems.append(f"algorithm.gamma and algorithm.lam must be in [0, 1], got {algo.gamma}, {algo.lam}")
    if not rollout.val_greedy and rollout.temperature <= 0:
        problems.append(f"config key 'actor.rollout.temperature' must be > 0, got {rollout.temperature}")
    _check_signal_options(cfg, problems)
    check_plugins(cfg, problems)
    _check_lora(cfg, problems)
    _check_best(cfg, problems)
    _check_skip_old_log_prob(cfg, problems)


def _check_signal_options(cfg: ExperimentConfig, problems: list[str]) -> None:
    """Dynamic sampling, the overlong options and the dead-signal alarms."""
    sampling, reward = cfg.algorithm.dynamic_sampling, cfg.reward
    if sampling.max_rounds < 1:
        problems.append(
            f"config key 'algorithm.dynamic_sampling.max_rounds' must be >= 1, got {sampling.max_rounds}"
        )
    if sampling.enable and staleness_bound(cfg.trainer) > 0 and cfg.trainer.take_groups != "first_done":
        problems.append(
            "algorithm.dynamic_sampling.enable with trainer.max_staleness > 0 needs "
            "trainer.take_groups=first_done (drawn ahead by step, a step's extra generation rounds "
            "would wait on the rollouts drawn ahead; by groups a tied group leaves the buffer and "
            "another draw takes its place)"
        )
    budget = cfg.data.max_response_length
    if not 0 <= reward.overlong_buffer < budget:
        problems.append(
            f"config key 'reward.overlong_buffer' must be in [0, data.max_response_length={budget}), "
            f"got {reward.overlong_buffer}"
        )
    if reward.overlong_penalty_factor < 0:
        problems.append(
            f"config key 'reward.overlong_penalty_factor' must be >= 0, got {reward.overlong_penalty_factor}"
        )
    budget = cfg.trainer.time_budget_minutes
    if budget is not None and budget <= 0:
        problems.append(f"config key 'trainer.time_budget_minutes' must be > 0 or null, got {budget}")
    if cfg.trainer.alarm_after_steps < 0:
        problems.append(
            f"config key 'trainer.alarm_after_steps' must be >= 0 (0: off), "
            f"got {cfg.trainer.alarm_after_steps}"
        )


def _check_skip_old_log_prob(cfg: ExperimentConfig, problems: list[str]) -> None:
    """π_old may be the update's own detached forward only if nothing moves the weights before it
    and nothing reads π_old before the update."""
    actor = cfg.actor
    if not actor.skip_old_log_prob:
        return
    trajectories = cfg.data.train_batch_size * actor.rollout.n
    reasons = []
    if actor.update.epochs != 1:
        reasons.append(f"actor.update.epochs={actor.update.epochs} (needs 1)")
    if actor.update.mini_batch_size < trajectories:
        reasons.append(
            f"actor.update.mini_batch_size={actor.update.mini_batch_size} splits a step's {trajectories} "
            "trajectories into several optimiser steps (needs >= data.train_batch_size × actor.rollout.n)"
        )
    if staleness_bound(cfg.trainer) > 0:
        reasons.append("trainer.max_staleness > 0 (its importance weights need π_old)")
    if cfg.algorithm.use_kl_in_reward:
        reasons.append("algorithm.use_kl_in_reward=true (the reward's KL reads π_old before the update)")
    if actor.rollout.context.policy != "none":
        reasons.append(
            f"actor.rollout.context.policy={actor.rollout.context.policy} (a trajectory's steps add rows "
            "past one mini-batch)"
        )
    if actor.rollout.agent.entry is not None:
        reasons.append("actor.rollout.agent.entry is set (an agent's episodes may add step rows)")
    if reasons:
        needs = "actor.skip_old_log_prob=true needs a single on-policy optimiser step: "
        problems.append(needs + "; ".join(reasons))


def _check_best(cfg: ExperimentConfig, problems: list[str]) -> None:
    trainer = cfg.trainer
    if trainer.keep_best_by is None:
        return
    if not trainer.keep_best_by.startswith("val/"):
        problems.append(
            f"config key 'trainer.keep_best_by' must name a validation metric (val/<source>/<metric>, "
            f"e.g. val/all/f1), got '{trainer.keep_best_by}'"
        )
    if trainer.test_freq <= 0 or not cfg.data.val_files:
        problems.append(
            "trainer.keep_best_by needs validation during training: trainer.test_freq >= 1 and data.val_files"
        )


def _check_lora(cfg: ExperimentConfig, problems: list[str]) -> None:
    lora = cfg.actor.lora
    if lora.rank < 0:
        problems.append(f"config key 'actor.lora.rank' must be >= 0 (0: full fine-tuning), got {lora.rank}")
    if lora.rank == 0:
        return
    if lora.alpha <= 0:
        problems.append(f"config key 'actor.lora.alpha' must be > 0, got {lora.alpha}")
    if not 0 <= lora.dropout < 1:
        problems.append(f"config key 'actor.lora.dropout' must be in [0, 1), got {lora.dropout}")
    if not lora.target_modules:
        problems.append("config key 'actor.lora.target_modules' must name at least one module (e.g. q_proj)")
    if cfg.resources.strategy != "dp":
        # Adapters under FSDP2 need their own sharding plan and merged-weight gather: not built yet.
        problems.append(f"actor.lora.rank > 0 needs resources.strategy=dp (got '{cfg.resources.strategy}')")


def _check_layout(cfg: ExperimentConfig, problems: list[str]) -> None:
    """Batch layout across the update sections and the data-parallel ranks; tools; the model."""
    rollout = cfg.actor.rollout
    for role in ("actor", "critic"):
        update = getattr(cfg, role).update
        if update.micro_batch_size > update.mini_batch_size:
            problems.append(
                f"{role}.update.micro_batch_size ({update.micro_batch_size}) must not exceed "
                f"{role}.update.mini_batch_size ({update.mini_batch_size})"
            )
    trajectories = cfg.data.train_batch_size * rollout.n
    for role, workers in (("actor", cfg.resources.actor_workers), ("critic", cfg.resources.critic_workers)):
        mini = getattr(cfg, role).update.mini_batch_size
        if not ranks_divide(cfg, role, workers):
            problems.append(
                f"resources.{role}_workers={workers} must divide both the trajectories per step "
                f"(data.train_batch_size × actor.rollout.n = {trajectories}) "
                f"and {role}.update.mini_batch_size ({mini})"
            )
    _check_parallelism(cfg, problems)
    for index, tool in enumerate(rollout.tools):
        if ":" not in tool.class_path and "." not in tool.class_path:
            problems.append(
                f"config key 'actor.rollout.tools[{index}].class_path' must be an import path "
                f"like 'package.module.ClassName', got '{tool.class_path}'"
            )
    if not cfg.actor.model_path:
        problems.append("config key 'actor.model_path' is required (a local Hugging Face model directory)")


def _check_parallelism(cfg: ExperimentConfig, problems: list[str]) -> None:
    """Settings under which ranks would wait on each other forever, or a key would do nothing."""
    res = cfg.resources
    for role in ("actor", "critic"):
        section = getattr(cfg, role)
        if res.strategy == "fsdp" and section.update.use_dynamic_bsz:
            # Every FSDP forward is a collective: all ranks must run the same number of micro-batches.
            problems.append(
                f"{role}.update.use_dynamic_bsz=true cuts a different number of micro-batches per rank, "
                "which resources.strategy=fsdp cannot run (every forward is a collective); "
                "use micro_batch_size"
            )
        if section.cpu_offload and res.strategy != "fsdp":
            problems.append(f"{role}.cpu_offload=true needs resources.strategy=fsdp (got '{res.strategy}')")
    if res.placement == "colocated" and res.critic_workers != res.actor_workers:
        problems.append(
            "resources.placement=colocated shares each GPU between the roles' ranks: "
            f"resources.critic_workers ({res.critic_workers}) must equal "
            f"resources.actor_workers ({res.actor_workers})"
        )
    if res.torch_threads is not None and res.torch_threads < 1:
        problems.append(f"config key 'resources.torch_threads' must be >= 1 or null, got {res.torch_threads}")
    tp = cfg.actor.rollout.tensor_parallel_size
    if tp > 1 and not cfg.actor.rollout.engine.startswith("vllm"):
        problems.append(
            f"actor.rollout.tensor_parallel_size={tp} needs a vLLM engine "
            f"(actor.rollout.engine is '{cfg.actor.rollout.engine}')"
        )
    if tp > 1 and res.num_gpus_per_worker < tp:
        problems.append(
            f"actor.rollout.tensor_parallel_size={tp} shards each actor rank's engine over {tp} GPUs: "
            f"resources.num_gpus_per_worker ({res.num_gpus_per_worker:g}) must be at least {tp}"
        )


def _check_files(cfg: ExperimentConfig, problems: list[str]) -> None:
    for key in ("train_files", "val_files"):
        for path in getattr(cfg.data, key):
            if not Path(path).is_file():
                problems.append(f"config key 'data.{key}': file '{path}' does not exist")
    for key, path in (
        ("actor.model_path", cfg.actor.model_path),
        ("critic.model_path", cfg.critic.model_path),
    ):
        if path and not Path(path).is_dir():
            problems.append(f"config key '{key}': directory '{path}' does not exist")
