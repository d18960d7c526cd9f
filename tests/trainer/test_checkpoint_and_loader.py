"""Atomic checkpoints, the resumable prompt loader and the trainer's stopping rule (no Ray)."""

import json
from pathlib import Path
from types import SimpleNamespace

from agentrl.config import load_config
from agentrl.trainer.checkpoint import CheckpointManager
from agentrl.trainer.dataset import StatefulLoader
from agentrl.trainer.ppo_trainer import PPOTrainer
from agentrl.trainer.roles import Roles
from agentrl.trainer.step_metrics import StepTimer
from agentrl.trainer.step_sampler import StepSampler


def test_only_sealed_checkpoints_count_and_old_ones_are_pruned(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=2)
    for step in (1, 2, 3):
        partial = manager.partial_dir(step)
        (partial / "weights.bin").write_bytes(b"x")
        manager.commit(partial, step, {})
    assert [s for s, _ in manager.complete_checkpoints()] == [2, 3]
    crashed = manager.partial_dir(4)
    (crashed / "weights.bin").write_bytes(b"half")
    assert manager.latest().name == "step_3"
    unsealed = tmp_path / "checkpoints" / "step_5"
    unsealed.mkdir()  # a directory without COMPLETE is never taken for a checkpoint
    assert manager.latest().name == "step_3"
    partial = manager.partial_dir(6)
    manager.commit(partial, 6, {"note": "after crash"})
    assert [s for s, _ in manager.complete_checkpoints()] == [3, 6]
    assert not crashed.exists(), "a later save cleans up the crashed partial"


def test_the_best_scored_checkpoint_survives_pruning_and_ties_go_to_the_later_step(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=1)
    for step, score in ((2, 0.10), (4, 0.30), (6, None), (8, 0.20), (10, 0.30), (12, 0.25)):
        partial = manager.partial_dir(step)
        manager.commit(partial, step, {} if score is None else {"score": score})
    assert manager.best().name == "step_10", "0.30 twice: the later step, trained longer, wins"
    assert [s for s, _ in manager.complete_checkpoints()] == [10, 12], "the last one and the best one"
    unscored = CheckpointManager(tmp_path / "plain", keep_last=1)
    unscored.commit(unscored.partial_dir(1), 1, {})
    assert unscored.best() is None, "without scores there is no best: the caller takes latest()"


def test_loader_resumes_at_the_exact_position_across_epochs():
    items = list(range(10))
    straight = StatefulLoader(items, batch_size=3, seed=7)
    expected = [straight.next_batch() for _ in range(8)]  # 3 batches per epoch: crosses 2 epochs
    first = StatefulLoader(items, batch_size=3, seed=7)
    for _ in range(4):
        first.next_batch()
    resumed = StatefulLoader(items, batch_size=3, seed=7)
    resumed.load_state_dict(first.state_dict())
    assert [resumed.next_batch() for _ in range(4)] == expected[4:]
    assert expected[0] != expected[3], "each epoch has its own order"
    assert len(set(sum(expected[:3], []))) == 9, "an epoch never repeats an item"


def eight_prompt_trainer(tiny_model_dir: Path, tmp_path: Path) -> PPOTrainer:
    rows = [
        {
            "data_source": "toy",
            "prompt": [{"role": "user", "content": f"question {i}"}],
            "reward_model": {"ground_truth": {"target": [f"answer {i}"]}},
            "extra_info": {"index": i},
        }
        for i in range(8)
    ]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = load_config(
        "ppo",
        [
            f"actor.model_path={tiny_model_dir}",
            f"data.train_files=[{train}]",
            "data.train_batch_size=4",
            "data.shuffle=false",
            "trainer.total_epochs=1",
            f"trainer.run_dir={tmp_path / 'run'}",
        ],
    )
    return PPOTrainer(config)


def test_one_epoch_of_eight_prompts_in_batches_of_four_is_two_steps(tiny_model_dir, tmp_path):
    """``trainer.total_epochs=1`` stops after the epoch's last batch, not one batch into the next."""
    trainer = eight_prompt_trainer(tiny_model_dir, tmp_path)
    drawn = []
    while not trainer.finished():  # the loop of fit(), without the workers
        drawn.append([p.index for p in trainer.loader.next_batch()])
        trainer.global_step += 1
    assert drawn == [[0, 1, 2, 3], [4, 5, 6, 7]]


class PromptIndices:
    """The actor group's rollout, in this process: a submitted rollout is the indices of its prompts."""

    def submit_chunks(
        self, method: str, prompts: list, n: int, seed: int | None, validate: bool, weights_version: int
    ):
        rollout = ([p.index for p in prompts], weights_version)  # its prompts, and the weights it samples
        return SimpleNamespace(result=lambda: rollout)


def test_one_step_off_trains_the_batch_drawn_ahead_at_the_end_of_the_epoch(tiny_model_dir, tmp_path):
    """A rollout in flight holds the epoch's last batch: the run is not over until it is trained,
    nothing is drawn ahead from the next epoch, and a checkpoint written while one is in flight
    resumes before its prompts."""
    trainer = eight_prompt_trainer(tiny_model_dir, tmp_path)
    roles = Roles(actor=PromptIndices(), critic=None, reference=None, reward=None)
    trainer.sampler = StepSampler(trainer.config, roles, trainer.tokenizer, trainer.loader, grouped=False)
    trained, resume_from = [], []
    while not trainer.finished():  # the loop of off_policy_step, without the workers
        indices, version = trainer.sampler.take_ahead(trainer.global_step, StepTimer()).rollout
        if trainer.can_draw_ahead():
            trainer.sampler.draw_ahead(trainer.global_step + 1, trainer.global_step)
        trained.append((indices, trainer.global_step - version))  # the staleness it is trained at
        resume_from.append(trainer.sampler.loader_state()["position"])
        trainer.global_step += 1
    assert trained == [([0, 1, 2, 3], 0), ([4, 5, 6, 7], 1)]
    assert resume_from == [1, 2], "step 1's checkpoint redraws the batch in flight; step 2's is at the end"
    assert not trainer.sampler.in_flight
