"""The SFT warm-start trainer: masking, learning, data loading, CLI.

Real components throughout: a tiny random Qwen2 model with a tokenizer trained on the
synthetic world's texts. (Demonstrations are recorded in ``tests/agent/test_demonstrations.py``.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentrl.agent.dump import dump_trajectories
from agentrl.agent.trajectory import PromptSpec, Segment
from agentrl.config.schema import OptimConfig
from agentrl.data.qa import make_prompt
from agentrl.data.world import generate_world, oracle_trajectory
from agentrl.models.tiny import make_tiny_model_dir
from agentrl.trainer.sft import SFTConfig, SFTExample, SFTTrainer, load_sft_examples, main

M, OBS = int(Segment.MODEL), int(Segment.OBSERVATION)


@pytest.fixture(scope="module")
def tiny_world(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("sft_world")
    world = generate_world(seed=3, num_countries=4, num_people=6, num_companies=3, num_distractors=4)
    texts = [p["contents"] for p in world.passages] + [make_prompt(q.question) for q in world.train_questions]
    texts += [t.text for q in world.train_questions for t in oracle_trajectory(q)]
    model_dir = make_tiny_model_dir(root / "model", texts=texts, size="nano", seed=0)
    return world, model_dir, root


def _config(lr: float = 1e-2, steps: int = 30, batch: int = 4) -> SFTConfig:
    return SFTConfig(
        epochs=1000,
        max_steps=steps,
        batch_size=batch,
        micro_batch_size=2,
        optim=OptimConfig(lr=lr, warmup_ratio=0.0),
    )


def _mean_log_prob(
    model: torch.nn.Module, prompt: list[int], response: list[int], positions: list[int]
) -> float:
    """Mean log p of response[j] for j in positions, by a plain forward over prompt+response."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    return float(sum(logp[len(prompt) - 1 + j, response[j]] for j in positions) / len(positions))


def test_loss_is_the_token_mean_nll_of_model_tokens_only(tiny_world):
    _, model_dir, _ = tiny_world
    trainer = SFTTrainer(model_dir, _config())
    prompt, response = [5, 6, 7, 8], [20, 21, 22, 23, 24, 25]
    segments = [M, M, OBS, OBS, OBS, M]
    nll, count = trainer.loss(trainer._batch([SFTExample(prompt, response, segments)]))
    assert count == 3
    expected = -_mean_log_prob(trainer.model, prompt, response, [0, 1, 5])
    assert nll.item() / count == pytest.approx(expected, rel=1e-5)


def test_padding_does_not_change_the_loss(tiny_world):
    """A short example batched with a long one scores the same as alone (left/right padding)."""
    _, model_dir, _ = tiny_world
    trainer = SFTTrainer(model_dir, _config())
    short = SFTExample([9, 10], [30, 31, 32], [M, OBS, M])
    long = SFTExample(
        [11, 12, 13, 14, 15, 16], [40, 41, 42, 43, 44, 45, 46, 47], [M, M, M, OBS, OBS, M, M, M]
    )
    alone = sum(trainer.loss(trainer._batch([e]))[0].item() for e in (short, long))
    together = trainer.loss(trainer._batch([short, long]))[0].item()
    assert together == pytest.approx(alone, rel=1e-5)


def test_training_learns_model_tokens_and_never_observation_tokens(tiny_world, tmp_path):
    """The observation run is as predictable as the model run (fixed tokens), yet only the
    model run's likelihood rises: observation tokens are context, not targets."""
    _, model_dir, _ = tiny_world
    trainer = SFTTrainer(model_dir, _config(lr=1e-2, steps=40))
    prompt = [50, 51, 52]
    response = [60, 61, 62, 63, 70, 71, 72, 73, 64, 65]
    segments = [M, M, M, M, OBS, OBS, OBS, OBS, M, M]
    model_pos, obs_pos = [0, 1, 2, 3, 8, 9], [4, 5, 6, 7]
    before_model = _mean_log_prob(trainer.model, prompt, response, model_pos)
    before_obs = _mean_log_prob(trainer.model, prompt, response, obs_pos)
    history = trainer.fit([SFTExample(prompt, response, segments)] * 8, progress=False)
    after_model = _mean_log_prob(trainer.model, prompt, response, model_pos)
    after_obs = _mean_log_prob(trainer.model, prompt, response, obs_pos)
    assert len(history) == 40 and history[-1]["loss"] < history[0]["loss"] * 0.2
    assert after_model > -0.5 > before_model, (before_model, after_model)
    assert after_obs < before_obs + 1.0, f"observation tokens were learned: {before_obs} -> {after_obs}"
    out = trainer.save(tmp_path / "out")
    reloaded = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert _mean_log_prob(reloaded, prompt, response, model_pos) == pytest.approx(after_model, abs=1e-4)


def test_max_steps_and_epochs_bound_the_run(tiny_world):
    _, model_dir, _ = tiny_world
    ex = [SFTExample([1, 2], [3, 4], [M, M])] * 10
    assert SFTConfig(epochs=3, batch_size=4).total_steps(10) == 9
    assert SFTConfig(epochs=3, batch_size=4, max_steps=2).total_steps(10) == 2
    history = SFTTrainer(model_dir, SFTConfig(epochs=2, batch_size=4, micro_batch_size=4)).fit(
        ex, progress=False
    )
    assert [int(h["step"]) for h in history] == list(range(1, 7))
    with pytest.raises(ValueError, match="sft.batch_size"):
        SFTConfig(batch_size=0)


def test_bf16_compute_keeps_fp32_weights_and_tracks_the_fp32_loss(tiny_world):
    _, model_dir, _ = tiny_world
    ex = [SFTExample([1, 2, 5], [3, 4, 6, 7], [M, M, OBS, M])] * 4
    losses = {}
    for dtype in ("float32", "bfloat16"):
        trainer = SFTTrainer(model_dir, SFTConfig(batch_size=4, micro_batch_size=2, compute_dtype=dtype))
        losses[dtype] = trainer.fit(ex, progress=False)[0]["loss"]
        assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert losses["bfloat16"] != losses["float32"], "bf16 autocast must actually run"
    assert losses["bfloat16"] == pytest.approx(losses["float32"], rel=0.05)
    with pytest.raises(ValueError, match="sft.compute_dtype"):
        SFTConfig(compute_dtype="fp8")


def test_examples_without_model_tokens_or_misaligned_are_rejected():
    with pytest.raises(ValueError, match="no MODEL tokens"):
        SFTExample([1], [2, 3], [OBS, OBS])
    with pytest.raises(ValueError, match="differ in length"):
        SFTExample([1], [2, 3], [M])
    with pytest.raises(ValueError, match="MODEL .1. and OBSERVATION .2."):
        SFTExample([1], [2, 3], [M, 0])


def test_load_sft_examples_names_line_and_field_and_filters_by_reward(tmp_path):
    path = tmp_path / "d.jsonl"
    good = {"prompt_ids": [1, 2], "response_ids": [3, 4], "segments": [M, OBS], "reward": 1.0}
    path.write_text("\n".join(json.dumps(r) for r in [good, good | {"reward": 0.0}]) + "\n")
    assert len(load_sft_examples(path)) == 2
    assert len(load_sft_examples(path, min_reward=0.5)) == 1
    path.write_text(json.dumps(good) + "\n" + json.dumps(good | {"segments": "MO"}) + "\n")
    with pytest.raises(ValueError, match=r"d.jsonl:2: field 'segments'"):
        load_sft_examples(path)
    path.write_text(json.dumps(good) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"d.jsonl:2: not valid JSON"):
        load_sft_examples(path)
    with pytest.raises(FileNotFoundError, match="--data"):
        load_sft_examples(tmp_path / "missing.jsonl")


def test_cli_trains_on_a_trajectory_dump_and_saves_an_hf_dir(tiny_world, tmp_path, capsys):
    _, model_dir, _ = tiny_world
    from agentrl.agent.trajectory import Trajectory
    from agentrl.models.loading import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    trajs = []
    for k in range(4):
        t = Trajectory(prompt=PromptSpec([1, 2, 3 + k]), group_id="g", uid=str(k))
        t.append([10, 11, 12], Segment.MODEL, [0.0] * 3)
        t.append([13, 14], Segment.OBSERVATION)
        t.append([15, 16], Segment.MODEL, [0.0] * 2)
        trajs.append(t)
    data = dump_trajectories(trajs, tmp_path / "dump.jsonl", tokenizer, rewards=[1.0, 0.0, 1.0, 1.0])
    out = tmp_path / "sft_out"
    code = main(
        [
            "--data",
            str(data),
            "--model",
            str(model_dir),
            "--out",
            str(out),
            "--max-steps",
            "3",
            "--batch-size",
            "2",
            "--min-reward",
            "0.5",
            "--lr",
            "1e-2",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["examples"] == 3 and summary["steps"] == 2  # 3 examples / batch 2 = 2 steps per epoch
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    assert len((out / "sft_metrics.jsonl").read_text().splitlines()) == 2
    assert main(["--data", str(tmp_path / "none.jsonl"), "--model", str(model_dir), "--out", str(out)]) == 2
    assert "--data" in capsys.readouterr().err


def test_cli_rejects_bad_config_values(tiny_world, tmp_path, capsys):
    _, model_dir, _ = tiny_world
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt_ids": [1], "response_ids": [2], "segments": [M]}) + "\n")
    assert (
        main(["--data", str(data), "--model", str(model_dir), "--out", str(tmp_path / "o"), "--lr", "0"]) == 2
    )
    assert "sft.optim.lr" in capsys.readouterr().err
    assert not Path(tmp_path / "o").exists()
