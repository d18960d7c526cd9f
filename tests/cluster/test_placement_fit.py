"""Whether the roles fit a cluster's nodes, what a restart shrinks to, what the messages say;
and (slow, a real Ray head on 127.0.0.2) joining a token-authenticated cluster and keeping a
placement off a node."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import get_args

import pytest

from agentrl.cluster.fit import (
    RAY_STRATEGIES,
    NodeRoom,
    bundles_fit,
    busy_message,
    fit_world_sizes,
    no_room_message,
    plan_layout,
    too_small_message,
)
from agentrl.config.schema import ExperimentConfig, PlacementStrategy
from agentrl.ports import free_port

REPO = Path(__file__).resolve().parents[2]


def node(name: str, cpus: float, gpus: float = 0.0) -> NodeRoom:
    return NodeRoom(f"{name}{'0' * 55}", f"10.0.0.{ord(name) % 250}", cpus, gpus)


def config(
    actor: int = 1,
    critic: int = 1,
    cpus: float = 1.0,
    gpus: float = 0.0,
    placement: str = "split",
    batch: int = 8,
    n: int = 1,
    mini: int = 8,
) -> ExperimentConfig:
    base = ExperimentConfig()
    rollout = replace(base.actor.rollout, n=n)
    return replace(
        base,
        data=replace(base.data, train_batch_size=batch),
        actor=replace(base.actor, rollout=rollout, update=replace(base.actor.update, mini_batch_size=mini)),
        critic=replace(base.critic, update=replace(base.critic.update, mini_batch_size=mini)),
        resources=replace(
            base.resources,
            actor_workers=actor,
            critic_workers=critic,
            cpus_per_worker=cpus,
            num_gpus_per_worker=gpus,
            placement=placement,
        ),
    )


def sizes(cfg: ExperimentConfig | None) -> tuple[int, int] | None:
    return None if cfg is None else (cfg.resources.actor_workers, cfg.resources.critic_workers)


def test_the_placement_strategies_are_the_schemas_choices_as_rays_names():
    assert list(RAY_STRATEGIES) == list(get_args(PlacementStrategy))
    assert RAY_STRATEGIES == {"pack": "PACK", "spread": "SPREAD"}


def test_every_layout_ends_with_the_reward_workers_own_bundle():
    layout = plan_layout(config(actor=2, gpus=1, placement="colocated", critic=2), True, True)
    assert layout.bundles == [{"CPU": 3.0, "GPU": 1}, {"CPU": 3.0, "GPU": 1}, {"CPU": 0.5}]
    assert layout.roles["reward"] == ([2], 0.5, 0.0)
    assert layout.totals() == (6.5, 2)


def test_bundles_that_fit_the_totals_may_not_fit_any_one_node():
    two_small = [node("a", 1.5), node("b", 1.5)]
    assert bundles_fit([{"CPU": 1.0}, {"CPU": 1.0}], two_small)
    assert not bundles_fit([{"CPU": 2.0}], two_small), "3 CPUs in all, but no node has 2"
    # GPU bundles: the CPU-only node cannot take one, the GPU node has CPU room for one only
    mixed = [node("a", 1.0, 2.0), node("b", 3.0, 0.0)]
    assert not bundles_fit([{"CPU": 1.0, "GPU": 1.0}] * 2, mixed)
    assert bundles_fit([{"CPU": 1.0, "GPU": 1.0}] * 2, [node("a", 2.0, 2.0), node("b", 3.0)])


def test_the_reward_workers_half_cpu_needs_a_node_too():
    gpu_bundles = [{"CPU": 1.0, "GPU": 1.0}] * 2
    assert not bundles_fit([*gpu_bundles, {"CPU": 0.5}], [node("a", 2.0, 2.0), node("b", 0.4)])
    assert bundles_fit([*gpu_bundles, {"CPU": 0.5}], [node("a", 2.0, 2.0), node("b", 0.5)])


def test_identical_bundles_fit_as_many_as_the_floor_of_each_nodes_room_allows():
    nodes = [node("a", 2.5), node("b", 1.0), node("c", 3.9)]  # 2 + 0 + 3 bundles of 1.25 CPU
    assert bundles_fit([{"CPU": 1.25}] * 5, nodes)
    assert not bundles_fit([{"CPU": 1.25}] * 6, nodes)


def test_a_restart_shrinks_the_actor_from_four_to_two_ranks_when_one_of_two_nodes_is_gone():
    cfg = config(actor=4)
    both = [node("a", 2.5), node("b", 2.5)]
    assert sizes(fit_world_sizes(cfg, False, False, both)) == (4, 1)
    assert sizes(fit_world_sizes(cfg, False, False, both[:1])) == (2, 1)


def test_a_restart_never_picks_a_world_size_that_does_not_divide_the_batch_or_the_mini_batch():
    three_ranks_of_room = [node("a", 3.5)]
    assert sizes(fit_world_sizes(config(actor=4), False, False, three_ranks_of_room)) == (2, 1), (
        "3 ranks fit but do not divide a batch of 8"
    )
    # 4 x 3 = 12 trajectories: 4 divides them but not the mini-batch of 6; 3 divides both
    cfg = config(actor=4, batch=4, n=3, mini=6)
    assert sizes(fit_world_sizes(cfg, False, False, [node("a", 8.0)])) == (3, 1)


def test_a_split_restart_shrinks_the_actor_first_and_then_the_critic():
    cfg = config(actor=4, critic=2)
    assert sizes(fit_world_sizes(cfg, True, False, [node("a", 6.5)])) == (4, 2)
    assert sizes(fit_world_sizes(cfg, True, False, [node("a", 5.5)])) == (4, 1)
    assert sizes(fit_world_sizes(cfg, True, False, [node("a", 4.5)])) == (2, 2)


def test_a_colocated_restart_keeps_the_critic_at_the_actors_size():
    cfg = config(actor=4, critic=4, placement="colocated")
    shrunk = fit_world_sizes(cfg, True, True, [node("a", 7.0)])  # bundles of 3 CPUs: two fit, with the reward
    assert sizes(shrunk) == (2, 2)
    assert shrunk.resources.placement == "colocated" and cfg.resources.actor_workers == 4, "a copy"


def test_no_restart_config_when_not_even_one_rank_fits():
    assert fit_world_sizes(config(actor=2), False, False, [node("a", 1.2)]) is None
    assert fit_world_sizes(config(actor=2, gpus=1), False, False, [node("a", 8.0)]) is None


def test_a_split_placement_short_of_gpus_is_told_to_try_colocated_with_its_numbers():
    cfg = config(gpus=1)
    layout = plan_layout(cfg, True, True)
    message = too_small_message(cfg, layout, [node("a", 8.0, 1.0)])
    assert "has 8 CPUs and 1 GPUs; the split placement needs 3.5 CPUs and 3 GPUs" in message
    assert "actor 1 × (1 CPU, 1 GPU), reference 1 × (1 CPU, 1 GPU), critic 1 × (1 CPU, 1 GPU)" in message
    assert "short of 2 GPUs" in message
    assert "use resources.placement=colocated (it needs 3.5 CPUs and 1 GPUs)" in message


def test_colocated_or_cpu_short_placements_are_not_told_to_use_colocated():
    colocated = config(actor=2, critic=2, gpus=1, placement="colocated")
    message = too_small_message(colocated, plan_layout(colocated, True, True), [node("a", 8.0, 1.0)])
    assert "the colocated placement needs 6.5 CPUs and 2 GPUs" in message
    assert "short of 1 GPUs" in message and "use resources.placement" not in message
    split = config()
    message = too_small_message(split, plan_layout(split, True, True), [node("a", 2.0)])
    assert "short of 1.5 CPUs" in message and "colocated" not in message, "colocated needs the same CPUs"
    assert too_small_message(split, plan_layout(split, True, True), [node("a", 4.0)]) is None


def test_a_placement_that_fits_only_in_total_lists_each_nodes_room_and_the_bundles():
    cfg = config(cpus=2.0)
    layout = plan_layout(cfg, False, False)
    nodes = [node("a", 1.5), node("b", 1.5)]
    assert too_small_message(cfg, layout, nodes) is None, "3 CPUs in all for 2.5"
    message = no_room_message(cfg, layout, nodes)
    assert "not on any one node for 1 of its bundles (1 × (2 CPU, 0 GPU))" in message
    assert "10.0.0.97 (node a0000000): 1.5 CPU, 0 GPU; 10.0.0.98 (node b0000000): 1.5 CPU, 0 GPU" in message
    assert "resources.placement_strategy=pack" in message
    assert no_room_message(cfg, layout, [node("a", 2.5)]) is None


def test_a_busy_cluster_is_named_with_each_nodes_free_and_total_room():
    cfg = config(actor=2)
    layout = plan_layout(cfg, False, False)
    nodes = [node("a", 2.0), node("b", 2.0)]
    message = busy_message(cfg, layout, nodes, [node("a", 0.5)], 5.0)
    assert "not with what they have free now, after 5 s" in message
    assert "10.0.0.97 (node a0000000): 0.5 of 2 CPU, 0 of 0 GPU free" in message
    assert "10.0.0.98 (node b0000000): 0 of 2 CPU, 0 of 0 GPU free" in message, (
        "a node missing from free is full"
    )


# ---- a real Ray head (slow): token authentication and avoided nodes -------------------------------


def _own_processes(marks: list[str]) -> list[int]:
    """This cluster's processes (their command lines name its temp dir or address) and their children."""
    found, me = [], os.getpid()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != me:
            with contextlib.suppress(OSError):
                line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if any(mark in line for mark in marks):
                    found.append(int(entry.name))
    children = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    tree = [tuple(map(int, line.split())) for line in children.splitlines()]
    stack = list(found)
    while stack:
        parent = stack.pop()
        for pid, ppid in tree:
            if ppid == parent and pid not in found:
                found.append(pid)
                stack.append(pid)
    return found


class Head:
    """A Ray head on 127.0.0.2 (and optionally a worker node on 127.0.0.3) in token mode, with its
    own token file and temp dir; stopped by killing its own processes, never by `ray stop`."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rj", dir="/tmp"))  # Ray's socket paths stay short
        self.token = self.root / "token"
        self.token.write_text(secrets.token_hex(32))
        self.address = f"127.0.0.2:{free_port('127.0.0.2')}"
        self.ray = str(Path(sys.executable).with_name("ray"))

    def ray_start(self, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token)}
        command = [self.ray, "start", *args, "--disable-usage-stats"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{command}: {done.stdout}\n{done.stderr}"

    def start(self) -> Head:
        host, port = self.address.split(":")
        self.ray_start(
            "--head",
            f"--node-ip-address={host}",
            f"--port={port}",
            f"--temp-dir={self.root / 'ray'}",
            "--num-cpus=2",
            "--include-dashboard=false",
            f"--ray-client-server-port={free_port(host)}",  # not 10001: other clusters may hold it
        )
        return self

    def add_worker(self, cpus: int) -> None:
        self.ray_start(f"--address={self.address}", "--node-ip-address=127.0.0.3", f"--num-cpus={cpus}")

    def stop(self) -> None:
        for pid in _own_processes([str(self.root), f"--address={self.address}"]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    def driver(self, code: str, token: Path) -> subprocess.CompletedProcess:
        """``code`` in a fresh Python with RAY_AUTH_MODE unset and the token at ``token`` (HOME as is)."""
        env = {
            k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS")
        }
        env["RAY_AUTH_TOKEN_PATH"] = str(token)
        program = f"import sys\nfrom agentrl.cluster.join import join_cluster\n{code}"
        return subprocess.run(
            [sys.executable, "-c", program, self.address],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=180,
        )


@pytest.fixture
def head():
    cluster = Head()
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.mark.slow  # a Ray head and two drivers (the refused one takes Ray's ~20 s to give up)
def test_a_driver_joins_a_token_cluster_with_the_token_file_and_a_wrong_token_is_named(head):
    code = "import ray\njoin_cluster(sys.argv[1], 1)\nprint('CPUS', int(ray.cluster_resources()['CPU']))"
    joined = head.driver(code, head.token)
    assert "CPUS 2" in joined.stdout, joined.stderr[-3000:]
    wrong = head.root / "wrong"
    wrong.write_text(secrets.token_hex(32))
    code = "try:\n    join_cluster(sys.argv[1], 1)\nexcept RuntimeError as e:\n    print('ERROR', e)"
    refused = head.driver(code, wrong)
    assert f"ERROR could not join the Ray cluster at resources.ray_address={head.address}" in refused.stdout
    for place in ("RAY_AUTH_TOKEN (unset)", f"RAY_AUTH_TOKEN_PATH ({wrong}: a file)", "~/.ray/auth_token"):
        assert place in refused.stdout
    assert "RAY_AUTH_MODE=disabled" in refused.stdout


@pytest.mark.slow  # a two-node Ray cluster
def test_an_avoided_node_gets_no_bundle_and_is_left_out_of_the_free_nodes(head):
    head.add_worker(cpus=3)
    code = """import ray
from agentrl.config.schema import ExperimentConfig
from agentrl.cluster import placement
from agentrl.cluster.fit import plan_layout
join_cluster(sys.argv[1], 1)
nodes = {n['NodeManagerAddress']: n['NodeID'] for n in ray.nodes() if n['Alive']}
avoid = frozenset({nodes['127.0.0.2']})
cfg = ExperimentConfig()
cfg.resources.actor_workers = 2
cfg.resources.placement_strategy = 'spread'
layout = plan_layout(cfg, False, False)
placement.ensure_cluster(cfg, layout, avoid)
group, threads = placement.reserve(cfg, layout, avoid)
used = set(placement.placement_group_table(group)['bundles_to_node_id'].values())
print('RESULT', json.dumps({'used': sorted(used), 'worker': nodes['127.0.0.3'],
      'free': [n.address for n in placement.free_nodes(avoid)], 'all': len(placement.free_nodes())}))
"""
    done = head.driver("import json\n" + code, head.token)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stderr[-3000:]
    result = json.loads(lines[0][len("RESULT ") :])
    assert result["used"] == [result["worker"]], "every bundle, the reward's too, on the worker node"
    assert result["free"] == ["127.0.0.3"] and result["all"] == 2
