"""Whether the roles' bundles fit a cluster's nodes: the layout, the per-node check, the messages.

Pure: no Ray here (``placement.py`` asks the cluster and reserves the bundles), so every rule is
testable with a list of nodes.

Two layouts (``resources.placement``):

* ``split``: every role's ranks get their own resources: rank r of the actor asks for
  ``cpus_per_worker`` CPUs and ``num_gpus_per_worker`` GPUs, and so do the reference's and
  the critic's ranks.
* ``colocated`` (verl's shared resource pool): rank r of the actor, the reference and the
  critic share one bundle of ``num_gpus_per_worker`` GPUs: each asks for its share of it.
  The roles run one after another in a step, so they rarely compete for the GPU.

The reward worker's ``REWARD_CPUS`` is one more bundle of every layout, so that it too is
reserved at once with the rest and kept off the nodes a restart must avoid. Rollout workers
(``resources.rollout_workers``) get bundles of their own in either layout (``cpus_per_worker``
and ``num_gpus_per_worker`` each): they generate while the other roles train.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import get_args

from agentrl.config.checks import ranks_divide
from agentrl.config.schema import ExperimentConfig, PlacementKind, PlacementStrategy

REWARD_CPUS = 0.5
PLACEMENTS: tuple[str, ...] = get_args(PlacementKind)  # resources.placement: the layouts below
# resources.placement_strategy -> Ray's placement group strategy. Both are soft in Ray: PACK may
# still use several nodes, SPREAD may still put bundles together; neither splits a bundle.
RAY_STRATEGIES: dict[str, str] = {name: name.upper() for name in get_args(PlacementStrategy)}
_EPS = 1e-9  # resource amounts are fractions (a colocated role's GPU share); compare with slack


@dataclass(frozen=True)
class Layout:
    """The bundles to reserve and, per role, which bundles its ranks use and what each asks for."""

    bundles: list[dict[str, float]]
    roles: dict[str, tuple[list[int], float, float]]  # role -> (bundle per rank, cpus, gpus)

    def totals(self) -> tuple[float, float]:
        return sum(b.get("CPU", 0.0) for b in self.bundles), sum(b.get("GPU", 0.0) for b in self.bundles)

    def describe(self) -> str:
        return ", ".join(
            f"{role} {len(b)} × ({c:g} CPU, {g:g} GPU)" for role, (b, c, g) in self.roles.items()
        )


def plan_layout(config: ExperimentConfig, use_critic: bool, use_reference: bool) -> Layout:
    """The bundles and per-role requests of ``resources.placement`` (module docstring); the
    reward worker's bundle is the last."""
    res = config.resources
    cpu, gpu = res.cpus_per_worker, res.num_gpus_per_worker
    ranks = {"actor": res.actor_workers}
    if use_reference:
        ranks["reference"] = res.actor_workers
    if use_critic:
        ranks["critic"] = res.critic_workers

    def bundle(cpus: float) -> dict[str, float]:
        return {"CPU": cpus, "GPU": gpu} if gpu > 0 else {"CPU": cpus}

    bundles: list[dict[str, float]] = []
    roles: dict[str, tuple[list[int], float, float]] = {}
    if res.placement == "colocated":
        share = len(ranks)
        bundles = [bundle(cpu * share) for _ in range(max(ranks.values()))]
        roles = {role: (list(range(n)), cpu, gpu / share) for role, n in ranks.items()}
    else:
        for role, n in ranks.items():
            roles[role] = (list(range(len(bundles), len(bundles) + n)), cpu, gpu)
            bundles += [bundle(cpu) for _ in range(n)]
    if res.rollout_workers:
        roles["rollout"] = (list(range(len(bundles), len(bundles) + res.rollout_workers)), cpu, gpu)
        bundles += [bundle(cpu) for _ in range(res.rollout_workers)]
    roles["reward"] = ([len(bundles)], REWARD_CPUS, 0.0)
    return Layout([*bundles, {"CPU": REWARD_CPUS}], roles)


@dataclass(frozen=True)
class NodeRoom:
    """What one alive node has (free now, or in all, as the caller says)."""

    node_id: str
    address: str
    cpus: float
    gpus: float

    def describe(self) -> str:
        return f"{self.address} (node {self.node_id[:8]}): {self.cpus:g} CPU, {self.gpus:g} GPU"


def unplaced(bundles: list[dict[str, float]], nodes: list[NodeRoom]) -> list[dict[str, float]]:
    """The bundles that first-fit decreasing leaves without a node: the largest first (GPUs, then
    CPUs), each on the first node in ``nodes`` with room left for all of it (a bundle never
    spans nodes, in Ray either)."""
    room = [[n.cpus, n.gpus] for n in nodes]
    left = []
    for b in sorted(bundles, key=lambda b: (-b.get("GPU", 0.0), -b.get("CPU", 0.0))):
        need = (b.get("CPU", 0.0), b.get("GPU", 0.0))
        spot = next((r for r in room if r[0] + _EPS >= need[0] and r[1] + _EPS >= need[1]), None)
        if spot is None:
            left.append(b)
        else:
            spot[0] -= need[0]
            spot[1] -= need[1]
    return left


def bundles_fit(bundles: list[dict[str, float]], nodes: list[NodeRoom]) -> bool:
    """Whether every bundle gets a node of ``nodes`` with room for all of it.

    First-fit decreasing. Exact when the bundles are all the same (the model bundles of a
    layout are): it then places sum over nodes of floor(room / bundle), the most any
    placement can. With bundles of different sizes (a layout's with the reward's 0.5 CPU)
    a True is always right, and a False can only be wrong in cases made to defeat it (a
    node's leftover just too small for the reward that another order would have kept).
    """
    return not unplaced(bundles, nodes)


def _short(have: float, need: float, unit: str) -> str:
    return f"short of {need - have:g} {unit}s" if have + _EPS < need else ""


def nodes_text(nodes: list[NodeRoom], free: list[NodeRoom] | None = None) -> str:
    if not nodes:
        return "none"
    if free is None:
        return "; ".join(n.describe() for n in nodes)
    now = {n.node_id: n for n in free}
    parts = []
    for n in nodes:
        f = now.get(n.node_id, replace(n, cpus=0.0, gpus=0.0))
        free_text = f"{f.cpus:g} of {n.cpus:g} CPU, {f.gpus:g} of {n.gpus:g} GPU free"
        parts.append(f"{n.address} (node {n.node_id[:8]}): {free_text}")
    return "; ".join(parts)


def bundles_text(bundles: list[dict[str, float]]) -> str:
    counts = Counter((b.get("CPU", 0.0), b.get("GPU", 0.0)) for b in bundles)
    return ", ".join(f"{n} × ({c:g} CPU, {g:g} GPU)" for (c, g), n in counts.items())


def _strategy_note(config: ExperimentConfig) -> str:
    strategy = config.resources.placement_strategy
    how = "as few nodes as it can" if strategy == "pack" else "as many nodes as it can"
    return (
        f"a bundle sits whole on one node (resources.placement_strategy={strategy} puts the bundles "
        f"on {how}, and neither strategy splits one)"
    )


def too_small_message(config: ExperimentConfig, layout: Layout, nodes: list[NodeRoom]) -> str | None:
    """Why the nodes' totals cannot hold ``layout`` (each short resource, each role's need), or None."""
    res = config.resources
    cpus, gpus = layout.totals()
    have_cpus, have_gpus = sum(n.cpus for n in nodes), sum(n.gpus for n in nodes)
    short = [s for s in (_short(have_cpus, cpus, "CPU"), _short(have_gpus, gpus, "GPU")) if s]
    if not short:
        return None
    advice = "lower resources.cpus_per_worker / num_gpus_per_worker / *_workers"
    if res.placement == "split":
        # colocated shares each rank's GPUs between the roles (its CPUs add up as in split)
        colocated = replace(res, placement="colocated", critic_workers=res.actor_workers)
        shared = replace(config, resources=colocated)
        roles = [r for r in layout.roles if r != "reward"]
        co_cpus, co_gpus = plan_layout(shared, "critic" in roles, "reference" in roles).totals()
        if co_cpus <= have_cpus + _EPS and co_gpus <= have_gpus + _EPS:
            advice += f", use resources.placement=colocated (it needs {co_cpus:g} CPUs and {co_gpus:g} GPUs)"
    return (
        f"the Ray cluster has {have_cpus:g} CPUs and {have_gpus:g} GPUs; the "
        f"{res.placement} placement needs {cpus:g} CPUs and {gpus:g} GPUs ({layout.describe()}): "
        f"{' and '.join(short)}; {advice}, or give the cluster more"
    )


def no_room_message(config: ExperimentConfig, layout: Layout, nodes: list[NodeRoom]) -> str | None:
    """Why ``layout`` does not fit ``nodes`` (their totals) although the totals suffice, or None."""
    left = unplaced(layout.bundles, nodes)
    if not left:
        return None
    cpus, gpus = layout.totals()
    return (
        f"the Ray cluster has enough CPUs and GPUs in all for the {config.resources.placement} placement "
        f"({cpus:g} CPUs, {gpus:g} GPUs), but not on any one node for {len(left)} of its bundles "
        f"({bundles_text(left)}): {_strategy_note(config)}. Bundles: {bundles_text(layout.bundles)} "
        f"({layout.describe()}); nodes: {nodes_text(nodes)}. Lower resources.cpus_per_worker / "
        "num_gpus_per_worker so that a bundle fits a node, or add larger nodes"
    )


def busy_message(
    config: ExperimentConfig, layout: Layout, nodes: list[NodeRoom], free: list[NodeRoom], waited_s: float
) -> str:
    """``layout`` fits ``nodes`` when they are idle but not what is ``free`` on them now."""
    return (
        f"the Ray cluster's nodes could hold the {config.resources.placement} placement's bundles "
        f"({bundles_text(layout.bundles)}; {layout.describe()}), but not with what they have free now, "
        f"after {waited_s:g} s: other actors (another run?) hold resources; {_strategy_note(config)}. "
        f"Nodes: {nodes_text(nodes, free)}. Stop what holds them, or start the run when they are free"
    )


def fit_world_sizes(
    config: ExperimentConfig, use_critic: bool, use_reference: bool, nodes: list[NodeRoom]
) -> ExperimentConfig | None:
    """``config`` with the largest ``resources.actor_workers``, then ``critic_workers`` (each at
    most as configured, dividing the trajectories per step and its role's mini-batch; equal
    under colocated) whose layout fits ``nodes``, reward included; None when not even 1 fits.
    For a restart on what a cluster still holds (checkpoints reshard to the new world size)."""
    res = config.resources
    for actor in range(res.actor_workers, 0, -1):
        if not ranks_divide(config, "actor", actor):
            continue
        if res.placement == "colocated":
            critics = [actor] if ranks_divide(config, "critic", actor) else []
        elif use_critic:
            critics = [c for c in range(res.critic_workers, 0, -1) if ranks_divide(config, "critic", c)]
        else:
            critics = [res.critic_workers]  # unused: kept as configured
        for critic in critics:
            candidate = replace(config, resources=replace(res, actor_workers=actor, critic_workers=critic))
            if bundles_fit(plan_layout(candidate, use_critic, use_reference).bundles, nodes):
                return candidate
    return None
