"""FSDP and mixed precision on the real actor worker, without Ray (spawned gloo ranks)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from agentrl.models.loading import load_causal_lm
from agentrl.workers.actor import ActorWorker
from tests.support.actor_ranks import actor_section, context, gathered_weights, ppo_batch, updated_weights

pytestmark = pytest.mark.slow  # spawns real gloo ranks


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def fsdp_two_ranks(tiny_model_dir) -> dict[str, dict[str, torch.Tensor]]:
    """Two updates on two fsdp ranks: the trained weights and rank 0's engine copy after the sync."""
    return updated_weights(tiny_model_dir, "fsdp", 2, engine_copy=True)


def test_fsdp_on_two_ranks_takes_the_one_rank_and_the_dp_updates(tiny_model_dir, fsdp_two_ranks):
    start = {k: v.float() for k, v in load_causal_lm(tiny_model_dir).state_dict().items()}
    one_rank = updated_weights(tiny_model_dir, "dp", 1)["trained"]
    moved = max_difference(one_rank, start)
    assert moved > 1e-3, "two updates must move the weights"
    runs = {("fsdp", 2): fsdp_two_ranks["trained"]}
    for strategy, world in (("fsdp", 1), ("dp", 2)):
        runs[strategy, world] = updated_weights(tiny_model_dir, strategy, world)["trained"]
    for (strategy, world), weights in runs.items():
        difference = max_difference(weights, one_rank)
        assert difference < 1e-3 * moved, (strategy, world, difference, moved)


def test_fsdp_streams_the_updated_weights_into_each_ranks_engine_copy(fsdp_two_ranks):
    assert max_difference(fsdp_two_ranks["engine"], fsdp_two_ranks["trained"]) == 0.0


def gathered_gradients(worker: ActorWorker) -> dict[str, torch.Tensor]:
    """Each parameter's gradient of the last step, unsharded (a collective under fsdp)."""
    grads = {}
    for name, param in worker.model.named_parameters():
        grad = param.grad.full_tensor() if hasattr(param.grad, "full_tensor") else param.grad
        grads[name] = grad.detach().float()
    return grads


def moved_share(before: dict, after: dict, grads: dict) -> float:
    """Share of the weights with a non-zero gradient whose value changed."""
    touched = {k: grads[k] != 0 for k in grads}
    changed = sum(int(((after[k] != before[k]) & touched[k]).sum()) for k in grads)
    return changed / sum(int(t.sum()) for t in touched.values())


@pytest.mark.parametrize("strategy", ["dp", "fsdp"])
def test_bf16_compute_at_lr_1e_6_moves_nearly_every_fp32_master_weight(tiny_model_dir, tmp_path, strategy):
    worker = ActorWorker(actor_section(str(tiny_model_dir), "bfloat16", lr=1e-6), context(strategy))
    try:
        before = gathered_weights(worker)
        assert all(v.dtype == torch.float32 for v in before.values()), "the master weights are fp32"
        worker.update_actor(ppo_batch(worker.model.config.vocab_size))
        after, grads = gathered_weights(worker), gathered_gradients(worker)
        assert moved_share(before, after, grads) > 0.99
        worker.save_checkpoint(str(tmp_path))
        saved = load_file(tmp_path / "actor" / "model.safetensors")
        assert all(v.dtype == torch.float32 for v in saved.values()), "the saved model holds the fp32 master"
        for name, tensor in saved.items():
            torch.testing.assert_close(tensor, after[name], rtol=0, atol=0)
    finally:
        worker.shutdown()


def test_the_same_step_on_bf16_weights_would_lose_most_updates(tiny_model_dir):
    """What fp32 master weights prevent: AdamW at lr 1e-6 stepping bf16 weights rounds most
    updates away (the reason the optimiser refuses low-precision weights)."""
    worker = ActorWorker(actor_section(str(tiny_model_dir), "float32", lr=1e-6), context("dp"))
    worker.update_actor(ppo_batch(worker.model.config.vocab_size))
    grads = gathered_gradients(worker)
    weights = {n: p.detach().to(torch.bfloat16) for n, p in worker.model.named_parameters()}
    params = [torch.nn.Parameter(w.clone()) for w in weights.values()]
    for param, name in zip(params, weights, strict=True):
        param.grad = grads[name].to(torch.bfloat16)
    torch.optim.AdamW(params, lr=1e-6, weight_decay=0.0).step()
    after = {name: param.detach() for name, param in zip(weights, params, strict=True)}
    assert moved_share(weights, after, grads) < 0.1


def test_an_optimiser_is_never_given_low_precision_weights(tiny_model_dir):
    worker = ActorWorker(actor_section(str(tiny_model_dir), "bfloat16"), context("dp"))
    worker.model.to(torch.bfloat16)
    with pytest.raises(TypeError, match="fp32 master weights"):
        worker._setup_optimizer(worker.actor.optim)
