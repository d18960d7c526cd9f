"""Placing the roles on the Ray cluster: check it can hold them, then start their worker groups.

Ray waits forever for an actor it cannot place; the check runs first and names what the
roles need and what the cluster has, so a too-small cluster fails in seconds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np
import ray

from agentrl.config.schema import ExperimentConfig
from agentrl.workers.actor import ActorWorker, ReferenceWorker
from agentrl.workers.base import RunContext
from agentrl.workers.critic import CriticWorker
from agentrl.workers.group import WorkerGroup
from agentrl.workers.reward import RewardModelWorker, RuleRewardWorker


@dataclass
class Roles:
    """The worker groups of one run (critic and reference only when the algorithm needs them)."""

    actor: WorkerGroup
    critic: WorkerGroup | None
    reference: WorkerGroup | None
    reward: WorkerGroup

    def all(self) -> list[WorkerGroup]:
        return [g for g in (self.actor, self.critic, self.reference, self.reward) if g is not None]


def cpus_needed(config: ExperimentConfig, use_critic: bool, use_reference: bool) -> tuple[float, int]:
    """CPUs the roles ask Ray for, and how many model workers that is (the reward worker aside)."""
    res = config.resources
    groups = res.actor_workers * (2 if use_reference else 1) + (res.critic_workers if use_critic else 0)
    return res.cpus_per_worker * groups + min(res.cpus_per_worker, 0.5), groups


def ensure_cluster(config: ExperimentConfig, needed_cpus: float, workers: int) -> None:
    """Start (or join) the Ray cluster and check it has the CPUs the roles need."""
    res = config.resources
    if not ray.is_initialized():
        if res.ray_address:
            ray.init(address=res.ray_address)
        else:
            ray.init(
                num_cpus=max(int(np.ceil(needed_cpus)), res.num_cpus or os.cpu_count() or 1),
                include_dashboard=False,
                log_to_driver=True,
            )
    available = ray.cluster_resources().get("CPU", 0.0)
    if available < needed_cpus:
        raise RuntimeError(
            f"the Ray cluster has {available:g} CPUs but the roles need {needed_cpus:g} "
            f"({workers} workers × resources.cpus_per_worker={res.cpus_per_worker:g} + the reward worker); "
            "lower resources.cpus_per_worker or give the cluster more CPUs"
        )


def start_roles(
    config: ExperimentConfig, context: RunContext, use_critic: bool, use_reference: bool
) -> Roles:
    """Each role's worker group, built from its own config section and the run context."""
    res = config.resources
    needed, workers = cpus_needed(config, use_critic, use_reference)
    ensure_cluster(config, needed, workers)
    cpu, gpu = res.cpus_per_worker, res.num_gpus_per_worker
    actor = WorkerGroup(ActorWorker, (config.actor, context), res.actor_workers, cpu, gpu, "actor")
    critic = reference = None
    if use_critic:
        # Derived once: the critic starts from the actor's model unless it names its own.
        critic_section = replace(
            config.critic, model_path=config.critic.model_path or config.actor.model_path
        )
        critic = WorkerGroup(CriticWorker, (critic_section, context), res.critic_workers, cpu, gpu, "critic")
    if use_reference:
        reference = WorkerGroup(
            ReferenceWorker, (config.actor, context), res.actor_workers, cpu, gpu, "reference"
        )
    reward_cls = RewardModelWorker if config.reward.reward_model_path else RuleRewardWorker
    reward = WorkerGroup(reward_cls, (config.reward, context), 1, min(cpu, 0.5), 0.0, "reward")
    return Roles(actor, critic, reference, reward)
