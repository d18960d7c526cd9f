"""Placing the roles on the Ray cluster: check it can hold them, reserve the resources, start the groups.

Two layouts (``resources.placement``):

* ``split``: every role's ranks get their own resources: rank r of the actor asks for
  ``cpus_per_worker`` CPUs and ``num_gpus_per_worker`` GPUs, and so do the reference's and
  the critic's ranks.
* ``colocated`` (verl's shared resource pool): rank r of the actor, the reference and the
  critic share one bundle of ``num_gpus_per_worker`` GPUs: each asks for its share of it.
  The roles run one after another in a step, so they rarely compete for the GPU.

Ray would wait forever for an actor it cannot place. Before any worker starts, the totals
are compared with what the cluster has, and then the bundles are reserved with a timeout
(they may fit in total but not per node); both failures name what is needed and what exists.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import get_args

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

from agentrl.config.schema import ExperimentConfig, PlacementKind
from agentrl.workers.actor import ActorWorker, ReferenceWorker
from agentrl.workers.base import RunContext
from agentrl.workers.critic import CriticWorker
from agentrl.workers.group import Placement, WorkerGroup
from agentrl.workers.reward import RewardModelWorker, RuleRewardWorker

PLACEMENTS: tuple[str, ...] = get_args(PlacementKind)
REWARD_CPUS = 0.5


@dataclass
class Roles:
    """The worker groups of one run (critic and reference only when the algorithm needs them)."""

    actor: WorkerGroup
    critic: WorkerGroup | None
    reference: WorkerGroup | None
    reward: WorkerGroup
    placement_group: object | None = None

    def all(self) -> list[WorkerGroup]:
        return [g for g in (self.actor, self.critic, self.reference, self.reward) if g is not None]

    def shutdown(self) -> None:
        """Stop every group and give the reserved bundles back to the cluster."""
        for group in self.all():
            group.shutdown()
        if self.placement_group is not None:
            remove_placement_group(self.placement_group)


@dataclass(frozen=True)
class Layout:
    """The bundles to reserve and, per role, which bundles its ranks use and what each asks for."""

    bundles: list[dict[str, float]]
    roles: dict[str, tuple[list[int], float, float]]  # role -> (bundle per rank, cpus, gpus)

    def totals(self) -> tuple[float, float]:
        cpus = sum(b.get("CPU", 0.0) for b in self.bundles) + REWARD_CPUS
        return cpus, sum(b.get("GPU", 0.0) for b in self.bundles)

    def describe(self) -> str:
        return ", ".join(
            f"{role} {len(b)} × ({c:g} CPU, {g:g} GPU)" for role, (b, c, g) in self.roles.items()
        )


def plan_layout(config: ExperimentConfig, use_critic: bool, use_reference: bool) -> Layout:
    """The bundles and per-role requests of ``resources.placement`` (module docstring)."""
    res = config.resources
    cpu, gpu = res.cpus_per_worker, res.num_gpus_per_worker
    ranks = {"actor": res.actor_workers}
    if use_reference:
        ranks["reference"] = res.actor_workers
    if use_critic:
        ranks["critic"] = res.critic_workers

    def bundle(cpus: float) -> dict[str, float]:
        return {"CPU": cpus, "GPU": gpu} if gpu > 0 else {"CPU": cpus}

    if res.placement == "colocated":
        share = len(ranks)
        bundles = [bundle(cpu * share) for _ in range(max(ranks.values()))]
        roles = {role: (list(range(n)), cpu, gpu / share) for role, n in ranks.items()}
        return Layout(bundles, roles)
    bundles, roles = [], {}
    for role, n in ranks.items():
        roles[role] = (list(range(len(bundles), len(bundles) + n)), cpu, gpu)
        bundles += [bundle(cpu) for _ in range(n)]
    return Layout(bundles, roles)


def ensure_cluster(config: ExperimentConfig, layout: Layout) -> None:
    """Start (or join) the Ray cluster; raise, naming both, if it lacks the CPUs or GPUs needed."""
    res = config.resources
    cpus, gpus = layout.totals()
    if not ray.is_initialized():
        if res.ray_address:
            ray.init(address=res.ray_address)
        else:
            ray.init(
                num_cpus=max(math.ceil(cpus), res.num_cpus or os.cpu_count() or 1),
                include_dashboard=False,
                log_to_driver=True,
            )
    have = ray.cluster_resources()
    have_cpus, have_gpus = have.get("CPU", 0.0), have.get("GPU", 0.0)
    if have_cpus < cpus or have_gpus < gpus:
        # Ray would wait forever for an actor it cannot place; say so instead.
        raise RuntimeError(
            f"the Ray cluster has {have_cpus:g} CPUs and {have_gpus:g} GPUs; the {res.placement} placement "
            f"needs {cpus:g} CPUs and {gpus:g} GPUs ({layout.describe()}, and {REWARD_CPUS:g} CPU for the "
            "reward worker); lower resources.cpus_per_worker / num_gpus_per_worker / *_workers, use "
            "resources.placement=colocated, or give the cluster more"
        )


def reserve(config: ExperimentConfig, layout: Layout) -> tuple[object, list[int]]:
    """The placement group of ``layout`` (ready), and the torch threads of each bundle's workers."""
    group = placement_group(layout.bundles, strategy="PACK")
    timeout = config.resources.placement_timeout_s
    ready, _ = ray.wait([group.ready()], timeout=timeout)
    if not ready:
        remove_placement_group(group)
        free, total = ray.available_resources(), ray.cluster_resources()
        have = ", ".join(f"{free.get(k, 0.0):g} of {total.get(k, 0.0):g} {k}s free" for k in ("CPU", "GPU"))
        raise RuntimeError(
            f"the Ray cluster could not place the bundles {layout.bundles} within {timeout:g} s "
            f"(resources.placement_timeout_s): it has {have}; each bundle must fit on one node and the "
            "resources must be free (another run may hold them); lower the per-worker resources or add nodes"
        )
    return group, _threads_per_bundle(config, group, layout)


def _threads_per_bundle(config: ExperimentConfig, group: object, layout: Layout) -> list[int]:
    """``resources.torch_threads``, or each node's cores shared by the model workers on it that
    run at once (the roles of one step run one after another, the ranks of a role together)."""
    if config.resources.torch_threads is not None:
        return [config.resources.torch_threads] * len(layout.bundles)
    node_of = placement_group_table(group)["bundles_to_node_id"]
    cores = {n["NodeID"]: n["Resources"].get("CPU", 1.0) for n in ray.nodes() if n.get("Alive")}
    busiest = max(len(b) for b, _, _ in layout.roles.values())
    per_node: dict[str, int] = {}
    for bundle in range(min(busiest, len(layout.bundles))):
        per_node[node_of[bundle]] = per_node.get(node_of[bundle], 0) + 1
    return [
        max(1, int(cores.get(node_of[i], 1) // per_node.get(node_of[i], 1)))
        for i in range(len(layout.bundles))
    ]


def start_roles(
    config: ExperimentConfig, context: RunContext, use_critic: bool, use_reference: bool
) -> Roles:
    """Each role's worker group, built from its own config section and the run context; if one
    fails to start, the groups already started and the reserved bundles are released."""
    layout = plan_layout(config, use_critic, use_reference)
    ensure_cluster(config, layout)
    group, threads = reserve(config, layout)
    started: list[WorkerGroup] = []

    def start(cls: type, section: object, role: str, world_size: int, concurrency: int = 1) -> WorkerGroup:
        bundles, cpus, gpus = layout.roles[role]
        placement = Placement(group, tuple(bundles), tuple(threads[b] for b in bundles))
        started.append(
            WorkerGroup(cls, (section, context), world_size, cpus, gpus, role, placement, concurrency)
        )
        return started[-1]

    res = config.resources
    try:
        # One-step-off: the actor generates the next rollout while it serves the update's calls.
        concurrency = 2 if context.overlap_rollout else 1
        actor = start(ActorWorker, config.actor, "actor", res.actor_workers, concurrency)
        critic = reference = None
        if use_critic:
            # Derived once: the critic starts from the actor's model unless it names its own.
            section = replace(config.critic, model_path=config.critic.model_path or config.actor.model_path)
            critic = start(CriticWorker, section, "critic", res.critic_workers)
        if use_reference:
            reference = start(ReferenceWorker, config.actor, "reference", res.actor_workers)
        reward_cls = RewardModelWorker if config.reward.reward_model_path else RuleRewardWorker
        reward = WorkerGroup(reward_cls, (config.reward, context), 1, REWARD_CPUS, 0.0, "reward")
    except BaseException:
        for worker_group in started:
            worker_group.shutdown()
        remove_placement_group(group)
        raise
    return Roles(actor, critic, reference, reward, group)
