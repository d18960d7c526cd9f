"""Advantage estimators: hand-computed cases and properties."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.core.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageInputs,
    compute_gae,
    compute_grpo_advantages,
    compute_reinforce_pp_advantages,
    compute_rloo_advantages,
    get_advantage_estimator,
    group_ties,
)
from agentrl.core.placement import place_score_on_last_token


def test_gae_hand_computed_three_tokens():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    mask = torch.ones(1, 3)
    gamma, lam = 0.9, 0.8
    adv, ret = compute_gae(rewards, values, mask, gamma, lam)
    d2 = 1.0 - 0.7
    d1 = 0.0 + gamma * 0.7 - 0.6
    d0 = 0.0 + gamma * 0.6 - 0.5
    a2 = d2
    a1 = d1 + gamma * lam * a2
    a0 = d0 + gamma * lam * a1
    torch.testing.assert_close(adv, torch.tensor([[a0, a1, a2]]))
    torch.testing.assert_close(ret, adv + values)


def test_gae_observation_tokens_are_transparent():
    # model, model, obs, obs, model: the obs tokens must be skipped as if absent.
    rewards = torch.tensor([[0.0, 0.0, 5.0, -3.0, 1.0]])
    values = torch.tensor([[0.2, 0.4, 9.0, 9.0, 0.6]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0]])
    adv, ret = compute_gae(rewards, values, mask, gamma=0.95, lam=0.9)
    compact_adv, compact_ret = compute_gae(
        torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.2, 0.4, 0.6]]), torch.ones(1, 3), 0.95, 0.9
    )
    torch.testing.assert_close(adv[:, [0, 1, 4]], compact_adv)
    torch.testing.assert_close(ret[:, [0, 1, 4]], compact_ret)
    assert adv[0, 2] == 0 and adv[0, 3] == 0 and ret[0, 2] == 0 and ret[0, 3] == 0


def test_gae_trailing_padding_gets_zero_and_last_token_bootstraps_from_zero():
    rewards = torch.tensor([[0.0, 2.0, 0.0]])
    values = torch.tensor([[1.0, 1.5, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    adv, _ = compute_gae(rewards, values, mask, gamma=1.0, lam=1.0)
    # last live token: δ = 2 − 1.5 = 0.5; first: 0 + 1.5 − 1 + 0.5 = 1.0
    torch.testing.assert_close(adv, torch.tensor([[1.0, 0.5, 0.0]]))


masks = st.lists(st.booleans(), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    mask_bits=masks,
    seed=st.integers(0, 10_000),
    gamma=st.floats(0.5, 1.0),
    lam=st.floats(0.5, 1.0),
)
def test_gae_ignores_everything_at_masked_positions(mask_bits, seed, gamma, lam):
    gen = torch.Generator().manual_seed(seed)
    length = len(mask_bits)
    mask = torch.tensor([mask_bits], dtype=torch.float32)
    rewards = torch.randn(1, length, generator=gen)
    values = torch.randn(1, length, generator=gen)
    adv, ret = compute_gae(rewards, values, mask, gamma, lam)
    junk = torch.randn(1, length, generator=gen) * 100
    masked = ~mask.bool()
    adv2, ret2 = compute_gae(
        torch.where(masked, junk, rewards), torch.where(masked, -junk, values), mask, gamma, lam
    )
    torch.testing.assert_close(adv, adv2)
    torch.testing.assert_close(ret, ret2)
    assert torch.all(adv[masked] == 0) and torch.all(ret[masked] == 0)


@settings(max_examples=60, deadline=None)
@given(mask_bits=masks, seed=st.integers(0, 10_000))
def test_gae_gamma_lambda_one_is_reward_to_go_minus_value(mask_bits, seed):
    gen = torch.Generator().manual_seed(seed)
    length = len(mask_bits)
    mask = torch.tensor([mask_bits], dtype=torch.float32)
    rewards = torch.randn(1, length, generator=gen)
    values = torch.randn(1, length, generator=gen)
    adv, ret = compute_gae(rewards, values, mask, 1.0, 1.0)
    live_rewards = torch.where(mask.bool(), rewards, torch.zeros_like(rewards))
    reward_to_go = live_rewards.flip(-1).cumsum(-1).flip(-1)
    expected = torch.where(mask.bool(), reward_to_go - values, torch.zeros_like(values))
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        ret, torch.where(mask.bool(), reward_to_go, torch.zeros_like(values)), atol=1e-5, rtol=1e-5
    )


def test_grpo_hand_computed():
    scores = torch.tensor([1.0, 0.0, 0.0, 2.0, 4.0])
    groups = ["a", "a", "a", "b", "b"]
    mask = torch.ones(5, 2)
    adv, ret = compute_grpo_advantages(scores, mask, groups, eps=0.0)
    mean_a, std_a = 1 / 3, torch.tensor([1.0, 0.0, 0.0]).std().item()
    std_b = torch.tensor([2.0, 4.0]).std().item()  # unbiased: sqrt(2)
    expected = torch.tensor(
        [(1 - mean_a) / std_a, -mean_a / std_a, -mean_a / std_a, (2 - 3) / std_b, (4 - 3) / std_b]
    )
    torch.testing.assert_close(adv[:, 0], expected)
    torch.testing.assert_close(adv, ret)
    assert math.isclose(std_b, math.sqrt(2), rel_tol=1e-6)


def test_drgrpo_does_not_divide_by_std():
    scores = torch.tensor([1.0, 3.0])
    adv, _ = compute_grpo_advantages(scores, torch.ones(2, 1), [7, 7], norm_by_std=False)
    torch.testing.assert_close(adv[:, 0], torch.tensor([-1.0, 1.0]))


def test_group_of_one_gets_zero_advantage_and_masked_tokens_zero():
    scores = torch.tensor([5.0, 1.0, 2.0])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    for fn in (compute_grpo_advantages, compute_rloo_advantages):
        adv, _ = fn(scores, mask, ["solo", "pair", "pair"])
        assert torch.all(adv[0] == 0)
        assert torch.all(adv[~mask.bool()] == 0)


@pytest.mark.parametrize("n", [8, 16])
@pytest.mark.parametrize("score", [0.1, 0.2, 0.8])
def test_a_group_whose_scores_all_tie_gets_exactly_zero_advantage(n, score):
    """Format-reward scores such as 0.8 leave float ulps in the mean; they must not become signal."""
    scores = torch.full((n + 2,), score)
    scores[-2:] = torch.tensor([0.0, 1.0])  # a second group that does carry signal
    groups = [0] * n + [1, 1]
    mask = torch.ones(n + 2, 3)
    for advantages in (
        compute_grpo_advantages(scores, mask, groups)[0],
        compute_grpo_advantages(scores, mask, groups, norm_by_std=False)[0],
        compute_rloo_advantages(scores, mask, groups)[0],
    ):
        assert torch.all(advantages[:n] == 0.0), advantages[:n, 0]
        assert torch.all(advantages[n:] != 0.0)


@settings(max_examples=60, deadline=None)
@given(
    group_sizes=st.lists(st.integers(2, 6), min_size=1, max_size=5),
    seed=st.integers(0, 10_000),
    norm=st.booleans(),
)
def test_grpo_advantages_have_zero_mean_per_group(group_sizes, seed, norm):
    gen = torch.Generator().manual_seed(seed)
    groups = [g for g, size in enumerate(group_sizes) for _ in range(size)]
    scores = torch.randint(0, 3, (len(groups),), generator=gen).float()
    adv, _ = compute_grpo_advantages(scores, torch.ones(len(groups), 3), groups, norm_by_std=norm)
    per_seq = adv[:, 0]
    for g in set(groups):
        members = torch.tensor([i for i, x in enumerate(groups) if x == g])
        assert abs(per_seq[members].mean().item()) < 1e-4


def test_rloo_hand_computed():
    scores = torch.tensor([1.0, 0.0, 0.0])
    adv, _ = compute_rloo_advantages(scores, torch.ones(3, 1), [0, 0, 0])
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.0, -0.5, -0.5]))


def test_reinforce_pp_return_to_go_skips_masked_and_whitens():
    rewards = torch.tensor([[0.0, 9.0, 1.0], [0.0, 0.0, 2.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    adv, ret = compute_reinforce_pp_advantages(rewards, mask, gamma=0.5)
    torch.testing.assert_close(ret, torch.tensor([[0.5, 0.0, 1.0], [0.5, 1.0, 2.0]]))
    live = adv[mask.bool()]
    assert abs(live.mean().item()) < 1e-5
    assert abs(live.std().item() - 1.0) < 1e-3
    assert adv[0, 1] == 0


def test_place_score_on_last_model_token():
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]])
    out = place_score_on_last_token(torch.tensor([2.0, 3.0, -1.0]), mask)
    torch.testing.assert_close(
        out, torch.tensor([[0.0, 0.0, 0.0, 2.0, 0.0], [0.0] * 5, [-1.0, 0.0, 0.0, 0.0, 0.0]])
    )


def test_registry_dispatches_and_names_requirements():
    assert set(ADVANTAGE_ESTIMATORS) == {"gae", "grpo", "drgrpo", "rloo", "reinforce_plus_plus"}
    assert get_advantage_estimator("gae").needs_critic
    assert not get_advantage_estimator("grpo").needs_critic
    mask = torch.ones(2, 3)
    rewards = place_score_on_last_token(torch.tensor([1.0, 0.0]), mask)
    adv, _ = get_advantage_estimator("grpo").fn(AdvantageInputs(rewards, mask, group_ids=[0, 0]))
    assert adv[0, 0] > 0 > adv[1, 0]
    with pytest.raises(ValueError, match="needs values"):
        get_advantage_estimator("gae").fn(AdvantageInputs(rewards, mask))
    with pytest.raises(KeyError, match="expected one of"):
        get_advantage_estimator("ppo2")


def test_the_tied_groups_are_exactly_those_grpo_gives_zero_advantage():
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5 + 1e-6, 0.25, 0.25, 0.25])
    ids = ["a", "a", "b", "b", "c", "c", "d", "d", "d"]
    ties = group_ties(scores, ids)
    assert ties.tolist() == [True, True, False, False, False, False, True, True, True]
    advantages, _ = compute_grpo_advantages(scores, torch.ones(9, 1), ids)
    assert ((advantages[:, 0] == 0) == ties).all()
