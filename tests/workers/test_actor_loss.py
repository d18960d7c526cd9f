"""The actor's loss, computed by the worker class itself (no Ray)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from agentrl.agent.collate import collate
from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory
from agentrl.config import load_config
from agentrl.core.batch import Batch
from agentrl.core.losses import agg_loss, kl_penalty, policy_loss
from agentrl.core.masked import masked_mean
from agentrl.models.forward import policy_forward
from agentrl.workers.actor import ActorWorker
from agentrl.workers.base import RunContext
from tests.support.actor_ranks import actor_section, context, ppo_batch


def rollout_batch(vocab_size: int, pad_token_id: int, rows: int = 4, seed: int = 0) -> Batch:
    """Trajectories of random ids: a prompt, a model turn, an observation, a second model turn."""
    generator = torch.Generator().manual_seed(seed)

    def ids(n: int) -> list[int]:
        return torch.randint(3, vocab_size, (n,), generator=generator).tolist()

    trajectories = []
    for i in range(rows):
        traj = Trajectory(prompt=PromptSpec(ids(5 + i)), group_id=f"g{i // 2}", uid=str(i))
        traj.append(ids(6 + 2 * i), Segment.MODEL, [0.0] * (6 + 2 * i))
        traj.append(ids(4), Segment.OBSERVATION)
        traj.append(ids(3 + i), Segment.MODEL, [0.0] * (3 + i))
        trajectories.append(traj)
    batch = collate(trajectories, pad_token_id=pad_token_id)
    batch["old_log_probs"] = torch.zeros(batch["responses"].shape)
    batch["advantages"] = torch.randn(batch["responses"].shape, generator=generator)
    return batch


def saved_for_backward_bytes(fn) -> int:
    """Bytes of every tensor autograd keeps for the backward pass while ``fn`` runs."""
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return total


@pytest.fixture(scope="module")
def actor(tiny_model_dir) -> ActorWorker:
    config = load_config("ppo", [f"actor.model_path={tiny_model_dir}", "actor.entropy_coeff=0"])
    return ActorWorker(config.actor, RunContext.from_config(config))


def test_without_an_entropy_bonus_no_vocabulary_sized_softmax_is_kept_for_backward(actor):
    batch = rollout_batch(actor.model.config.vocab_size, actor.tokenizer.pad_token_id)
    actor.model.train()
    log_probs_only = saved_for_backward_bytes(lambda: policy_forward(actor.model, batch, actor.temperature))
    actor_loss = saved_for_backward_bytes(lambda: actor._actor_loss(batch))
    one_logits_tensor = batch["responses"].numel() * actor.model.config.vocab_size * 4
    assert actor_loss - log_probs_only < one_logits_tensor, (actor_loss, log_probs_only, one_logits_tensor)
    loss, metrics = actor._actor_loss(batch)
    assert metrics["entropy"] > 0 and torch.isfinite(loss)  # the entropy is still reported


def test_the_actor_loss_adds_the_entropy_bonus_and_the_kl_loss_with_their_coefficients(actor):
    batch = rollout_batch(actor.model.config.vocab_size, actor.tokenizer.pad_token_id, seed=1)
    batch["ref_log_probs"] = (
        torch.randn(batch["responses"].shape, generator=torch.Generator().manual_seed(2)) - 3
    )
    mask = batch["response_mask"]
    log_probs, entropy = policy_forward(actor.model, batch, actor.temperature, with_entropy=True)
    pg_loss, _ = policy_loss(log_probs, batch["old_log_probs"], batch["advantages"], mask)
    entropy_term = agg_loss(entropy, mask, "token-mean")
    kl_term = agg_loss(kl_penalty(log_probs, batch["ref_log_probs"], "low_var_kl"), mask, "token-mean")
    original = actor.actor
    try:
        for entropy_coeff, kl_coef in ((0.0, 0.0), (0.3, 0.0), (0.0, 0.7), (0.3, 0.7)):
            actor.actor = replace(
                original,
                entropy_coeff=entropy_coeff,
                use_kl_loss=kl_coef > 0,
                kl_loss_coef=kl_coef,
                kl_loss_type="low_var_kl",
            )
            loss, metrics = actor._actor_loss(batch)
            expected = pg_loss - entropy_coeff * entropy_term + kl_coef * kl_term
            assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-6), (entropy_coeff, kl_coef)
            assert ("kl_loss" in metrics) == (kl_coef > 0)
    finally:
        actor.actor = original
    assert kl_term.item() > 0.01 and entropy_term.item() > 0.01, "both terms must be large enough to show"


def test_the_entropy_metric_is_the_mean_over_model_tokens_whatever_the_loss_aggregation(actor):
    # a Dr. GRPO run divides the loss by the response budget; the reported entropy must not shrink
    batch = rollout_batch(actor.model.config.vocab_size, actor.tokenizer.pad_token_id, seed=3)
    mask = batch["response_mask"]
    _, entropy = policy_forward(actor.model, batch, actor.temperature, with_entropy=True)
    per_token = (entropy * mask).sum() / mask.sum()
    original = actor.actor
    try:
        for mode in ("token-mean", "seq-mean-token-sum-norm", "seq-mean-token-mean"):
            actor.actor = replace(original, loss_agg_mode=mode)
            _, metrics = actor._actor_loss(batch)
            assert metrics["entropy"].item() == pytest.approx(per_token.item(), rel=1e-5), mode
    finally:
        actor.actor = original


def test_the_run_context_decides_the_pi_old_source_once_from_the_config(tiny_model_dir):
    on_policy = [f"actor.model_path={tiny_model_dir}", "actor.rollout.n=2", "actor.update.mini_batch_size=16"]
    recomputed = RunContext.from_config(load_config("grpo", on_policy))
    skipped = RunContext.from_config(load_config("grpo", [*on_policy, "actor.skip_old_log_prob=true"]))
    assert (recomputed.old_log_prob_source, skipped.old_log_prob_source) == ("recomputed", "update_forward")


def test_the_actor_takes_pi_old_from_the_source_it_was_given_not_from_the_batch_keys(actor):
    batch = rollout_batch(actor.model.config.vocab_size, actor.tokenizer.pad_token_id, seed=4)
    generator = torch.Generator().manual_seed(5)
    batch["rollout_log_probs"] = -torch.rand(batch["responses"].shape, generator=generator)
    batch["old_log_probs"] = batch["rollout_log_probs"] - 1.0  # far from the policy: a ratio that clips
    without_old = batch.select(*sorted(set(batch.keys()) - {"old_log_probs"}))
    own_forward = batch.select(*batch.keys())
    own_forward["old_log_probs"] = actor.compute_log_prob(batch)
    recomputed_loss, recomputed_metrics = actor._actor_loss(batch)
    pi_old_is_own_forward, _ = actor._actor_loss(own_forward)
    with pytest.raises(KeyError, match="old_log_probs"):  # a missing π_old is an error, not a mode
        actor._actor_loss(without_old)
    given = actor.context
    try:
        actor.context = replace(given, old_log_prob_source="update_forward")
        forward_loss, forward_metrics = actor._actor_loss(batch)  # the batch's π_old is not read
        without_old_loss, _ = actor._actor_loss(without_old)
    finally:
        actor.context = given
    assert forward_loss.item() == pytest.approx(pi_old_is_own_forward.item(), rel=1e-5, abs=1e-7)
    assert without_old_loss.item() == pytest.approx(forward_loss.item(), rel=1e-6)
    assert recomputed_loss.item() != pytest.approx(forward_loss.item(), rel=1e-3), "the given π_old counts"
    assert "rollout/logprob_diff" in forward_metrics and "rollout/logprob_diff" not in recomputed_metrics


def test_skipping_the_old_log_prob_pass_leaves_a_single_on_policy_update_unchanged(tiny_model_dir):
    # One optimiser step on fresh samples: π_old = π_θ, so the update's own detached forward can
    # stand in for the no-grad pass (actor.skip_old_log_prob) without changing the step.
    section = actor_section(str(tiny_model_dir))
    section = replace(section, update=replace(section.update, micro_batch_size=4))
    sources = ("recomputed", "update_forward")
    workers = [ActorWorker(section, replace(context("dp"), old_log_prob_source=s)) for s in sources]
    drawn = ppo_batch(workers[0].model.config.vocab_size)
    drawn["rollout_log_probs"] = drawn["old_log_probs"]  # the engine's, off the trainer's
    batch = drawn.select(*sorted(set(drawn.keys()) - {"old_log_probs"}))
    mask = batch["response_mask"]
    with_pass = batch.select(*batch.keys())
    with_pass["old_log_probs"] = workers[0].compute_log_prob(batch)
    expected_diff = masked_mean((with_pass["old_log_probs"] - batch["rollout_log_probs"]).abs(), mask)
    metrics = [workers[0].update_actor(with_pass), workers[1].update_actor(batch)]
    skipped = workers[1].model.state_dict()
    for name, tensor in workers[0].model.state_dict().items():
        torch.testing.assert_close(skipped[name], tensor, rtol=1e-5, atol=1e-7, msg=name)
    # emitted under the name the user sees, the one the driver uses when stage 2 runs
    assert metrics[1]["rollout/logprob_diff"] == pytest.approx(expected_diff.item(), rel=1e-5)
    assert "rollout/logprob_diff" not in metrics[0]
    assert not any(name.endswith("logprob_diff") for name in metrics[1] if name != "rollout/logprob_diff")
    assert metrics[1]["actor/pg_loss"] == pytest.approx(metrics[0]["actor/pg_loss"], rel=1e-5)
    assert metrics[0]["actor/grad_norm"] > 0, "the step must move the weights for the comparison to count"
