"""KL estimators, loss aggregation, policy and value losses, entropy."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.core.losses import (
    agg_loss,
    entropy_from_logits,
    kl_penalty,
    log_probs_from_logits,
    policy_loss,
    value_loss,
)

OLD = torch.tensor([[-0.12, -0.08, -0.15, -0.10, -0.05, -0.02]])
REF = torch.tensor([[-0.15, -0.10, -0.18, -0.12, -0.08, -0.03]])


def test_worked_example_k1():
    torch.testing.assert_close(
        kl_penalty(OLD, REF, "k1"), torch.tensor([[0.03, 0.02, 0.03, 0.02, 0.03, 0.01]])
    )
    torch.testing.assert_close(kl_penalty(OLD, REF, "kl"), kl_penalty(OLD, REF, "k1"))


def test_other_kl_estimators_hand_computed():
    delta = OLD - REF
    torch.testing.assert_close(kl_penalty(OLD, REF, "abs"), delta.abs())
    torch.testing.assert_close(kl_penalty(OLD, REF, "k2"), 0.5 * delta**2)
    torch.testing.assert_close(kl_penalty(OLD, REF, "mse"), 0.5 * delta**2)
    expected_k3 = torch.exp(-delta) + delta - 1
    torch.testing.assert_close(kl_penalty(OLD, REF, "k3"), expected_k3)
    torch.testing.assert_close(kl_penalty(OLD, REF, "low_var_kl"), expected_k3)
    assert torch.all(kl_penalty(OLD, REF, "k3") >= 0)
    # k3 clamps at 10 for a wildly diverged policy
    assert kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "k3").item() == 10.0
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        kl_penalty(OLD, REF, "k4")


def test_agg_loss_modes_hand_computed():
    loss = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 100.0, 100.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm", 10).item() == pytest.approx((6 / 10 + 4 / 10) / 2)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        agg_loss(loss, mask, "mean")
    with pytest.raises(ValueError, match="norm_tokens"):
        agg_loss(loss, mask, "seq-mean-token-sum-norm")


def test_dr_grpo_normaliser_does_not_depend_on_the_longest_response_in_the_batch():
    """The same two sequences get the same loss whether the batch's widest row is 3 or 9 tokens."""
    short = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]])
    short_mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    wide = torch.nn.functional.pad(short, (0, 6), value=7.0)  # the batch's longest response is 3x longer
    wide_mask = torch.nn.functional.pad(short_mask, (0, 6))
    narrow_loss = agg_loss(short, short_mask, "seq-mean-token-sum-norm", norm_tokens=16)
    wide_loss = agg_loss(wide, wide_mask, "seq-mean-token-sum-norm", norm_tokens=16)
    assert wide_loss.item() == narrow_loss.item() == pytest.approx((6 / 16 + 9 / 16) / 2)


def test_agg_loss_ignores_nan_under_mask():
    loss = torch.tensor([[1.0, float("nan")]])
    mask = torch.tensor([[1.0, 0.0]])
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        assert torch.isfinite(agg_loss(loss, mask, mode, norm_tokens=4))


def test_policy_loss_hand_computed_with_clip_metrics():
    old = torch.zeros(1, 3)
    new = torch.log(torch.tensor([[1.5, 0.9, 1.1]]))
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones(1, 3)
    loss, metrics = policy_loss(new, old, adv, mask, clip_low=0.2, clip_high=0.2)
    # token0: r=1.5, A>0 → clipped at 1.2 → −1.2 ; token1: r=0.9, A<0 → max(0.9, 0.9)=0.9 ;
    # token2: r=1.1 (inside) → −2.2
    assert loss.item() == pytest.approx((-1.2 + 0.9 - 2.2) / 3, rel=1e-5)
    assert metrics["pg_clipfrac"].item() == pytest.approx(1 / 3)
    assert metrics["ppo_kl"].item() == pytest.approx(-new.mean().item(), rel=1e-5)


def test_asymmetric_clip_and_dual_clip():
    old = torch.zeros(1, 2)
    new = torch.log(torch.tensor([[1.25, 5.0]]))
    adv = torch.tensor([[1.0, -1.0]])
    mask = torch.ones(1, 2)
    loss, _ = policy_loss(new, old, adv, mask, clip_low=0.2, clip_high=0.28)
    # token0 is inside [0.8, 1.28]: −1.25 ; token1: A<0, r=5 → max(5, 1.28)=5
    assert loss.item() == pytest.approx((-1.25 + 5.0) / 2, rel=1e-5)
    loss_dual, metrics = policy_loss(new, old, adv, mask, clip_low=0.2, clip_high=0.28, dual_clip_c=3.0)
    assert loss_dual.item() == pytest.approx((-1.25 + 3.0) / 2, rel=1e-5)
    assert metrics["pg_clipfrac_lower"].item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="dual_clip_c"):
        policy_loss(new, old, adv, mask, dual_clip_c=0.5)


@settings(max_examples=80, deadline=None)
@given(
    log_ratio=st.floats(-1.0, 1.0),
    advantage=st.floats(-3.0, 3.0).filter(lambda a: abs(a) > 1e-3),
    eps=st.floats(0.05, 0.3),
)
def test_policy_gradient_is_zero_where_clipped_in_direction_of_advantage(log_ratio, advantage, eps):
    new = torch.tensor([[log_ratio]], requires_grad=True)
    loss, _ = policy_loss(new, torch.zeros(1, 1), torch.tensor([[advantage]]), torch.ones(1, 1), eps, eps)
    loss.backward()
    ratio = math.exp(log_ratio)
    clipped_up = advantage > 0 and ratio > 1 + eps + 1e-6
    clipped_down = advantage < 0 and ratio < 1 - eps - 1e-6
    if clipped_up or clipped_down:
        assert new.grad.item() == 0.0
    elif 1 - eps + 1e-6 < ratio < 1 + eps - 1e-6:
        assert new.grad.item() == pytest.approx(-advantage * ratio, rel=1e-4)


@settings(max_examples=50, deadline=None)
@given(mask_bits=st.lists(st.booleans(), min_size=1, max_size=10), seed=st.integers(0, 10_000))
def test_policy_and_value_losses_ignore_masked_positions(mask_bits, seed):
    gen = torch.Generator().manual_seed(seed)
    n = len(mask_bits)
    mask = torch.tensor([mask_bits], dtype=torch.float32)
    junk = lambda x: torch.where(mask.bool(), x, torch.randn(1, n, generator=gen) * 50)  # noqa: E731
    lp, old, adv = (torch.randn(1, n, generator=gen) * 0.3 for _ in range(3))
    base_loss, base_m = policy_loss(lp, old, adv, mask)
    loss2, m2 = policy_loss(junk(lp), junk(old), junk(adv), mask)
    torch.testing.assert_close(base_loss, loss2)
    torch.testing.assert_close(base_m["pg_clipfrac"], m2["pg_clipfrac"])
    v, v_old, ret = (torch.randn(1, n, generator=gen) for _ in range(3))
    vl, vm = value_loss(v, v_old, ret, mask)
    vl2, vm2 = value_loss(junk(v), junk(v_old), junk(ret), mask)
    torch.testing.assert_close(vl, vl2)
    torch.testing.assert_close(vm["vf_clipfrac"], vm2["vf_clipfrac"])


def test_value_loss_hand_computed():
    values = torch.tensor([[1.0, 0.0]])
    old = torch.tensor([[0.0, 0.0]])
    returns = torch.tensor([[0.0, 1.0]])
    loss, metrics = value_loss(values, old, returns, torch.ones(1, 2), clip=0.5)
    # token0: unclipped (1−0)²=1, clipped v=0.5 → 0.25 → max 1 ; token1: both 1
    assert loss.item() == pytest.approx(0.5 * (1 + 1) / 2)
    assert metrics["vf_clipfrac"].item() == 0.0
    values = torch.tensor([[-1.0]])
    returns = torch.tensor([[-1.0]])
    loss, metrics = value_loss(values, torch.zeros(1, 1), returns, torch.ones(1, 1), clip=0.5)
    # unclipped 0, clipped (−0.5 + 1)² = 0.25 → clipped branch active
    assert loss.item() == pytest.approx(0.125)
    assert metrics["vf_clipfrac"].item() == 1.0
    loss, _ = value_loss(values, torch.zeros(1, 1), returns, torch.ones(1, 1), clip=None)
    assert loss.item() == 0.0


def test_entropy_and_log_probs_from_logits():
    uniform = torch.zeros(2, 4)
    torch.testing.assert_close(entropy_from_logits(uniform), torch.full((2,), math.log(4)))
    peaked = torch.tensor([[100.0, 0.0, 0.0]])
    assert entropy_from_logits(peaked).item() == pytest.approx(0.0, abs=1e-4)
    logits = torch.randn(3, 5, 7)
    ids = torch.randint(0, 7, (3, 5))
    expected = torch.distributions.Categorical(logits=logits).log_prob(ids)
    torch.testing.assert_close(log_probs_from_logits(logits, ids), expected)
    torch.testing.assert_close(
        entropy_from_logits(logits), torch.distributions.Categorical(logits=logits).entropy()
    )


def test_kl_in_the_reward_is_subtracted_on_model_tokens_only_and_the_score_sits_on_the_last_model_token():
    from agentrl.core.losses import kl_in_reward
    from agentrl.core.placement import place_score_on_last_token

    # row 0: model, model, observation, observation, model, padding; row 1: model, padding...
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    log_prob = torch.tensor([[-1.0, -2.0, -9.0, -9.0, -0.5, -9.0], [-0.2, -9.0, -9.0, -9.0, -9.0, -9.0]])
    ref = torch.tensor([[-1.5, -1.0, -1.0, -1.0, -0.5, -1.0], [-0.1, -1.0, -1.0, -1.0, -1.0, -1.0]])
    scores = place_score_on_last_token(torch.tensor([1.0, 0.0]), mask)
    assert scores.tolist() == [[0, 0, 0, 0, 1.0, 0], [0, 0, 0, 0, 0, 0]]
    rewards, kl = kl_in_reward(scores, log_prob, ref, mask, coef=0.1, kind="k1")
    expected_kl = torch.where(mask.bool(), log_prob - ref, torch.zeros_like(log_prob))
    torch.testing.assert_close(kl, expected_kl)
    torch.testing.assert_close(rewards, scores - 0.1 * expected_kl)
    assert torch.all(rewards[mask == 0] == scores[mask == 0]), "observations and padding carry no KL"
    assert rewards[0, 4].item() == pytest.approx(1.0 - 0.1 * 0.0) and rewards[0, 0].item() == pytest.approx(
        -0.05
    )


def test_token_weights_scale_each_tokens_policy_loss_and_its_gradient():
    torch.manual_seed(0)
    log_prob = torch.randn(2, 5, requires_grad=True)
    old, adv, mask = torch.randn(2, 5), torch.randn(2, 5), torch.ones(2, 5)
    weights = torch.rand(2, 5)
    loss, _ = policy_loss(log_prob, old, adv, mask, agg="seq-mean-token-sum", token_weights=weights)
    (grad,) = torch.autograd.grad(loss, log_prob)
    plain_loss, _ = policy_loss(log_prob, old, adv, mask, agg="seq-mean-token-sum")
    (plain_grad,) = torch.autograd.grad(plain_loss, log_prob)
    torch.testing.assert_close(grad, plain_grad * weights)
    ones, _ = policy_loss(log_prob, old, adv, mask, agg="seq-mean-token-sum", token_weights=torch.ones(2, 5))
    torch.testing.assert_close(ones, plain_loss)
