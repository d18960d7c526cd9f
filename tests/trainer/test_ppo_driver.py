"""The PPO driver's logic on a tiny real model and a real retriever, its roles in this process.

Critic-free GRPO and checkpoint ranking, dynamic sampling, a diverged run, and learning itself do
not depend on where the workers run: the real workers answer in this process
(``support.in_process``), without Ray. Ray's wiring is ``test_ppo_trainer.py``'s, one-step-off
with its rollout in flight during the update included.
"""

from __future__ import annotations

import json
import math

import pytest
from support.in_process import run_in_process, start_in_process
from support.ppo_runs import REQUIRED_METRICS, read_metrics, run
from test_old_log_prob_source import grpo_trainer

from agentrl.config import load_config
from agentrl.models.update import NonFiniteLossError
from agentrl.trainer.checkpoint import CheckpointManager
from agentrl.trainer.ppo_trainer import PPOTrainer, TrainingDiverged
from agentrl.trainer.roles import Roles


def test_grpo_three_steps_builds_no_critic_skips_the_old_log_prob_pass_and_keeps_its_best_checkpoint(
    search_world, tmp_path
):
    run_dir = tmp_path / "grpo"
    ranked = {"trainer.test_freq": 1, "trainer.keep_best_by": "val/all/f1", "trainer.max_ckpt_to_keep": 1}
    # 4 prompts x 2 samples = one mini-batch of 8: one on-policy optimiser step, so π_old is the update's
    one_step = {"actor.rollout.n": 2, "actor.update.mini_batch_size": 8, "actor.skip_old_log_prob": True}
    trainer, before, after = run(
        "grpo", search_world.overrides(run_dir, steps=3, **one_step, **ranked), in_process=True
    )
    assert trainer.roles.critic is None and trainer.roles.reference is not None
    rows = read_metrics(run_dir)
    assert len(rows) == 3
    for row in rows:
        assert not [k for k in REQUIRED_METRICS if k not in row and k != "timing_s/old_log_prob"]
        assert "timing_s/old_log_prob" not in row and "actor/logprob_diff" not in row
        assert row["rollout/logprob_diff"] < 1e-3, "measured on the update's forward instead"
        assert row["actor/ppo_kl"] == 0 and row["actor/pg_clipfrac"] == 0  # the ratio is exactly 1
        assert not [k for k in row if k.startswith("critic/")], "a critic-free run logs no critic/* metric"
        assert all(math.isfinite(v) for v in row.values() if isinstance(v, float))
        assert "actor/kl_loss" in row  # grpo preset: KL as a loss term
    assert after["reference"] == before["reference"] and after["actor"] != before["actor"]
    # every step validated: its wait is timed on its own, counted by the elapsed time, not by the step's
    for previous, row in zip(rows, rows[1:], strict=False):
        assert row["timing_s/validation"] > 0
        elapsed = row["training/elapsed_s"] - previous["training/elapsed_s"]
        assert elapsed >= row["timing_s/step"] + row["timing_s/validation"]
    # save_freq=0, yet each validated step saved a checkpoint ranked by its own val/all/f1
    f1 = {row["step"]: row["val/all/f1"] for row in rows}
    best_step = max(f1, key=lambda step: (f1[step], step))
    kept = trainer.checkpoints.complete_checkpoints()
    assert [step for step, _ in kept] == sorted({best_step, 3}), "the best one and the last one"
    for step, path in kept:
        assert json.loads((path / "COMPLETE").read_text())["score"] == f1[step]
    assert trainer.checkpoints.best().name == f"step_{best_step}"


def test_grpo_with_dynamic_sampling_draws_rounds_keeps_the_batch_size_and_logs_the_overlong_treatments(
    search_world, tmp_path
):
    run_dir = tmp_path / "dapo"
    dapo = {
        "actor.rollout.n": 2,
        "algorithm.dynamic_sampling.enable": True,
        "algorithm.dynamic_sampling.max_rounds": 3,
        "algorithm.overlong_filter": True,
        "reward.overlong_buffer": 32,
        "trainer.alarm_after_steps": 2,
    }
    trainer, _, after = run("grpo", search_world.overrides(run_dir, steps=2, **dapo), in_process=True)
    rows = read_metrics(run_dir)
    assert len(rows) == 2
    for row in rows:
        kept = row["dynamic_sampling/informative_groups"] + row["dynamic_sampling/padded_groups"]
        assert kept == 4, "the batch always holds data.train_batch_size groups"
        rounds = row["dynamic_sampling/rounds"]
        assert 1 <= rounds <= 3 and row["dynamic_sampling/prompts_consumed"] == 4 * rounds
        if row["dynamic_sampling/informative_groups"] < 4:
            assert rounds == 3, "a step short of informative groups draws every round it may"
        for key in ("signal/tied_group_share", "signal/score_spread", "overlong_filter/masked_share"):
            assert 0 <= row[key] <= 1 or key == "signal/score_spread"
        assert row["reward/overlong_penalty"] <= 0 and "alarms/all_groups_tied_steps" in row
    # the loader stands after every prompt the rounds drew: what a resumed run draws on from
    assert trainer.loader.state_dict()["position"] == sum(r["dynamic_sampling/rounds"] for r in rows)


def test_dynamic_sampling_by_groups_trains_full_batches_where_only_padding_ties_within_the_bound(
    search_world, tmp_path, monkeypatch
):
    trained = []  # per step: how many of its groups tie, and the staleness of its tokens
    learn = PPOTrainer.learn

    def spy(self, scored, timer, off_policy):
        ties = {}
        for trajectory, outcome in zip(scored.rollout.trajectories, scored.outcomes.tolist(), strict=True):
            ties.setdefault(trajectory.group_id, set()).add(outcome)
        versions = scored.batch["response_versions"][scored.batch["response_mask"] > 0]
        trained.append(
            (len(ties), sum(len(v) == 1 for v in ties.values()), int((self.global_step - versions).max()))
        )
        return learn(self, scored, timer, off_policy)

    monkeypatch.setattr(PPOTrainer, "learn", spy)
    run_dir = tmp_path / "dapo_by_groups"
    dapo = {
        **CONTINUED,
        "actor.rollout.n": 2,
        "algorithm.dynamic_sampling.enable": True,
        "algorithm.dynamic_sampling.max_rounds": 2,
        "algorithm.dynamic_sampling.signal": "outcome",
        "trainer.max_staleness": 2,
        "trainer.take_groups": "first_done",
    }
    run("grpo", search_world.overrides(run_dir, steps=3, **dapo), in_process=True)
    rows = read_metrics(run_dir)
    assert len(rows) == len(trained) == 3
    for row, (groups, tied, staleness) in zip(rows, trained, strict=True):
        assert groups == 4, "the batch always holds data.train_batch_size groups"
        assert row["dynamic_sampling/informative_groups"] + row["dynamic_sampling/padded_groups"] == 4
        assert tied == row["dynamic_sampling/padded_groups"], "a tied group is trained only as padding"
        assert 0 <= row["dynamic_sampling/extra_draws"] <= 1 and staleness <= 2
        assert row["dynamic_sampling/left_out_groups"] >= 0 and 0 <= row["signal/tied_group_share"] <= 1
    # the signal is over every group judged, those left out too: a step that left some out saw ties
    assert all(r["signal/tied_group_share"] > 0 for r in rows if r["dynamic_sampling/left_out_groups"] > 0)


def test_reward_goes_up_on_an_easy_task(search_world, tmp_path):
    run_dir = tmp_path / "easy"
    overrides = search_world.overrides(
        run_dir,
        steps=30,
        **{
            "reward.scorer": "tests.trainer.scorers:letter_e_scorer",
            "actor.rollout.max_turns": 0,
            "actor.rollout.max_tokens_per_turn": 16,
            "actor.rollout.n": 4,
            "data.train_batch_size": 4,
            "actor.update.mini_batch_size": 16,
            "actor.update.micro_batch_size": 8,
            "actor.update.epochs": 2,
            "actor.optim.lr": 1e-2,
            "algorithm.use_kl_in_reward": False,
            "actor.use_kl_loss": False,
            "actor.entropy_coeff": 0.0,
        },
    )
    run("grpo", overrides, in_process=True)
    scores = [row["reward/score/mean"] for row in read_metrics(run_dir)]
    start, end = sum(scores[:3]) / 3, sum(scores[-3:]) / 3
    assert end > start + 0.05 and end > 1.5 * start, f"score did not rise: {scores}"


def test_nan_reward_stops_the_run_naming_step_and_metric_without_a_checkpoint(search_world, tmp_path):
    run_dir = tmp_path / "nan"
    config = load_config(
        "ppo",
        search_world.overrides(
            run_dir, steps=2, **{"reward.scorer": "tests.trainer.scorers:nan_scorer", "trainer.save_freq": 1}
        ),
    )
    trainer = PPOTrainer(config)
    with pytest.raises(TrainingDiverged, match=r"step 1: critic/loss is nan; no checkpoint written"):
        run_in_process(trainer)
    assert CheckpointManager(run_dir).complete_checkpoints() == []


class DivergedOnRay:
    """An actor group whose update fails as a Ray worker's does: the worker's own error wrapped in
    Ray's ``RayTaskError`` (its ``cause``)."""

    world_size = 1

    def run_shards(self, method: str, shards: list) -> dict:
        from ray.exceptions import RayTaskError

        raise RayTaskError(method, "Traceback (in the worker)", NonFiniteLossError("actor/loss is nan"))


def test_a_non_finite_loss_raised_in_a_ray_worker_stops_the_run_as_diverged(tiny_model_dir, tmp_path):
    trainer = grpo_trainer(tiny_model_dir, tmp_path, skip_old_log_prob=True)
    trainer.roles = Roles(actor=DivergedOnRay(), critic=None, reference=None, reward=None)
    with pytest.raises(TrainingDiverged, match=r"^step 1: actor/loss is nan; no checkpoint written$"):
        trainer.update_role("actor", "update_actor", batch=None)  # one rank: the batch is passed as is


ROLLOUT_WORKER = {"resources.rollout_workers": 1}  # in-process: its rollouts generate when drawn
CONTINUED = {**ROLLOUT_WORKER, "trainer.partial_rollout": "continue"}


@pytest.mark.parametrize(
    ("max_staleness", "extra", "expected"),
    [
        (0, {}, [0, 0, 0]),
        (1, {}, [0, 1, 1]),
        (1, {"algorithm.is_mode": "reject", "algorithm.is_level": "sequence"}, [0, 1, 1]),
        (0, ROLLOUT_WORKER, [0, 0, 0]),
        (2, CONTINUED, [0, 1, 2, 2]),
        (3, CONTINUED, [0, 1, 2, 3]),
        (2, {**CONTINUED, "trainer.take_groups": "first_done"}, [0, 1, 2, 2]),
    ],
    ids=[
        "on_policy",
        "ahead_truncated",
        "ahead_rejected_by_sequence",
        "on_policy_on_a_rollout_worker",
        "two_ahead_on_a_rollout_worker",
        "three_ahead_on_a_rollout_worker",
        "two_ahead_groups_first_done",
    ],
)
def test_no_trained_token_is_staler_than_max_staleness_read_from_the_batch_itself(
    search_world, tmp_path, monkeypatch, max_staleness, extra, expected
):
    trained = []  # (the step's version, the versions of the tokens it trains on)
    learn = PPOTrainer.learn

    def spy(self, scored, timer, off_policy):
        batch = scored.batch
        trained.append((self.global_step, batch["response_versions"][batch["response_mask"] > 0], off_policy))
        return learn(self, scored, timer, off_policy)

    monkeypatch.setattr(PPOTrainer, "learn", spy)
    run_dir = tmp_path / f"stale{max_staleness}"
    grpo = {"actor.rollout.n": 2, "actor.update.mini_batch_size": 8, "trainer.max_staleness": max_staleness}
    grpo |= extra
    run("grpo", search_world.overrides(run_dir, steps=len(expected), **grpo), in_process=True)
    assert [step for step, _, _ in trained] == list(range(len(expected)))
    for step, versions, off_policy in trained:
        assert versions.numel() > 0 and off_policy == (max_staleness > 0)
        staleness = step - versions
        assert int(staleness.min()) >= 0 and int(staleness.max()) <= max_staleness
    # on-policy: every token sampled by the weights it trains; drawn ahead by j steps: j updates old
    assert [int((step - v).max()) for step, v, _ in trained] == expected
    rows = read_metrics(run_dir)
    assert [r["off_policy/staleness_max"] for r in rows] == expected
    assert all(("off_policy/ess" in r) == (max_staleness > 0) for r in rows)
    by_groups = extra.get("trainer.take_groups") == "first_done"  # the group buffer's figures
    assert all(("rollout_buffer/bound_waits" in r) == by_groups for r in rows)
    if "algorithm.is_mode" in extra:  # rejection is reported; what it rejects depends on the weights
        for r in rows:  # the reject mode ran, not the truncation
            assert 0 <= r["off_policy/is_rejected_frac"] <= 1 and r["off_policy/is_truncated_frac"] == 0
    if "resources.rollout_workers" in extra:  # each update's weights reached the rollout worker
        assert all("timing_s/weight_push" in r for r in rows)
        # a rollout drawn on the weights it then trains with: the engine's and the actor's log-probs
        # agree, after the updates too (a rollout worker left on its first weights would not)
        on_policy = [r for r, stale in zip(rows, expected, strict=True) if stale == 0]
        assert len(on_policy) >= (len(rows) if max_staleness == 0 else 1)
        assert all(r["rollout/logprob_diff"] < 1e-3 for r in on_policy)
        assert all(r["rollout/logprob_diff"] > 1e-3 for r, stale in zip(rows, expected, strict=True) if stale)


def test_on_policy_on_a_rollout_worker_is_the_synchronous_trainer_bit_for_bit(search_world, tmp_path):
    """``max_staleness`` 0 with a rollout worker samples the same trajectories with the same weights:
    the final weights and every logged figure but the clocks and memory readings equal the actor-only
    run's. The worker's engine computes the sampling log-probs in another batch shape, so their gap to
    the actor's (``rollout/logprob_diff``) agrees to float rounding, not to the bit; the actor's engine
    never sleeps there, so it reports no freed memory."""
    grpo = {"actor.rollout.n": 2, "actor.update.mini_batch_size": 8}
    runs = {}
    for name, extra in (("synchronous", {}), ("rollout_worker", ROLLOUT_WORKER)):
        run_dir = tmp_path / name
        _, _, after = run("grpo", search_world.overrides(run_dir, steps=3, **grpo, **extra), in_process=True)
        runs[name] = (after["actor"], read_metrics(run_dir))
    (weights, rows), (worker_weights, worker_rows) = runs["synchronous"], runs["rollout_worker"]
    assert worker_weights == weights
    measured = ("timing_s/", "training/elapsed_s", "perf/", "memory/", "throughput/", "actor/rss_gib")
    measured += ("actor/peak_rss_gib", "rollout/weight_load_s", "actor/engine_sleep_freed_mb")
    for row, worker_row in zip(rows, worker_rows, strict=True):
        assert "actor/engine_sleep_freed_mb" in row and "actor/engine_sleep_freed_mb" not in worker_row
        figures = {k: v for k, v in row.items() if not k.startswith(measured)}
        assert set(figures) == {k for k in worker_row if not k.startswith(measured)}
        gap = figures.pop("rollout/logprob_diff")
        assert worker_row["rollout/logprob_diff"] == pytest.approx(gap, abs=1e-6)
        assert len(figures) > 20 and {k: worker_row[k] for k in figures} == figures


def test_a_partial_rollout_streams_each_updates_weights_to_the_rollout_in_flight_with_their_version(
    search_world, tmp_path, monkeypatch
):
    from agentrl.workers.actor import ActorWorker

    synced = []  # the version each sync after an update announced (None: the sync before a draw)
    sync = ActorWorker.sync_engine

    def spy(self, weights_version=None):
        synced.append(weights_version)
        return sync(self, weights_version)

    monkeypatch.setattr(ActorWorker, "sync_engine", spy)
    run_dir = tmp_path / "partial"
    grpo = {"actor.rollout.n": 2, "actor.update.mini_batch_size": 8, "trainer.max_staleness": 1}
    grpo |= {"trainer.partial_rollout": "continue"}
    run("grpo", search_world.overrides(run_dir, steps=3, **grpo), in_process=True)
    # after steps 1 and 2 the next step's rollout is in flight and takes the new weights; after the
    # last nothing is
    assert [v for v in synced if v is not None] == [1, 2]
    rows = read_metrics(run_dir)
    assert [r["off_policy/staleness_max"] for r in rows] == [0, 1, 1]  # in-process: sampled before
    assert (
        all(r["timing_s/weight_sync_partial"] >= 0 for r in rows[:2])
        and "timing_s/weight_sync_partial" not in rows[2]
    )


def test_a_group_generated_alone_samples_the_tokens_it_samples_in_its_whole_draw(search_world, tmp_path):
    """``take_groups=first_done`` submits each prompt's group as a call of its own; seeded from its
    draw's stream at its own rows, it samples what the draw's one rollout does, on the same weights."""
    grpo = {"actor.rollout.n": 2, "trainer.max_staleness": 2, "trainer.take_groups": "first_done"}
    config = load_config("grpo", search_world.overrides(tmp_path / "alone", **grpo, **CONTINUED))
    trainer = PPOTrainer(config)
    start_in_process(trainer)
    try:
        sampler = trainer.sampler
        state = trainer.loader.state_dict()
        whole = sampler.submit(0, 0).result()
        trainer.loader.load_state_dict(state)
        prompts = trainer.loader.next_batch()
        alone = [sampler.submit_group(p, 0, i, 0, 0).result() for i, p in enumerate(prompts)]
    finally:
        trainer.shutdown()
    tokens = [t.response_ids for t in whole.trajectories]
    assert len(prompts) > 1 and len(set(map(tuple, tokens))) > 1
    assert [t.response_ids for part in alone for t in part.trajectories] == tokens
