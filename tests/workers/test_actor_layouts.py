"""The actor's and the critic's update and no-grad passes do not depend on how the batch is laid
out for the forward pass: packed rows and chunked vocabulary projection give the padded result."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from agentrl.config.schema import CriticConfig
from agentrl.models.attention import VARLEN_SDPA
from agentrl.workers.actor import ActorWorker
from agentrl.workers.critic import CriticWorker
from tests.support.actor_ranks import actor_section, context, gathered_weights, ppo_batch


def with_layout(section, packed: bool, chunk: int | None = None):
    update = replace(section.update, micro_batch_size=2, pack_sequences=packed)
    if chunk is not None:
        update = replace(update, logit_chunk_tokens=chunk)
    return replace(section, update=update)


def packed_calls(model: torch.nn.Module) -> list[bool]:
    """Records, per forward call, whether it ran on packed rows (no attention mask, positions given)."""
    calls: list[bool] = []
    model.register_forward_pre_hook(
        lambda _m, _a, kw: calls.append(kw.get("attention_mask") is None), with_kwargs=True
    )
    return calls


def actor_after_update(model_dir, packed: bool, chunk: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    worker = ActorWorker(with_layout(actor_section(str(model_dir)), packed, chunk), context("dp"))
    calls = packed_calls(worker.model)
    batch = ppo_batch(worker.model.config.vocab_size)
    log_probs = worker.compute_log_prob(batch)
    worker.update_actor(batch)
    assert set(calls) == {packed}, calls
    assert (worker.model.config._attn_implementation == VARLEN_SDPA) == packed
    return log_probs, {k: v.detach().clone() for k, v in worker.model.state_dict().items()}


@pytest.mark.parametrize(("packed", "chunk"), [(True, 1024), (False, 3), (True, 3)])
def test_packed_or_chunked_actor_passes_give_the_padded_log_probs_and_update(tiny_model_dir, packed, chunk):
    padded_log_probs, padded_weights = actor_after_update(tiny_model_dir, packed=False, chunk=1024)
    log_probs, weights = actor_after_update(tiny_model_dir, packed=packed, chunk=chunk)
    batch = ppo_batch(1000)
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(log_probs[mask], padded_log_probs[mask], rtol=1e-5, atol=1e-5)
    for name, tensor in weights.items():
        # atol 1e-5: on an AVX2-only machine the chunked pass's other summation order moves one
        # Adam-updated weight by 2.6e-6 (of ~0.08); on AVX-512 machines it stayed under 1e-6
        torch.testing.assert_close(tensor, padded_weights[name], rtol=1e-5, atol=1e-5, msg=name)


def critic_after_update(model_dir, packed: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    section = actor_section(str(model_dir))
    critic = CriticConfig(model_path=str(model_dir), optim=section.optim, update=section.update)
    worker = CriticWorker(with_layout(critic, packed), context("dp"))
    calls = packed_calls(worker.model.backbone)
    batch = ppo_batch(worker.model.config.vocab_size)
    values = worker.compute_values(batch)
    batch["values"] = values
    batch["returns"] = values + torch.randn(values.shape, generator=torch.Generator().manual_seed(1))
    worker.update_critic(batch)
    assert set(calls) == {packed}, calls
    assert (worker.model.backbone.config._attn_implementation == VARLEN_SDPA) == packed
    return values, {k: v.detach().clone() for k, v in worker.model.state_dict().items()}


def test_packed_critic_passes_give_the_padded_values_and_update(tiny_model_dir):
    padded_values, padded_weights = critic_after_update(tiny_model_dir, packed=False)
    values, weights = critic_after_update(tiny_model_dir, packed=True)
    mask = ppo_batch(1000)["response_mask"].bool()
    torch.testing.assert_close(values[mask], padded_values[mask], rtol=1e-5, atol=1e-5)
    for name, tensor in weights.items():
        torch.testing.assert_close(tensor, padded_weights[name], rtol=1e-5, atol=1e-6, msg=name)


def test_packed_rows_under_fsdp_with_gradient_checkpointing_give_the_padded_dp_update(tiny_model_dir):
    """The varlen attention is looked up again when checkpointed layers recompute in backward,
    and FSDP2 wraps the layers it lives in."""
    padded_log_probs, padded_weights = actor_after_update(tiny_model_dir, packed=False, chunk=1024)
    section = with_layout(actor_section(str(tiny_model_dir)), packed=True)
    worker = ActorWorker(replace(section, gradient_checkpointing=True), context("fsdp"))
    try:
        batch = ppo_batch(worker.model.config.vocab_size)
        log_probs = worker.compute_log_prob(batch)
        worker.update_actor(batch)
        weights = gathered_weights(worker)
    finally:
        worker.shutdown()
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(log_probs[mask], padded_log_probs[mask], rtol=1e-5, atol=1e-5)
    for name, tensor in weights.items():
        torch.testing.assert_close(tensor, padded_weights[name], rtol=1e-5, atol=1e-6, msg=name)
