"""Placing the roles on the Ray cluster: check it can hold them, then reserve the resources.

The layouts and the rules of what fits where are ``fit.py``'s; the roles' groups are started in
``trainer/roles.py``. Ray would wait
forever for an actor it cannot place, so before any worker starts the cluster's nodes are
checked, in seconds: their totals, each bundle whole on one node, then what they have free
now. Only then are the bundles reserved, in one placement group laid out by
``resources.placement_strategy`` (Ray's PACK or SPREAD), with ``resources.placement_timeout_s``
as the last bound. Each failure is a ``StartupError`` that names what is needed and what each
node has. Nodes that a restart must not use (``avoid``: a frozen node that Ray still counts as
alive) are left out of the check and kept out of the group by Ray's node-id label.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

from agentrl.cluster.fit import (
    RAY_STRATEGIES,
    Layout,
    NodeRoom,
    bundles_fit,
    bundles_text,
    busy_message,
    no_room_message,
    nodes_text,
    too_small_message,
)
from agentrl.cluster.join import join_cluster
from agentrl.config.errors import StartupError
from agentrl.config.schema import ExperimentConfig

NODE_ID_LABEL = "ray.io/node-id"  # the label Ray gives every node: its id (Ray 2.60)
BUSY_GRACE_S = 5.0  # how long the check waits for busy resources before it says so


def cluster_nodes(avoid: frozenset[str] = frozenset()) -> list[NodeRoom]:
    """Each alive node of the cluster, but those in ``avoid``, with all its CPUs and GPUs."""
    alive = [n for n in ray.nodes() if n.get("Alive") and n["NodeID"] not in avoid]
    room = [(n["NodeID"], n["NodeManagerAddress"], n["Resources"]) for n in alive]
    return [NodeRoom(node, ip, have.get("CPU", 0.0), have.get("GPU", 0.0)) for node, ip, have in room]


def free_nodes(avoid: frozenset[str] = frozenset()) -> list[NodeRoom]:
    """Each alive node of the cluster, but those in ``avoid``, with the CPUs and GPUs free on it now.

    Ray 2.60 has no public per-node count of free resources: the state API's ``list_nodes``
    gives totals only (and needs the dashboard), so this reads the developer API
    ``ray._private.state.available_resources_per_node``, which leaves out what is at 0.
    """
    free = ray._private.state.available_resources_per_node()
    return [
        replace(n, cpus=free.get(n.node_id, {}).get("CPU", 0.0), gpus=free.get(n.node_id, {}).get("GPU", 0.0))
        for n in cluster_nodes(avoid)
    ]


def ensure_cluster(config: ExperimentConfig, layout: Layout, avoid: frozenset[str] = frozenset()) -> None:
    """Start (or join) the Ray cluster; raise, naming what is missing, unless its nodes (but
    ``avoid``) hold ``layout``: in total, each bundle whole on a node, and with what is free now
    (waited on for up to ``BUSY_GRACE_S``: stopped actors give their resources back a moment later)."""
    res = config.resources
    join_cluster(res.ray_address, max(math.ceil(layout.totals()[0]), res.num_cpus or os.cpu_count() or 1))
    nodes = cluster_nodes(avoid)
    # Ray would wait forever for an actor it cannot place; say so instead.
    problem = too_small_message(config, layout, nodes) or no_room_message(config, layout, nodes)
    if problem:
        skipped = f" (not counting {len(avoid)} node(s) this start avoids)" if avoid else ""
        raise StartupError(problem + skipped)
    grace, started = min(BUSY_GRACE_S, res.placement_timeout_s), time.monotonic()
    while not bundles_fit(layout.bundles, free := free_nodes(avoid)):
        if time.monotonic() - started >= grace:
            raise StartupError(busy_message(config, layout, nodes, free, grace))
        time.sleep(0.25)


def reserve(
    config: ExperimentConfig, layout: Layout, avoid: frozenset[str] = frozenset()
) -> tuple[object, list[int]]:
    """The placement group of ``layout`` (ready), on nodes other than ``avoid``, and the torch
    threads of each bundle's workers."""
    res = config.resources
    selector = [{NODE_ID_LABEL: f"!in({','.join(sorted(avoid))})"}] * len(layout.bundles) if avoid else None
    strategy = RAY_STRATEGIES[res.placement_strategy]
    group = placement_group(layout.bundles, strategy=strategy, bundle_label_selector=selector)
    ready, _ = ray.wait([group.ready()], timeout=res.placement_timeout_s)
    if not ready:
        remove_placement_group(group)
        raise StartupError(
            f"the Ray cluster could not place the bundles {bundles_text(layout.bundles)} ({strategy}) "
            f"within {res.placement_timeout_s:g} s (resources.placement_timeout_s), although its nodes had "
            f"room a moment before: {nodes_text(cluster_nodes(avoid), free_nodes(avoid))}; another run may "
            "have taken it"
        )
    return group, _threads_per_bundle(config, group, layout)


def _threads_per_bundle(config: ExperimentConfig, group: object, layout: Layout) -> list[int]:
    """``resources.torch_threads``, or each node's cores shared by the model workers on it that
    run at once (the roles of one step run one after another, the ranks of a role together, and
    rollout workers beside them all)."""
    if config.resources.torch_threads is not None:
        return [config.resources.torch_threads] * len(layout.bundles)
    node_of = placement_group_table(group)["bundles_to_node_id"]
    cores = {n["NodeID"]: n["Resources"].get("CPU", 1.0) for n in ray.nodes() if n.get("Alive")}
    rollout = layout.roles.get("rollout", ([], 0, 0))[0]
    busiest = max(len(b) for role, (b, _, _) in layout.roles.items() if role != "rollout")
    per_node: dict[str, int] = {}
    for bundle in [*range(min(busiest, len(layout.bundles))), *rollout]:
        per_node[node_of[bundle]] = per_node.get(node_of[bundle], 0) + 1
    threads = [
        max(1, int(cores.get(node_of[i], 1) // per_node.get(node_of[i], 1)))
        for i in range(len(layout.bundles))
    ]
    # as Ray gives a fractional-CPU actor outside a bundle: the reward scores beside a rollout
    for bundle in layout.roles.get("reward", ([], 0, 0))[0]:
        threads[bundle] = 1
    return threads
