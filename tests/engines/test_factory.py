"""The engine factory: which engine serves the actor's rollout, and how it is built."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from agentrl.config.schema import RolloutConfig
from agentrl.engines import factory
from agentrl.engines.factory import EngineChoice, choose_engine
from agentrl.engines.hf import HFEngine
from agentrl.models.loading import load_causal_lm

# (engine, strategy, one-step-off, lora) -> the engine holds its own weight copy
CASES = [
    ("hf", "dp", False, False, False),
    ("hf", "fsdp", False, False, True),
    ("hf", "dp", True, False, True),
    ("hf", "dp", False, True, True),
    ("vllm", "dp", False, False, True),
    ("vllm-async", "dp", False, False, True),
    ("vllm", "fsdp", True, False, True),
]


@pytest.mark.parametrize(("engine", "strategy", "overlap", "lora", "own_copy"), CASES)
def test_only_the_transformers_engine_under_plain_dp_shares_the_training_module(
    engine, strategy, overlap, lora, own_copy
):
    choice = choose_engine(
        RolloutConfig(engine=engine), strategy=strategy, overlap_rollout=overlap, lora=lora
    )
    assert choice.kind == engine
    assert choice.own_copy is own_copy


@pytest.mark.parametrize(
    ("overlap", "free_memory", "sleeps"), [(False, True, True), (True, True, False), (False, False, False)]
)
def test_an_engine_sleeps_between_rollouts_unless_it_runs_during_the_update(overlap, free_memory, sleeps):
    rollout = RolloutConfig(engine="vllm", free_engine_memory=free_memory)
    choice = choose_engine(rollout, strategy="dp", overlap_rollout=overlap, lora=False)
    assert choice.sleeps is sleeps


def test_only_a_transformers_copy_is_synced_before_its_first_rollout():
    assert EngineChoice("hf", own_copy=True, sleeps=True).syncs_before_first_rollout
    assert not EngineChoice("hf", own_copy=False, sleeps=True).syncs_before_first_rollout
    assert not EngineChoice("vllm", own_copy=True, sleeps=True).syncs_before_first_rollout


PARTIAL = [("off", False), ("continue", False), ("recompute", True)]


@pytest.mark.parametrize(("partial", "recomputes"), PARTIAL)
def test_only_a_recomputing_partial_rollout_builds_an_engine_that_re_prefills_under_new_weights(
    partial, recomputes, tiny_dir, tokenizer
):
    rollout = RolloutConfig(max_batch_size=8)
    actor_side = choose_engine(
        rollout, strategy="dp", overlap_rollout=True, lora=False, partial_rollout=partial
    )
    for choice in (actor_side, factory.rollout_role_engine(rollout, partial)):
        assert choice.recomputes is recomputes
        engine = _build(choice, load_causal_lm(tiny_dir), tokenizer, tiny_dir, rollout)
        assert engine._recompute_on_new_weights is recomputes
        engine.shutdown()


def _build(choice: EngineChoice, model: torch.nn.Module, tokenizer, model_dir, rollout=None):
    return choice.build(
        rollout or RolloutConfig(max_batch_size=8),
        model=model,
        tokenizer=tokenizer,
        model_path=model_dir,
        dtype=torch.bfloat16,
        device=torch.device("cpu"),
    )


def test_a_shared_transformers_engine_generates_with_the_training_module_itself(tiny_dir, tokenizer):
    model = load_causal_lm(tiny_dir)
    engine = _build(EngineChoice("hf", own_copy=False, sleeps=True), model, tokenizer, tiny_dir)
    assert isinstance(engine, HFEngine)
    assert engine.model is model
    assert engine.max_batch_size == 8


def test_a_transformers_copy_is_loaded_from_the_directory_in_the_compute_dtype(tiny_dir, tokenizer):
    model = load_causal_lm(tiny_dir)
    engine = _build(EngineChoice("hf", own_copy=True, sleeps=True), model, tokenizer, tiny_dir)
    assert engine.model is not model
    assert next(engine.model.parameters()).dtype == torch.bfloat16
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(engine.model.state_dict()[name], tensor.to(torch.bfloat16))


def test_a_vllm_engine_is_built_from_the_directory_with_the_rollout_settings(monkeypatch, tiny_dir):
    calls = []
    monkeypatch.setattr(factory, "build_engine", lambda kind, **kwargs: calls.append((kind, kwargs)))
    rollout = replace(
        RolloutConfig(engine="vllm-async"),
        gpu_memory_utilization=0.3,
        enforce_eager=True,
        tensor_parallel_size=2,
    )
    _build(
        EngineChoice("vllm-async", own_copy=True, sleeps=True), torch.nn.Linear(1, 1), None, tiny_dir, rollout
    )
    assert calls == [
        (
            "vllm-async",
            {
                "model_path": tiny_dir,
                "max_batch_size": rollout.max_batch_size,
                "gpu_memory_utilization": 0.3,
                "enforce_eager": True,
                "tensor_parallel_size": 2,
            },
        )
    ]
