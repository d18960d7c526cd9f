"""The PPO trainer end to end on Ray: tiny real model, real retriever server (the dp resume runs its
roles in-process)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support.local_ray import local_ray, no_ray
from support.ppo_runs import CRITIC_METRICS, REQUIRED_METRICS, read_metrics, run

from agentrl.config import load_config
from agentrl.trainer.checkpoint import CheckpointManager, TrainerState
from agentrl.trainer.ppo_trainer import PPOTrainer
from agentrl.trainer.tracking import CONSOLE_KEYS

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # real Ray clusters, a retriever server and training steps


# Two ranks per role, each rank's roles sharing its (logical) GPU: a cluster too small for a split
# placement (2 GPUs each for actor, reference and critic) holds the colocated one (verl's shared pool).
COLOCATED_TWO_RANKS = {
    "resources.actor_workers": 2,
    "resources.critic_workers": 2,
    "resources.num_gpus_per_worker": 1,
    "resources.placement": "colocated",
    "trainer.test_freq": 3,
}


def test_ppo_on_two_colocated_ranks_logs_finite_metrics_trains_only_the_actor_and_keeps_replicas_equal(
    search_world, tmp_path
):
    local_ray(num_cpus=7, num_gpus=2)
    run_dir = tmp_path / "ppo"
    trainer, before, after = run("ppo", search_world.overrides(run_dir, steps=3, **COLOCATED_TWO_RANKS))
    assert trainer.roles.actor.world_size == trainer.roles.critic.world_size == 2
    replicas = after["actor_ranks"]
    assert len(replicas) == 2 and replicas[0] == pytest.approx(replicas[1], rel=0, abs=1e-9)
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        missing = [k for k in REQUIRED_METRICS + CRITIC_METRICS + ["kl/mean"] if k not in row]
        assert not missing, f"step {row['step']} lacks {missing}"
        bad = {k: v for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, f"non-finite metrics at step {row['step']}: {bad}"
    assert "val/all/em" in rows[-1] and "val/synthetic_world/em" in rows[-1]
    unknown = [key for key, _ in CONSOLE_KEYS if key not in rows[-1]]
    assert not unknown, f"the console line shows metrics the trainer does not log: {unknown}"
    assert not [k for row in rows for k in row if k.startswith(("env/", "critic/score", "response_length/"))]
    assert after["reference"] == before["reference"], "the reference model must never change"
    assert after["actor"] != before["actor"], "the actor's weights must move"
    assert rows[0]["rollout/logprob_diff"] < 1e-3, (
        "engine and trainer log-probs of the same weights must agree"
    )


def test_one_step_off_policy_trains_on_rollouts_one_update_stale_with_truncated_importance_weights(
    search_world, tmp_path
):
    # On Ray: the actor serves the update's calls while the next rollout generates on it
    no_ray()  # the run sizes its own cluster
    run_dir = tmp_path / "off"
    _, before, after = run(
        "grpo",
        search_world.overrides(
            run_dir,
            steps=3,
            **{
                "actor.rollout.n": 2,
                "actor.update.mini_batch_size": 8,
                "trainer.one_step_off_policy": True,
                "trainer.save_freq": 1,
                "trainer.test_freq": 2,  # validation while the next rollout is in flight
            },
        ),
    )
    rows = read_metrics(run_dir)
    # read from the trained batch's own versions: the first rollout on the current weights
    assert [r["off_policy/staleness_max"] for r in rows] == [0.0, 1.0, 1.0]
    assert [r["off_policy/staleness_frac/1"] for r in rows] == [0.0, 1.0, 1.0]
    assert "val/all/em" in rows[1]
    # Step 2's checkpoint resumes before the prompts of the rollout then in flight (batch 3).
    state = torch.load(run_dir / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=False)
    assert state["loader"]["position"] == 2
    # The first rollout used the current weights; the later ones the weights before the last update.
    assert rows[0]["rollout/logprob_diff"] < 1e-3
    assert all(r["rollout/logprob_diff"] > 1e-3 for r in rows[1:])
    for row in rows:
        assert {"off_policy/is_weight_mean", "off_policy/ess", "timing_s/gen_wait"} <= row.keys()
        assert "timing_s/gen" not in row, "the generation itself overlapped the previous update"
        assert all(math.isfinite(v) for v in row.values() if isinstance(v, float))
    assert all("timing_s/weight_sync" in r for r in rows[:2]) and "timing_s/weight_sync" not in rows[2]
    assert after["actor"] != before["actor"]


def test_groups_two_steps_ahead_on_a_rollout_worker_of_its_own_take_each_updates_weights_on_ray(
    search_world, tmp_path
):
    # On Ray: a rollout worker with its own bundle generates up to two steps' groups ahead while the
    # actor trains, each group a call of its own taken as it finishes (trainer.take_groups), and
    # takes the actor's weights after each update while its groups are in flight
    no_ray()  # the run sizes its own cluster
    run_dir = tmp_path / "rollout_worker"
    settings = {
        "actor.rollout.n": 2,
        "actor.update.mini_batch_size": 8,
        "trainer.max_staleness": 2,
        "trainer.partial_rollout": "continue",
        "trainer.take_groups": "first_done",
        "resources.rollout_workers": 1,
        "trainer.test_freq": 2,  # validation on the rollout worker while rollouts are in flight
        "reward.scorer": "tests.trainer.scorers:letter_e_scorer",  # groups that differ: updates move
        "actor.optim.lr": 1e-3,
    }
    trainer, before, after = run("grpo", search_world.overrides(run_dir, steps=4, **settings))
    assert trainer.roles.rollout is not None and trainer.roles.rollout.world_size == 1
    rows = read_metrics(run_dir)
    # read from the trained batches' own versions: drawn 0, 1, 2 and 2 steps ahead, whichever order
    # the groups finish in (the bound forces the oldest at steps 2 and 3)
    assert [r["off_policy/staleness_max"] for r in rows] == [0.0, 1.0, 2.0, 2.0]
    assert all(r["rollout_buffer/dropped_groups"] == 0 for r in rows)
    at_take = [
        r["rollout_buffer/groups_generating_at_take"] + r["rollout_buffer/groups_done_at_take"] for r in rows
    ]
    assert at_take == [4.0, 8.0, 8.0, 4.0]  # up to two steps' groups; none drawn for a step past the run
    assert "val/all/em" in rows[1] and math.isfinite(rows[1]["val/all/em"])
    assert all(r["timing_s/weight_push"] > 0 for r in rows)
    assert all(r["rollout/weight_load_s"] > 0 for r in rows), "the worker loaded each update's weights"
    # the first rollout sampled the weights it trained; the later ones older weights
    assert rows[0]["rollout/logprob_diff"] < 1e-3
    assert all(r["rollout/logprob_diff"] > 1e-3 for r in rows[1:])
    assert after["actor"] != before["actor"]


def _trainer_state(path: Path) -> dict:
    return torch.load(path / "actor_training_state.pt", weights_only=False)


# Every run of the resume tests checkpoints each step and dumps its trajectories. Their roles run
# in this process (the killed trainer's too): what is tested is the driver's checkpoint and resume,
# not Ray. The sharded state several fsdp ranks write and read back is tested on spawned ranks
# (tests/workers/test_sharded_checkpoint.py), fsdp over Ray on two nodes (test_multi_node.py).
CHECKPOINTED = {"trainer.save_freq": 1, "trainer.dump_trajectories": True}


@pytest.fixture(scope="module")
def straight(search_world, tmp_path_factory) -> Path:
    """The uninterrupted 3-step run, what the resumed run must reproduce."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    run("ppo", search_world.overrides(run_dir, steps=3, **CHECKPOINTED), in_process=True)
    return run_dir


def _final_actor_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(CheckpointManager(run_dir).latest() / "actor" / "model.safetensors")


def _batch(run_dir: Path, step: int) -> list[tuple]:
    """Step ``step``'s trajectories, token for token (the trainer's dump)."""
    lines = (run_dir / "trajectories" / f"step_{step}.jsonl").read_text().splitlines()
    return [(r["prompt_ids"], r["response_ids"], r["segments"]) for r in map(json.loads, lines)]


def _kill_while_writing_checkpoint_2(args: list[str], run_dir: Path, log: Path, in_process: bool) -> None:
    """Train ``args`` in a process of its own whose step-2 checkpoint stalls half written, and
    SIGKILL it there (``support/slow_checkpoint_trainer.py``)."""
    script = REPO / "tests" / "support" / "slow_checkpoint_trainer.py"
    command = [sys.executable, str(script), "2", "60", *(["--in-process"] if in_process else [])]
    with log.open("wb") as sink:  # twice a silent child hid a TypeError: keep its words
        proc = subprocess.Popen(
            [*command, "--preset", "ppo", *args],
            cwd=REPO,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    partial = run_dir / "checkpoints" / ".step_2.partial"
    deadline = time.monotonic() + 240
    try:
        while not (partial / "actor").exists():
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                pytest.fail(f"trainer exited ({proc.returncode}) before the second checkpoint:\n{tail}")
            assert time.monotonic() < deadline, "the second checkpoint write never started"
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have died on its own: the assert says why
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_run_killed_while_writing_a_checkpoint_resumes_from_the_last_complete_one_as_the_uninterrupted_run(
    search_world, tmp_path, straight
):
    run_dir = tmp_path / "killed"
    args = search_world.overrides(run_dir, steps=3, **CHECKPOINTED)
    _kill_while_writing_checkpoint_2(args, run_dir, tmp_path / "killed_trainer.log", in_process=True)
    manager = CheckpointManager(run_dir)
    assert [step for step, _ in manager.complete_checkpoints()] == [1]
    partial = run_dir / "checkpoints" / ".step_2.partial"
    assert partial.exists() and not (partial / "COMPLETE").exists()

    logged = len(read_metrics(run_dir))  # what the killed run logged: step 1, perhaps step 2
    trainer, _, _ = run("ppo", args, in_process=True)  # resume_mode=auto: from step 1
    assert trainer.global_step == 3
    assert [step for step, _ in manager.complete_checkpoints()] == [2, 3]
    assert [r["step"] for r in read_metrics(run_dir)[logged:]] == [2, 3], "the resumed run logs steps 2, 3"
    for step in (2, 3):
        assert _batch(straight, step) == _batch(run_dir, step), f"step {step}'s batch differs after resume"
    a, b = _final_actor_weights(straight), _final_actor_weights(run_dir)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], msg=f"{key}: the resumed run ends elsewhere")
    a = _trainer_state(manager.latest())["optimizer"]["state"]  # dp keeps it in one file
    b = _trainer_state(CheckpointManager(straight).latest())["optimizer"]["state"]
    for key in a:
        torch.testing.assert_close(a[key]["exp_avg"], b[key]["exp_avg"])
        torch.testing.assert_close(a[key]["exp_avg_sq"], b[key]["exp_avg_sq"])
    rows = read_metrics(straight)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["rollout/logprob_diff"] < 1e-3 for r in rows), "engine and trainer weights must agree"


@pytest.mark.parametrize("take_groups", ["by_step", "first_done"])
def test_a_run_drawing_two_rollouts_ahead_on_a_rollout_worker_killed_mid_run_resumes_and_redraws_them(
    search_world, tmp_path, take_groups
):
    # dp in this process: what is tested is the rollouts in flight across the kill, not Ray; by
    # groups, the checkpoint's record of the groups trained (none of the draws in flight) too
    ahead = {
        **CHECKPOINTED,
        "trainer.max_staleness": 2,
        "resources.rollout_workers": 1,
        "trainer.partial_rollout": "continue",
        "trainer.take_groups": take_groups,
    }
    straight_dir, run_dir = tmp_path / "straight", tmp_path / "killed"
    run("ppo", search_world.overrides(straight_dir, steps=3, **ahead), in_process=True)
    args = search_world.overrides(run_dir, steps=3, **ahead)
    _kill_while_writing_checkpoint_2(args, run_dir, tmp_path / "killed_trainer.log", in_process=True)
    assert [step for step, _ in CheckpointManager(run_dir).complete_checkpoints()] == [1]
    # by groups, the checkpoint names the draws in flight (steps 2 and 3's), none of their groups trained
    ahead = TrainerState.load(CheckpointManager(run_dir).latest()).ahead
    assert ahead == ({"first_draw": 1, "resolved": [[], []]} if take_groups == "first_done" else {})
    logged = len(read_metrics(run_dir))
    trainer, _, _ = run("ppo", args, in_process=True)  # resume_mode=auto: from step 1
    assert trainer.global_step == 3 and not trainer.sampler.in_flight
    rows = read_metrics(run_dir)[logged:]
    assert [r["step"] for r in rows] == [2, 3]
    # steps 2 and 3's rollouts were in flight at the kill: drawn again from the same prompts, step
    # 2's on the restored weights (staleness 0), step 3's with it (one update old when trained)
    assert [r["off_policy/staleness_max"] for r in rows] == [0.0, 1.0]
    straight_rows = read_metrics(straight_dir)
    assert [r["off_policy/staleness_max"] for r in straight_rows] == [0.0, 1.0, 2.0]
    for step in (2, 3):
        prompts = sorted(p for p, _, _ in _batch(run_dir, step))
        assert prompts == sorted(p for p, _, _ in _batch(straight_dir, step)), f"step {step}: other prompts"
    # the restored policy reached the rollout worker: step 2's rollout, drawn on it, matches the actor
    assert rows[0]["rollout/logprob_diff"] < 1e-3


@pytest.mark.parametrize(
    "override, message",
    [
        ("actor.optim.lrr=1e-3", "unknown config key 'actor.optim.lrr'"),
        ("actor.rollout.n=1", "needs actor.rollout.n >= 2"),
        ("data.train_files=[/nonexistent/train.parquet]", "file '/nonexistent/train.parquet' does not exist"),
    ],
)
def test_bad_config_stops_before_ray_starts(search_world, tmp_path, override, message):
    args = [*search_world.overrides(tmp_path / "bad"), override]
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "agentrl.trainer.main", "--preset", "grpo", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert "Ray" not in result.stderr and time.monotonic() - started < 60
    assert not (tmp_path / "bad").exists()


def test_a_cluster_too_small_for_the_roles_is_a_clear_error_not_a_hang(search_world, tmp_path):
    local_ray(num_cpus=2)
    try:
        trainer = PPOTrainer(load_config("ppo", search_world.overrides(tmp_path / "small")))
        with pytest.raises(RuntimeError, match=r"has 2 CPUs and 0 GPUs; the split placement needs 3\.5 CPUs"):
            trainer.init_workers()
    finally:
        no_ray()


def test_a_placement_asking_for_more_gpus_than_the_cluster_has_fails_before_any_worker_starts(
    search_world, tmp_path
):
    local_ray(num_cpus=8, num_gpus=1)
    try:
        trainer = PPOTrainer(
            load_config(
                "ppo", search_world.overrides(tmp_path / "gpus", **{"resources.num_gpus_per_worker": 1})
            )
        )
        started = time.monotonic()
        with pytest.raises(
            RuntimeError, match=r"has 8 CPUs and 1 GPUs; the split placement needs 3\.5 CPUs and 3 GPUs"
        ):
            trainer.init_workers()
        assert time.monotonic() - started < 10
        assert trainer.roles is None, "no worker group may have started"
    finally:
        no_ray()
