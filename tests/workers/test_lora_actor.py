"""LoRA on the real actor worker, without Ray: adapters train, the base stays, the reference is
the base, the engine and the checkpoint get the merged policy."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
import torch

from agentrl.config import load_config
from agentrl.config.loader import ConfigError
from agentrl.config.schema import LoraConfig
from agentrl.engines.base import SamplingParams
from agentrl.models.loading import load_causal_lm
from agentrl.models.lora import merged_tensors
from agentrl.workers.actor import ActorWorker, PolicyWorker
from tests.support.actor_ranks import actor_section, context, ppo_batch


def lora_actor(model_dir, rank: int = 4, lr: float = 1e-2) -> ActorWorker:
    section = replace(actor_section(str(model_dir), lr=lr), lora=LoraConfig(rank=rank, alpha=8.0))
    return ActorWorker(section, context("dp"))


@pytest.fixture(scope="module")
def trained(tiny_model_dir):
    """A LoRA actor after one update, with the log-probs of a fixed batch before it."""
    worker = lora_actor(tiny_model_dir)
    batch = ppo_batch(worker.model.config.vocab_size)
    before = worker.compute_log_prob(batch)
    base_before = {
        k: v.clone() for k, v in worker.model.get_base_model().state_dict().items() if "lora_" not in k
    }
    worker.update_actor(batch)
    return worker, batch, before, base_before


def test_fresh_adapters_leave_the_policy_equal_to_the_base_model(tiny_model_dir):
    worker = lora_actor(tiny_model_dir)
    batch = ppo_batch(worker.model.config.vocab_size)
    base = PolicyWorker(actor_section(str(tiny_model_dir)), context("dp"))
    torch.testing.assert_close(worker.compute_log_prob(batch), base.compute_log_prob(batch))


def test_an_update_moves_only_the_adapters(trained):
    worker, batch, before, base_before = trained
    after = worker.compute_log_prob(batch)
    assert (after - before).abs().max() > 1e-3, "the adapters must change the policy"
    for name, tensor in worker.model.get_base_model().state_dict().items():
        if "lora_" not in name:
            assert torch.equal(tensor, base_before[name]), f"frozen base weight {name} moved"
    trainable = [n for n, p in worker.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_the_reference_is_the_base_model_with_adapters_disabled(trained, tiny_model_dir):
    worker, batch, before, _ = trained
    base = PolicyWorker(actor_section(str(tiny_model_dir)), context("dp"))
    reference = worker.compute_ref_log_prob(batch)
    torch.testing.assert_close(reference, base.compute_log_prob(batch))
    torch.testing.assert_close(reference, before)  # the starting policy, after the policy moved
    assert (worker.compute_log_prob(batch) - reference).abs().max() > 1e-3


def test_merged_weights_score_like_the_adapted_policy(trained):
    worker, batch, _, _ = trained
    merged = load_causal_lm(worker.model_path)
    missing, unexpected = merged.load_state_dict(dict(merged_tensors(worker.model)), strict=False)
    assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
    plain = PolicyWorker(actor_section(str(worker.model_path)), context("dp"))
    plain.model = merged
    torch.testing.assert_close(
        plain.compute_log_prob(batch), worker.compute_log_prob(batch), atol=1e-5, rtol=0
    )


def test_the_engine_generates_with_the_merged_weights_after_a_sync(trained, tokenizer):
    worker, _, _, _ = trained
    assert worker.engine_link.choice.own_copy, "a LoRA actor's engine holds plain merged weights"
    engine = worker.rollout.engine
    worker.engine_link.push()
    prompt = tokenizer("Question: who wrote it?")["input_ids"]
    params = SamplingParams(max_new_tokens=8, greedy=True)
    out = asyncio.run(engine.generate(prompt, params)).token_ids
    merged = load_causal_lm(worker.model_path)
    merged.load_state_dict(dict(merged_tensors(worker.model)), strict=False)
    with torch.no_grad():
        expected = merged.generate(
            torch.tensor([prompt]), max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )[0, len(prompt) :].tolist()
    assert out[: len(expected)] == expected[: len(out)]


def test_a_checkpoint_holds_the_merged_policy_and_restores_the_adapters(trained, tmp_path):
    worker, batch, _, _ = trained
    worker.save_checkpoint(str(tmp_path))
    assert (tmp_path / "actor" / "adapter" / "adapter_model.safetensors").is_file()
    served = PolicyWorker(actor_section(str(tmp_path / "actor")), context("dp"))
    expected = worker.compute_log_prob(batch)
    torch.testing.assert_close(served.compute_log_prob(batch), expected, atol=1e-5, rtol=0)
    fresh = lora_actor(worker.model_path)
    fresh.load_checkpoint(str(tmp_path))
    torch.testing.assert_close(fresh.compute_log_prob(batch), expected, atol=1e-6, rtol=0)


def test_lora_under_fsdp_is_refused_by_name(tiny_model_dir):
    with pytest.raises(ConfigError, match="actor.lora.rank > 0 needs resources.strategy=dp"):
        load_config(
            "grpo", [f"actor.model_path={tiny_model_dir}", "actor.lora.rank=8", "resources.strategy=fsdp"]
        )


def test_a_negative_lora_rank_is_refused_by_name(tiny_model_dir):
    with pytest.raises(ConfigError, match="actor.lora.rank"):
        load_config("grpo", [f"actor.model_path={tiny_model_dir}", "actor.lora.rank=-1"])
