"""Credit across the steps of a trajectory and from per-turn rewards: hand-computed cases,
the estimators without steps unchanged, and the turn scheme's indifference to length."""

import math

import pytest
import torch

from agentrl.core.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageInputs,
    compute_gae,
    compute_gae_across_steps,
    compute_grpo_advantages,
    compute_reinforce_pp_advantages,
    compute_rloo_advantages,
    compute_turn_advantages,
    get_advantage_estimator,
)
from agentrl.core.turn_credit import return_to_go_across_steps, step_layout

JUNK = 7.0  # sits under the mask, where nothing may read it


def _three_step_batch():
    """Trajectory "A" in three steps (rows 2, 3, 0 in batch order) and a one-step trajectory
    "B" (row 1). Live tokens of A, in order: v = 0.1 … 0.8; its turns end on each step's
    last live token with rewards 0.2, 0, 1.0. B's one turn ends on its last token with 0.5."""
    mask = torch.tensor(
        [
            [1.0, 1.0, 1.0, 0.0, 0.0],  # A, step 2
            [1.0, 1.0, 0.0, 0.0, 0.0],  # B, step 0
            [1.0, 1.0, 0.0, 1.0, 0.0],  # A, step 0: an observation token at 2
            [1.0, 0.0, 1.0, 0.0, 0.0],  # A, step 1: an observation token at 1
        ]
    )
    values = torch.tensor(
        [
            [0.6, 0.7, 0.8, JUNK, JUNK],
            [0.3, 0.2, JUNK, JUNK, JUNK],
            [0.1, 0.2, JUNK, 0.3, JUNK],
            [0.4, JUNK, 0.5, JUNK, JUNK],
        ]
    )
    turn_ends = torch.tensor(
        [
            [False, False, True, False, False],
            [False, True, False, False, False],
            [False, False, False, True, False],
            [False, False, True, False, False],
        ]
    )
    turn_rewards = torch.zeros(4, 5)
    turn_rewards[0, 2], turn_rewards[1, 1], turn_rewards[2, 3] = 1.0, 0.5, 0.2
    turn_rewards[2, 2] = JUNK  # on an observation token: never read
    token_level_rewards = torch.where(mask.bool(), torch.zeros(4, 5), torch.full((4, 5), JUNK))
    return {
        "token_level_rewards": token_level_rewards,
        "mask": mask,
        "values": values,
        "turn_rewards": turn_rewards,
        "turn_ends": turn_ends,
        "trajectory_ids": ["A", "B", "A", "A"],
        "step_index": torch.tensor([2, 0, 0, 1]),
    }


def test_gae_over_three_steps_with_turn_rewards_equals_the_hand_computed_returns():
    b = _three_step_batch()
    gamma, lam = 0.9, 0.8
    inputs = AdvantageInputs(
        b["token_level_rewards"],
        b["mask"],
        values=b["values"],
        gamma=gamma,
        lam=lam,
        trajectory_ids=b["trajectory_ids"],
        step_index=b["step_index"],
        turn_rewards=b["turn_rewards"],
        turn_ends=b["turn_ends"],
    )
    adv, ret = get_advantage_estimator("gae").fn(inputs)

    # Trajectory A's live tokens as one sequence; the last token of each step bootstraps
    # from the first live token of the next step (values 0.4 and 0.6), the very last from 0.
    d7 = 1.0 - 0.8
    d6 = 0.0 + gamma * 0.8 - 0.7
    d5 = 0.0 + gamma * 0.7 - 0.6
    d4 = 0.0 + gamma * 0.6 - 0.5  # step 1's last token → step 2's first
    d3 = 0.0 + gamma * 0.5 - 0.4
    d2 = 0.2 + gamma * 0.4 - 0.3  # step 0's last token (turn reward 0.2) → step 1's first
    d1 = 0.0 + gamma * 0.3 - 0.2
    d0 = 0.0 + gamma * 0.2 - 0.1
    a7 = d7
    a6 = d6 + gamma * lam * a7
    a5 = d5 + gamma * lam * a6
    a4 = d4 + gamma * lam * a5
    a3 = d3 + gamma * lam * a4
    a2 = d2 + gamma * lam * a3
    a1 = d1 + gamma * lam * a2
    a0 = d0 + gamma * lam * a1
    # Trajectory B alone: rewards (0, 0.5), values (0.3, 0.2).
    b1 = 0.5 - 0.2
    b0 = 0.0 + gamma * 0.2 - 0.3 + gamma * lam * b1
    expected_adv = torch.tensor(
        [
            [a5, a6, a7, 0.0, 0.0],
            [b0, b1, 0.0, 0.0, 0.0],
            [a0, a1, 0.0, a2, 0.0],
            [a3, 0.0, a4, 0.0, 0.0],
        ]
    )
    live = b["mask"].bool()
    expected_ret = torch.where(live, expected_adv + b["values"], torch.zeros(4, 5))
    torch.testing.assert_close(adv, expected_adv)
    torch.testing.assert_close(ret, expected_ret)

    # The same tokens of A concatenated into one row, steps in order, give the same numbers.
    order = [2, 3, 0]
    rewards = b["token_level_rewards"] + b["turn_rewards"]
    one_adv, one_ret = compute_gae(
        rewards[order].reshape(1, -1),
        b["values"][order].reshape(1, -1),
        b["mask"][order].reshape(1, -1),
        gamma,
        lam,
    )
    torch.testing.assert_close(adv[order].reshape(1, -1), one_adv)
    torch.testing.assert_close(ret[order].reshape(1, -1), one_ret)


def test_reinforce_pp_return_to_go_runs_across_steps_like_one_concatenated_row():
    b = _three_step_batch()
    rewards = b["token_level_rewards"] + b["turn_rewards"]
    adv, ret = compute_reinforce_pp_advantages(rewards, b["mask"], 0.5, b["trajectory_ids"], b["step_index"])
    order = [2, 3, 0]
    _, one_ret = compute_reinforce_pp_advantages(
        rewards[order].reshape(1, -1), b["mask"][order].reshape(1, -1), 0.5
    )
    torch.testing.assert_close(ret[order].reshape(1, -1), one_ret)
    # A's first token: 0.2 two live tokens on (0.5²), then 1.0 seven tokens on (0.5⁷).
    assert math.isclose(ret[2, 0].item(), 0.2 * 0.5**2 + 1.0 * 0.5**7, rel_tol=1e-6)
    live = adv[b["mask"].bool()]
    assert abs(live.mean().item()) < 1e-5 and abs(live.std().item() - 1.0) < 1e-3


def test_a_step_without_live_tokens_is_transparent_to_gae_across_steps():
    rewards = torch.tensor([[0.0, 1.0], [5.0, 5.0], [0.0, 2.0]])
    values = torch.tensor([[0.1, 0.2], [9.0, 9.0], [0.3, 0.4]])
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]])
    adv, ret = compute_gae_across_steps(rewards, values, mask, 0.9, 0.8, [0, 0, 0])
    keep = [0, 2]
    two_adv, two_ret = compute_gae_across_steps(rewards[keep], values[keep], mask[keep], 0.9, 0.8, [0, 0])
    torch.testing.assert_close(adv[keep], two_adv)
    torch.testing.assert_close(ret[keep], two_ret)
    assert torch.all(adv[1] == 0) and torch.all(ret[1] == 0)


def test_outcome_advantage_is_broadcast_to_every_row_of_a_trajectory_each_trajectory_counted_once():
    # Group g: T1 (3 rows, score 1 on its last), T2 (1 row, 0), T3 (2 rows, 0).
    # Group h: T4 (2 rows scoring 0.5 each: 1 in all), T5 (1 row, 0).
    trajectory_ids = ["T1", "T1", "T1", "T2", "T3", "T3", "T4", "T4", "T5"]
    group_ids = ["g", "g", "g", "g", "g", "g", "h", "h", "h"]
    row_scores = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0])
    mask = torch.ones(9, 3)
    mask[0, 2] = 0.0
    mask[4, 0] = 0.0

    std_g = torch.tensor([1.0, 0.0, 0.0]).std().item()  # g's trajectory scores (1, 0, 0)
    std_h = torch.tensor([1.0, 0.0]).std().item()
    expected = {
        "grpo": [(1 - 1 / 3) / std_g, -1 / 3 / std_g, -1 / 3 / std_g, 0.5 / std_h, -0.5 / std_h],
        "drgrpo": [2 / 3, -1 / 3, -1 / 3, 0.5, -0.5],
        "rloo": [1.0, -0.5, -0.5, 1.0, -1.0],
    }
    computed = {
        "grpo": compute_grpo_advantages(row_scores, mask, group_ids, eps=0.0, trajectory_ids=trajectory_ids),
        "drgrpo": compute_grpo_advantages(
            row_scores, mask, group_ids, norm_by_std=False, trajectory_ids=trajectory_ids
        ),
        "rloo": compute_rloo_advantages(row_scores, mask, group_ids, trajectory_ids=trajectory_ids),
    }
    row_trajectory = [int(t[1]) - 1 for t in trajectory_ids]
    for name, (adv, ret) in computed.items():
        per_row = torch.tensor([expected[name][t] for t in row_trajectory])
        torch.testing.assert_close(adv, torch.where(mask.bool(), per_row[:, None], torch.zeros(9, 3)))
        torch.testing.assert_close(ret, adv)

    # Counting rows instead would give g's six rows the scores (0, 0, 1, 0, 0, 0): mean 1/6.
    per_row_adv, _ = compute_rloo_advantages(row_scores, mask, group_ids)
    assert not math.isclose(per_row_adv[3, 0].item(), -0.5)


def test_the_rows_of_one_trajectory_must_agree_on_its_group_and_not_repeat_a_step():
    with pytest.raises(ValueError, match="different group ids"):
        compute_grpo_advantages(torch.zeros(2), torch.ones(2, 1), [0, 1], trajectory_ids=["t", "t"])
    with pytest.raises(ValueError, match="appears twice"):
        step_layout(["t", "t"], torch.tensor([1, 1]))


# --- the estimators as they were before steps and turns, to pin the default path bit for bit ---


def _reference_gae(rewards, values, mask, gamma, lam):
    batch, length = rewards.shape
    is_live = mask.bool()
    next_value = torch.zeros(batch, dtype=values.dtype)
    next_advantage = torch.zeros(batch, dtype=values.dtype)
    advantages = torch.zeros_like(values)
    for t in reversed(range(length)):
        live = is_live[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage_t = delta + gamma * lam * next_advantage
        advantages[:, t] = torch.where(live, advantage_t, torch.zeros_like(advantage_t))
        next_value = torch.where(live, values[:, t], next_value)
        next_advantage = torch.where(live, advantage_t, next_advantage)
    return advantages, torch.where(is_live, advantages + values, torch.zeros_like(values))


def _reference_return_to_go(rewards, mask, gamma):
    batch, length = rewards.shape
    is_live = mask.bool()
    running = torch.zeros(batch, dtype=rewards.dtype)
    returns = torch.zeros_like(rewards)
    for t in reversed(range(length)):
        live = is_live[:, t]
        candidate = rewards[:, t] + gamma * running
        running = torch.where(live, candidate, running)
        returns[:, t] = torch.where(live, candidate, torch.zeros_like(candidate))
    return returns


def _reference_group(scores, group, rule, eps=1e-6):
    zeros = torch.zeros(int(group.max()) + 1, dtype=scores.dtype)
    count = zeros.index_add(0, group, torch.ones_like(scores))
    total = zeros.index_add(0, group, scores)
    centered = scores - (total / count.clamp(min=1.0))[group]
    squared_deviation = zeros.index_add(0, group, centered * centered)[group]
    lowest = zeros.scatter_reduce(0, group, scores, reduce="amin", include_self=False)
    highest = zeros.scatter_reduce(0, group, scores, reduce="amax", include_self=False)
    tied = (lowest == highest)[group]
    count, total = count[group], total[group]
    if rule == "rloo":
        value = scores - (total - scores) / (count - 1).clamp(min=1.0)
    else:
        value = scores - total / count
        if rule == "grpo":
            value = value / ((squared_deviation / (count - 1).clamp(min=1.0)).sqrt() + eps)
    return torch.where((count > 1) & ~tied, value, torch.zeros_like(value))


def _random_rows(seed: int, batch: int = 12, length: int = 7):
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(batch, length, generator=gen) > 0.3).float()
    rewards = torch.randn(batch, length, generator=gen)
    values = torch.randn(batch, length, generator=gen)
    # Scores from a few levels, so that some groups tie.
    scores = torch.randint(0, 3, (batch,), generator=gen).float() * 0.4
    rewards = rewards.clone()
    last = torch.tensor([max([t for t in range(length) if mask[i, t]], default=0) for i in range(batch)])
    rewards[torch.arange(batch), last] += scores
    group = torch.randint(0, 4, (batch,), generator=gen)
    return rewards, values, mask, group


@pytest.mark.parametrize("seed", range(5))
def test_without_trajectory_ids_every_estimator_is_bit_identical_to_the_estimators_before_steps(seed):
    rewards, values, mask, group = _random_rows(seed)
    gamma, lam = 0.95, 0.9
    group_ids = group.tolist()
    scores = torch.where(mask.bool(), rewards, torch.zeros_like(rewards)).sum(-1)

    def broadcast(per_row):
        return torch.where(mask.bool(), per_row[:, None], torch.zeros_like(mask))

    reference = {
        "gae": _reference_gae(rewards, values, mask, gamma, lam),
        "reinforce_plus_plus": _reference_return_to_go(rewards, mask, gamma),
        "grpo": broadcast(_reference_group(scores, group, "grpo")),
        "drgrpo": broadcast(_reference_group(scores, group, "drgrpo")),
        "rloo": broadcast(_reference_group(scores, group, "rloo")),
    }
    every_row_alone = list(range(len(group_ids)))
    for trajectory_ids in (None, every_row_alone):
        inputs = AdvantageInputs(
            rewards,
            mask,
            values=values,
            group_ids=group_ids,
            gamma=gamma,
            lam=lam,
            trajectory_ids=trajectory_ids,
        )
        for name, estimator in ADVANTAGE_ESTIMATORS.items():
            adv, ret = estimator.fn(inputs)
            if name == "gae":
                assert torch.equal(adv, reference[name][0]) and torch.equal(ret, reference[name][1])
            elif name == "reinforce_plus_plus":
                assert torch.equal(ret, reference[name])
            else:
                assert torch.equal(adv, reference[name]) and torch.equal(ret, reference[name]), name
    # The carries' defaults are the zeros the recursion always started from.
    zeros = torch.zeros(len(group_ids))
    started = compute_gae(rewards, values, mask, gamma, lam, zeros, zeros)
    assert torch.equal(started[0], reference["gae"][0])


def test_turn_rewards_are_normalised_against_the_pooled_turns_of_their_group_and_summed_to_go():
    # Group g: T1 in two one-token steps with turn rewards 1 then 0, T2 in one step with 1.
    # Group solo: one trajectory alone, whose two turns differ. Group tie: two trajectories
    # whose turns all score 1. Column 1 is padding.
    mask = torch.ones(7, 2)
    mask[:, 1] = 0.0
    turn_ends = mask.bool()
    turn_rewards = torch.tensor([[1.0], [0.0], [1.0], [3.0], [1.0], [1.0], [1.0]]) * torch.tensor([1.0, 0.0])
    trajectory_ids = ["T1", "T1", "T2", "S", "S", "U1", "U2"]
    group_ids = ["g", "g", "g", "solo", "solo", "tie", "tie"]
    step_index = torch.tensor([0, 1, 0, 0, 1, 0, 0])

    pool = torch.tensor([1.0, 0.0, 1.0])
    std = pool.std().item()  # sqrt(1/3)
    mean = 2 / 3
    normalised = [(1 - mean) / (std + 1e-6), (0 - mean) / (std + 1e-6), (1 - mean) / (std + 1e-6)]
    gamma = 0.5
    expected = torch.tensor(
        [normalised[0] + gamma * normalised[1], normalised[1], normalised[2], 0.0, 0.0, 0.0, 0.0]
    )
    turn_adv = compute_turn_advantages(
        turn_rewards, turn_ends, mask, group_ids, gamma, "grpo", trajectory_ids, step_index
    )
    torch.testing.assert_close(turn_adv[:, 0], expected)
    assert torch.all(turn_adv[:, 1] == 0)

    centred = compute_turn_advantages(
        turn_rewards, turn_ends, mask, group_ids, 1.0, "drgrpo", trajectory_ids, step_index
    )
    torch.testing.assert_close(
        centred[:, 0], torch.tensor([1 / 3 - 2 / 3, -2 / 3, 1 / 3, 0.0, 0.0, 0.0, 0.0])
    )
    left_out = compute_turn_advantages(
        turn_rewards, turn_ends, mask, group_ids, 1.0, "rloo", trajectory_ids, step_index
    )
    # Each turn against the mean of the other two: 1 − 0.5, 0 − 1, 1 − 0.5.
    torch.testing.assert_close(left_out[:, 0], torch.tensor([0.5 - 1.0, -1.0, 0.5, 0.0, 0.0, 0.0, 0.0]))


def _simulated_groups(seed: int, groups: int = 400, size: int = 8, length: int = 4):
    """Trajectories of 1..6 turns, one step (row) each, 1..3 live tokens a step; every turn
    ends with a Bernoulli(0.3) reward drawn whatever the length, the outcome Bernoulli(0.5)."""
    gen = torch.Generator().manual_seed(seed)
    num_trajectories = groups * size
    turns = torch.randint(1, 7, (num_trajectories,), generator=gen)
    trajectory = torch.repeat_interleave(torch.arange(num_trajectories), turns)
    rows = trajectory.numel()
    step = torch.arange(rows) - (turns.cumsum(0) - turns)[trajectory]
    live = torch.randint(1, 4, (rows,), generator=gen)
    positions = torch.arange(length)
    mask = (positions < live[:, None]).float()
    turn_ends = positions == (live - 1)[:, None]
    turn_rewards = torch.where(turn_ends, torch.bernoulli(torch.full((rows, 1), 0.3), generator=gen), 0.0)
    outcome = torch.bernoulli(torch.full((num_trajectories,), 0.5), generator=gen)
    last_step = (step == turns[trajectory] - 1)[:, None]
    token_level_rewards = torch.where(turn_ends & last_step, outcome[trajectory][:, None], 0.0)
    shuffle = torch.randperm(rows, generator=gen)  # rows of a trajectory need not be adjacent
    return {
        "token_level_rewards": token_level_rewards[shuffle],
        "mask": mask[shuffle],
        "turn_rewards": turn_rewards[shuffle],
        "turn_ends": turn_ends[shuffle],
        "trajectory": trajectory[shuffle],
        "step_index": step[shuffle],
        "group_ids": (trajectory[shuffle] // size).tolist(),
        "turns": turns,
    }


def _mean_and_error_by_length(advantages, sim):
    """Per trajectory length: (mean advantage per token, its standard error, mean over
    trajectories of their mean token advantage, its standard error). The per-token error
    treats a trajectory's tokens as one cluster, as they share their draws."""
    live = sim["mask"].bool()
    token_sum = torch.zeros(len(sim["turns"])).index_add(
        0, sim["trajectory"], torch.where(live, advantages, 0.0).sum(-1)
    )
    token_count = torch.zeros(len(sim["turns"])).index_add(0, sim["trajectory"], sim["mask"].sum(-1))
    stats = {}
    for turns in range(1, 7):
        of_length = sim["turns"] == turns
        s, n = token_sum[of_length].double(), token_count[of_length].double()
        per_token = (s.sum() / n.sum()).item()
        per_token_error = ((s - per_token * n).pow(2).sum().sqrt() / n.sum()).item()
        per_trajectory = s / n
        stats[turns] = (
            per_token,
            per_token_error,
            per_trajectory.mean().item(),
            (per_trajectory.std() / math.sqrt(len(per_trajectory))).item(),
        )
    return stats


@pytest.mark.parametrize("per_index", [True, False], ids=["baseline_per_turn_index", "pooled_baseline"])
@pytest.mark.parametrize("name", ["grpo", "drgrpo", "rloo"])
def test_group_normalised_turn_rewards_do_not_favour_longer_or_shorter_trajectories(name, per_index):
    sim = _simulated_groups(seed=0)
    trajectory_ids = sim["trajectory"].tolist()
    # each simulated row is one step of one turn: its step index is its turn's number
    turn_index = torch.where(sim["turn_ends"], sim["step_index"][:, None], -1)
    inputs = AdvantageInputs(
        sim["token_level_rewards"],
        sim["mask"],
        group_ids=sim["group_ids"],
        trajectory_ids=trajectory_ids,
        step_index=sim["step_index"],
        turn_rewards=sim["turn_rewards"],
        turn_ends=sim["turn_ends"],
        turn_index=turn_index if per_index else None,
    )
    advantages, _ = get_advantage_estimator(name).fn(inputs)
    # Each mean within four standard errors of 0, for every length (24 checks at 4σ: a
    # true-zero mean misses one by chance about once in a thousand seeds).
    for turns, (per_token, token_error, per_trajectory, trajectory_error) in _mean_and_error_by_length(
        advantages, sim
    ).items():
        assert abs(per_token) < 4 * token_error, (turns, per_token, token_error)
        assert abs(per_trajectory) < 4 * trajectory_error, (turns, per_trajectory, trajectory_error)
        assert token_error < 0.15  # the bound is tight enough to see the naive bias below

    # The naive alternative: the outcome advantage plus the raw return-to-go of the turn
    # rewards. A token is owed the rewards of every turn still to come, so the longer the
    # trajectory the larger its advantage: the same check fails, far outside the bound.
    outcome = get_advantage_estimator(name).fn(
        AdvantageInputs(
            sim["token_level_rewards"], sim["mask"], group_ids=sim["group_ids"], trajectory_ids=trajectory_ids
        )
    )[0]
    layout = step_layout(trajectory_ids, sim["step_index"])
    naive = outcome + return_to_go_across_steps(sim["turn_rewards"], sim["mask"], 1.0, layout)
    naive_stats = _mean_and_error_by_length(naive, sim)
    means = [naive_stats[turns][0] for turns in range(1, 7)]
    assert all(later > earlier for earlier, later in zip(means, means[1:], strict=False)), means
    for turns, (per_token, token_error, _, _) in naive_stats.items():
        assert per_token > 4 * token_error, (turns, per_token, token_error)
    gap_error = math.hypot(naive_stats[6][1], naive_stats[1][1])
    assert means[5] - means[0] > 10 * gap_error


def test_the_registry_routes_steps_and_turn_rewards_to_each_estimator():
    b = _three_step_batch()
    mask, values = b["mask"], b["values"]
    ids, steps = b["trajectory_ids"], b["step_index"]
    token_rewards = b["token_level_rewards"].clone()
    token_rewards[0, 2] = 1.0  # A's outcome on its last token
    group_ids = ["q", "q", "q", "q"]
    gamma, lam = 0.9, 0.8
    inputs = AdvantageInputs(
        token_rewards,
        mask,
        values=values,
        group_ids=group_ids,
        gamma=gamma,
        lam=lam,
        trajectory_ids=ids,
        step_index=steps,
        turn_rewards=b["turn_rewards"],
        turn_ends=b["turn_ends"],
    )
    scores = torch.where(mask.bool(), token_rewards, 0.0).sum(-1)
    with_turns = token_rewards + b["turn_rewards"]

    def turn(baseline):
        return compute_turn_advantages(
            b["turn_rewards"], b["turn_ends"], mask, group_ids, gamma, baseline, ids, steps
        )

    expected = {
        "gae": compute_gae_across_steps(with_turns, values, mask, gamma, lam, ids, steps),
        "reinforce_plus_plus": compute_reinforce_pp_advantages(with_turns, mask, gamma, ids, steps),
        "grpo": compute_grpo_advantages(scores, mask, group_ids, trajectory_ids=ids)[0] + turn("grpo"),
        "drgrpo": compute_grpo_advantages(scores, mask, group_ids, norm_by_std=False, trajectory_ids=ids)[0]
        + turn("drgrpo"),
        "rloo": compute_rloo_advantages(scores, mask, group_ids, trajectory_ids=ids)[0] + turn("rloo"),
    }
    plain = AdvantageInputs(token_rewards, mask, values=values, group_ids=group_ids, gamma=gamma, lam=lam)
    for name, want in expected.items():
        adv, ret = get_advantage_estimator(name).fn(inputs)
        if isinstance(want, tuple):
            torch.testing.assert_close(adv, want[0])
            torch.testing.assert_close(ret, want[1])
        else:
            torch.testing.assert_close(adv, want)
            torch.testing.assert_close(ret, want)
        assert not torch.allclose(adv, get_advantage_estimator(name).fn(plain)[0]), name

    # grpo without the ÷std normalises its turns as Dr.GRPO does.
    unscaled = get_advantage_estimator("grpo").fn(
        AdvantageInputs(**{**inputs.__dict__, "norm_adv_by_std_in_grpo": False})
    )[0]
    torch.testing.assert_close(unscaled, expected["drgrpo"])
    # Turn rewards without their turn ends cannot be pooled.
    with pytest.raises(ValueError, match="turn_ends"):
        get_advantage_estimator("rloo").fn(AdvantageInputs(**{**inputs.__dict__, "turn_ends": None}))


def _two_turn_group(rewards_per_sample: list[list[float]]):
    """One group, one row per sample, one token per turn, every token a turn end."""
    width = max(len(r) for r in rewards_per_sample)
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rewards_per_sample])
    turn_rewards = torch.tensor([r + [0.0] * (width - len(r)) for r in rewards_per_sample])
    turn_ends = mask.bool()
    turn_index = torch.where(turn_ends, torch.arange(width)[None, :], -1)
    return mask, turn_rewards, turn_ends, turn_index


def test_samples_that_earned_the_same_at_every_turn_get_no_turn_advantage_with_a_baseline_per_index():
    # every sample: a search that found the answer (0.2), then an answer turn (0)
    mask, rewards, ends, index = _two_turn_group([[0.2, 0.0]] * 4)
    per_index = compute_turn_advantages(rewards, ends, mask, [0] * 4, baseline="drgrpo", turn_index=index)
    assert torch.equal(per_index, torch.zeros_like(per_index))
    pooled = compute_turn_advantages(rewards, ends, mask, [0] * 4, baseline="drgrpo")
    assert pooled.abs().sum() > 0  # the pooled baseline moves credit between kinds of turns


def test_a_second_search_that_finds_the_answer_earns_credit_over_answering_at_that_turn():
    # A: search (hit), search (hit), answer; B: search (hit), answer
    mask, rewards, ends, index = _two_turn_group([[0.2, 0.2, 0.0], [0.2, 0.0]])
    advantages = compute_turn_advantages(rewards, ends, mask, [0, 0], baseline="drgrpo", turn_index=index)
    # turn 0 ties (no credit); turn 1: A's search +0.1, B's answer -0.1; turn 2: only A, no baseline
    assert advantages[0].tolist() == pytest.approx([0.1, 0.1, 0.0])
    assert advantages[1].tolist() == pytest.approx([-0.1, -0.1, 0.0])
