"""Training on two Ray nodes, and losing one: a real two-node cluster on loopback addresses.

The cluster is started with docs/scaling.md's commands (token authentication on; the trainer finds
the token itself), the head on 127.0.0.2 and the worker node on 127.0.0.3, two CPUs each; the
actor's two ranks are spread over both nodes (``resources.placement_strategy=spread``). Each run is
``python -m agentrl.trainer.main`` in its own process, as a user starts it. The reference is the
same run on one rank, its roles in the test's process: a rollout samples the same tokens on any
number of ranks and N ranks take the optimiser step one rank takes, so the weights must agree
across nodes too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support.loopback_cluster import HEAD_IP, WORKER_IP, LoopbackCluster
from support.ppo_runs import run

pytestmark = pytest.mark.slow  # a Ray cluster of two nodes and several short training runs

REPO = Path(__file__).resolve().parents[2]
STEPS = 3
# Adam moves a weight ~lr (1e-3) a step, so a step applied twice or lost differs by ~1e-3; the sum
# order of one and two ranks differs by ~1e-5 where a gradient is near Adam's eps (measured 1.07e-5)
ATOL = 1e-4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    started = LoopbackCluster(tmp_path_factory.mktemp("cluster", numbered=True)).start()
    try:
        yield started
    finally:
        started.stop()


def overrides(world, run_dir: Path, cluster: LoopbackCluster | None, **extra: object) -> list[str]:
    settings = {
        "actor.rollout.n": 2,
        # one mini-batch of the step's 8 trajectories: each rank shuffles its own shard before a
        # pass (actor.update.shuffle), so with several mini-batches N ranks would group rows unlike one
        "actor.update.mini_batch_size": 8,
        "actor.use_kl_loss": "false",
        "resources.torch_threads": 1,
        "trainer.save_freq": 1,
        "trainer.logger": "[jsonl]",
        # a reward a random policy earns now and then: groups differ, so every step moves the weights
        "reward.scorer": "tests.trainer.scorers:letter_e_scorer",
        "actor.optim.lr": 1e-3,  # Adam moves a weight by about lr a step: far above the tolerance
    }
    if cluster is not None:
        settings |= {
            "resources.ray_address": cluster.address,
            "resources.actor_workers": 2,
            "resources.placement_strategy": "spread",
        }
    return world.overrides(run_dir, steps=STEPS, **(settings | extra))


def launch(world, run_dir: Path, cluster: LoopbackCluster | None, **extra: object) -> subprocess.Popen:
    """The trainer's CLI in its own process; with a cluster, the token is found where it was put
    (RAY_AUTH_TOKEN_PATH) and RAY_AUTH_MODE is left unset, as in a user's shell."""
    env = cluster.env(token_mode=False) if cluster is not None else dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    command = [sys.executable, "-m", "agentrl.trainer.main", "--preset", "grpo"]
    log = (run_dir.parent / f"{run_dir.name}.log").open("w")
    return subprocess.Popen(
        command + overrides(world, run_dir, cluster, **extra),
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def finish(process: subprocess.Popen, run_dir: Path, timeout: float = 600) -> tuple[int, str]:
    code = process.wait(timeout=timeout)
    return code, (run_dir.parent / f"{run_dir.name}.log").read_text()


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / f"step_{STEPS}" / "actor" / "model.safetensors")


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_same_weights(run: Path, reference: Path, start: Path) -> None:
    got, want, initial = final_weights(run), final_weights(reference), load_file(start / "model.safetensors")
    assert got.keys() == want.keys()
    worst = max((got[k] - want[k]).abs().max().item() for k in want)
    moved = max((want[k] - initial[k]).abs().max().item() for k in want)
    assert moved > 10 * ATOL, f"the one-rank run moved its weights by only {moved:.2e}: nothing to compare"
    print(f"{run.name}: weights differ from the one-rank run by up to {worst:.2e} (moved {moved:.2e})")
    assert worst < ATOL, f"{run.name}: weights differ from the one-rank run by up to {worst:.2e}"


def placed(log: str, role: str = "actor") -> dict[int, str]:
    """Each rank's node address, from the trainer's ``placed <role>: rank r on ADDR, …`` line."""
    line = next(line for line in log.splitlines() if line.startswith(f"placed {role}: "))
    return {int(rank): address for rank, address in re.findall(r"rank (\d+) on ([\d.]+)", line)}


def last_error(log: str) -> str:
    """The trainer's own last word (``error: …``), not a line of Ray's logging."""
    return [line for line in log.splitlines() if line.startswith("error: ")][-1]


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"the run ended before {path} was written"
        assert time.monotonic() < deadline, f"{path} not written within {timeout} s"
        time.sleep(0.2)


def fault_in_step_2(
    world, cluster: LoopbackCluster, run_dir: Path, fault, timeout: float = 120, **extra: object
) -> tuple[int, str, float]:
    """Start a run, apply ``fault`` to the worker node once step 1's checkpoint is complete (step 2
    is under way), and wait for the run to end: its exit code, its log and the seconds from the
    fault to the end. The worker node is replaced afterwards, whatever happened."""
    process = launch(world, run_dir, cluster, **extra)
    try:
        wait_for(run_dir / "checkpoints" / "step_1" / "COMPLETE", process)
        assert fault(WORKER_IP), "the worker node's processes were not found"
        faulted_at = time.monotonic()
        code, log = finish(process, run_dir, timeout=timeout)
        return code, log, time.monotonic() - faulted_at
    finally:
        process.kill()
        cluster.replace_worker()


@pytest.fixture(scope="module")
def one_rank(search_world, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference: the same run on one rank, its roles in this process (``support.in_process``)
    with one torch thread each, as every rank on the cluster has."""
    run_dir = tmp_path_factory.mktemp("one_rank") / "run"
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTRL_TORCH_THREADS", "1")  # what a worker reads (cluster.runtime_env)
        try:
            run("grpo", overrides(search_world, run_dir, None), in_process=True)
        finally:
            torch.set_num_threads(threads)
    assert min(row["signal/tied_group_share"] for row in metrics(run_dir)) < 1, "no step had a signal"
    return run_dir


def test_two_fsdp_ranks_on_two_nodes_end_with_the_one_rank_weights(search_world, cluster, one_rank, tmp_path):
    run_dir = tmp_path / "fsdp"
    code, log = finish(launch(search_world, run_dir, cluster, **{"resources.strategy": "fsdp"}), run_dir)
    assert code == 0, log[-3000:]
    assert sorted(placed(log).values()) == [HEAD_IP, WORKER_IP], "the actor's ranks must be on both nodes"
    rows = metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3]
    # the engine's own copy is released after each rollout and streamed back before the next
    assert all(r["actor/engine_sleep_freed_mb"] > 0 and "actor/weight_sync_s" in r for r in rows)
    assert_same_weights(run_dir, one_rank, search_world.model_dir)


def test_two_dp_ranks_on_two_nodes_lose_one_and_restart_from_the_last_checkpoint_to_the_one_rank_weights(
    search_world, cluster, one_rank, tmp_path
):
    # One run for two promises: data-parallel ranks on two nodes train as one rank does (step 1, on
    # both nodes), and a killed node's run restarts from the last checkpoint on the node left.
    run_dir = tmp_path / "restarted"
    settings = {"trainer.max_restarts": 1, "resources.node_timeout_s": 5}
    code, log, _ = fault_in_step_2(search_world, cluster, run_dir, cluster.kill_node, timeout=600, **settings)
    assert code == 0, log[-3000:]
    assert sorted(placed(log).values()) == [HEAD_IP, WORKER_IP], "the actor's ranks must be on both nodes"
    rows = metrics(run_dir)
    restarts = [row for row in rows if "supervisor/restarts" in row]
    assert len(restarts) == 1, rows
    assert restarts[0]["supervisor/resumed_step"] == 1 and restarts[0]["supervisor/actor_workers"] == 1
    trained = [row["step"] for row in rows if "supervisor/restarts" not in row]
    assert trained[0] == 1 and trained[-2:] == [2, 3]
    assert f"on node {WORKER_IP}" in log and "restart 1/1" in log
    # step 1 on two nodes, then step 2 trained once, from step 1's checkpoint, on one rank:
    # as the one-rank run did
    assert_same_weights(run_dir, one_rank, search_world.model_dir)


def test_without_restarts_a_frozen_node_stops_the_run_within_the_node_timeout_naming_what_was_lost(
    search_world, cluster, tmp_path
):
    # One fault for both promises (a lost node is named with its rank and the last checkpoint; a
    # frozen one is found at the node timeout, not at Ray's heartbeat): each fault costs a run and
    # a worker node. A killed node is found by the restart test above.
    run_dir = tmp_path / "frozen"
    code, log, stopped_after = fault_in_step_2(
        search_world, cluster, run_dir, cluster.freeze_node, **{"resources.node_timeout_s": 5}
    )
    assert code == 4, log[-3000:]
    error = last_error(log)
    named = re.search(r"(\w+) rank (\d+) on node ([\d.]+) stopped answering", error)
    assert named and named[3] == WORKER_IP, error
    assert placed(log, named[1])[int(named[2])] == WORKER_IP, f"{named[0]} is not on the frozen node"
    assert f"{run_dir}/checkpoints/step_1" in error and "trainer.max_restarts=0" in error, error
    print(f"frozen node: the run stopped {stopped_after:.1f} s after the freeze")
    # Ray's own heartbeat takes about a minute; the node watch answers within its timeout
    assert stopped_after < 5 + 20, f"the frozen node was found after {stopped_after:.0f} s"
