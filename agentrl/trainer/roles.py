"""The run's roles started on the cluster: each role's worker group, from its own config section."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ray.util.placement_group import remove_placement_group
from tqdm import tqdm

from agentrl.cluster.fit import plan_layout
from agentrl.cluster.group import GroupSpec, Placement, WorkerGroup, wait_all_started
from agentrl.cluster.placement import ensure_cluster, reserve
from agentrl.cluster.role_calls import CallPolicy, NodeWatch
from agentrl.config.schema import ExperimentConfig
from agentrl.workers.actor import ActorWorker, ReferenceWorker
from agentrl.workers.base import RunContext
from agentrl.workers.critic import CriticWorker
from agentrl.workers.reward import RewardModelWorker, RuleRewardWorker
from agentrl.workers.rollout import RolloutWorker


@dataclass
class Roles:
    """The worker groups of one run (critic and reference only when the algorithm needs them, the
    rollout workers only with ``resources.rollout_workers``)."""

    actor: WorkerGroup
    critic: WorkerGroup | None
    reference: WorkerGroup | None
    reward: WorkerGroup
    placement_group: object | None = None
    watch: NodeWatch | None = None  # the sentinels on the roles' nodes (role_calls)
    rollout: WorkerGroup | None = None

    @classmethod
    def of(cls, groups: dict[str, Any], placement_group: object | None = None, watch: Any = None) -> Roles:
        """The roles of ``groups`` by role name (``role_specs``'s names)."""
        return cls(
            groups["actor"],
            groups.get("critic"),
            groups.get("reference"),
            groups["reward"],
            placement_group,
            watch,
            groups.get("rollout"),
        )

    @property
    def generator(self) -> WorkerGroup:
        """The group that generates the trajectories: the rollout workers, else the actor."""
        return self.rollout or self.actor

    def push_weights(self, weights_version: int) -> dict[str, float]:
        """The actor's weights after its ``weights_version``-th update into the rollout workers (they
        take them between two decode steps of what they generate): the slowest worker's seconds to
        load them, as ``rollout/weight_load_s``; nothing without any."""
        if self.rollout is None:
            return {}
        weights = self.actor.run_all("export_weights")[0]  # rank 0's, gathered by every rank
        return {"rollout/weight_load_s": max(self.rollout.run_all("load_weights", weights, weights_version))}

    def all(self) -> list[WorkerGroup]:
        groups = (self.actor, self.critic, self.reference, self.reward, self.rollout)
        return [g for g in groups if g is not None]

    def shutdown(self, graceful: bool = True) -> None:
        """Stop every group and give the reserved bundles back to the cluster; ``graceful`` False
        kills the actors without asking them to leave their process groups (after a failure)."""
        for group in self.all():
            if graceful:
                group.shutdown()
            else:
                group.kill()
        if self.watch is not None:
            self.watch.shutdown()
        if self.placement_group is not None:
            remove_placement_group(self.placement_group)


@dataclass(frozen=True)
class RoleSpec:
    """One role of a run: its worker class, the config section it is built from, its ranks, and how
    many calls a rank serves at once."""

    role: str
    cls: type
    section: Any
    world_size: int
    concurrency: int = 1


def role_specs(
    config: ExperimentConfig, context: RunContext, use_critic: bool, use_reference: bool
) -> list[RoleSpec]:
    """The roles a run starts, in start order: actor, then the critic and the reference when the
    algorithm needs them, then the reward, then the rollout workers when there are any."""
    res = config.resources
    # One-step-off: the actor generates the next rollout while it serves the update's calls.
    specs = [
        RoleSpec("actor", ActorWorker, config.actor, res.actor_workers, 2 if context.overlap_rollout else 1)
    ]
    if use_critic:
        # Derived once: the critic starts from the actor's model unless it names its own.
        section = replace(config.critic, model_path=config.critic.model_path or config.actor.model_path)
        specs.append(RoleSpec("critic", CriticWorker, section, res.critic_workers))
    if use_reference:
        specs.append(RoleSpec("reference", ReferenceWorker, config.actor, res.actor_workers))
    reward_cls = RewardModelWorker if config.reward.reward_model_path else RuleRewardWorker
    specs.append(RoleSpec("reward", reward_cls, config.reward, 1))
    if res.rollout_workers:
        # up to max_staleness rollouts generate at once (by_step), or the groups of up to one step more
        # (first_done, spread over the workers), beside a weight load and a validation
        calls = context.max_staleness
        if config.trainer.take_groups == "first_done":
            groups = (context.max_staleness + 1) * config.data.train_batch_size
            calls = -(-groups // res.rollout_workers)
        slots = calls + 2
        specs.append(RoleSpec("rollout", RolloutWorker, config.actor, res.rollout_workers, slots))
    return specs


def start_roles(
    config: ExperimentConfig,
    context: RunContext,
    use_critic: bool,
    use_reference: bool,
    avoid: frozenset[str] = frozenset(),
) -> Roles:
    """Each role's worker group, built from its own config section and the run context; if one
    fails to start, the groups already started and the reserved bundles are released. No rank
    (nor the reward worker) is placed on the nodes in ``avoid``."""
    layout = plan_layout(config, use_critic, use_reference)
    ensure_cluster(config, layout, avoid)
    group, threads = reserve(config, layout, avoid)
    res = config.resources
    # every call on every role waits under the run's deadlines, and a watch on each node they use
    calls = CallPolicy(NodeWatch(res.node_timeout_s), res.call_timeout_s)
    started: dict[str, WorkerGroup] = {}
    try:
        for spec in role_specs(config, context, use_critic, use_reference):
            bundles, cpus, gpus = layout.roles[spec.role]
            placement = Placement(group, tuple(bundles), tuple(threads[b] for b in bundles))
            taken = frozenset(g.port for g in started.values())  # the ports of groups still starting
            ranks = GroupSpec(
                spec.cls,
                (spec.section, context),
                spec.world_size,
                name=spec.role,
                num_cpus=cpus,
                num_gpus=gpus,
                max_concurrency=spec.concurrency,
            )
            started[spec.role] = WorkerGroup(ranks, placement, calls, taken)
        # every role was asked for before any is waited on: their workers import and load together
        wait_all_started(list(started.values()))
        calls.watch.add({site.node_id for worker_group in started.values() for site in worker_group.sites})
        for worker_group in started.values():  # where every rank landed: a user's first check on a cluster
            ranks = ", ".join(f"rank {s.rank} on {s.address}" for s in worker_group.sites)
            tqdm.write(f"placed {worker_group.name}: {ranks}")
    except BaseException:
        for worker_group in started.values():  # some may still be starting: a shutdown call would queue
            worker_group.kill()
        calls.watch.shutdown()
        remove_placement_group(group)
        raise
    return Roles.of(started, group, calls.watch)
