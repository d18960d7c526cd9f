"""Advantage estimators: GAE for PPO, and the critic-free group/REINFORCE baselines.

Every estimator returns ``(advantages, returns)``, both ``(batch, T)`` and zero at
masked positions. Masked tokens inside a response (observations: retrieved documents,
tool output) are *transparent* to the recursion: the "next" token of a model token is
the next unmasked one, so the credit flows across an ``<information>`` block as if it
were not there, and the observation tokens themselves get no advantage and no return.

A trajectory split into several rows (steps: rows sharing a trajectory id, ordered by
``step_index``) is one sample: GAE and REINFORCE++ run across its steps, the group
estimators score it once. Per-turn rewards (each on its turn's last sampled token) enter
GAE and REINFORCE++ as they are and the group estimators group-normalised; see
``compute_turn_advantages``. The step layout lives in ``agentrl.core.turn_credit``.

The registry at the bottom maps the config names (``algorithm.adv_estimator``) to
estimators with one calling convention, so the trainer never branches on the name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from agentrl.core.masked import masked_whiten
from agentrl.core.turn_credit import (
    backward_over_steps,
    dense_index,
    discounted_return_to_go,
    first_live_or,
    group_normalised_turn_returns,
    group_of_each_trajectory,
    return_to_go_across_steps,
    step_layout,
    sum_per_trajectory,
)


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
    next_value: torch.Tensor | None = None,
    next_advantage: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation over the unmasked response tokens.

    With t' the next unmasked position after t (and V_{t'}, A_{t'} past the last one taken
    from ``next_value``/``next_advantage``, (B,) each, default 0):

        δ_t = r_t + γ V_{t'} − V_t
        A_t = δ_t + γ λ A_{t'}
        R_t = A_t + V_t

    Masked positions are skipped in the recursion (their rewards and values are never
    read) and get A_t = R_t = 0. Advantages are not normalised; see ``masked_whiten``.
    """
    batch, length = rewards.shape
    is_live = mask.bool()
    next_value = _start(next_value, batch, values)
    next_advantage = _start(next_advantage, batch, values)
    advantages = torch.zeros_like(values)
    for t in reversed(range(length)):
        live = is_live[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage_t = delta + gamma * lam * next_advantage
        advantages[:, t] = torch.where(live, advantage_t, torch.zeros_like(advantage_t))
        # A masked token passes its successor's value and advantage through unchanged.
        next_value = torch.where(live, values[:, t], next_value)
        next_advantage = torch.where(live, advantage_t, next_advantage)
    returns = torch.where(is_live, advantages + values, torch.zeros_like(values))
    return advantages, returns


def _start(carry: torch.Tensor | None, batch: int, like: torch.Tensor) -> torch.Tensor:
    """A recursion's state past a row's last live token: the given (B,) carry, else 0."""
    if carry is None:
        return torch.zeros(batch, dtype=like.dtype, device=like.device)
    return carry.to(dtype=like.dtype, device=like.device)


def compute_gae_across_steps(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
    trajectory_ids: torch.Tensor | list | None,
    step_index: torch.Tensor | list | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over each trajectory's live tokens as one sequence, its steps in ``step_index`` order.

    The recursion of ``compute_gae``, where t' of a step's last live token is the first live
    token of the trajectory's next step (V and A bootstrap across steps) and V_{t'} = A_{t'}
    = 0 past the trajectory's last live token. Steps are processed from the deepest level
    down, each row started from its successor row's (V, A) at that row's first live token.
    Without ``trajectory_ids`` every row is its own trajectory: exactly ``compute_gae``.
    """
    if trajectory_ids is None:
        return compute_gae(rewards, values, mask, gamma, lam)

    def recursion(rows: torch.Tensor, carry: tuple[torch.Tensor, ...]):
        row_values, row_mask = values[rows], mask[rows]
        advantages, returns = compute_gae(rewards[rows], row_values, row_mask, gamma, lam, *carry)
        handed_back = (
            first_live_or(row_values, row_mask, carry[0]),
            first_live_or(advantages, row_mask, carry[1]),
        )
        return (advantages, returns), handed_back

    zeros = torch.zeros(values.shape[0], dtype=values.dtype, device=values.device)
    layout = step_layout(trajectory_ids, step_index)
    advantages, returns = backward_over_steps(layout, recursion, (zeros, zeros))
    return advantages, returns


def _group_stats(
    scores: torch.Tensor, group: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample group size, group sum, group sum of squared deviations from the group
    mean (two-pass, so equal scores give exactly 0) and whether the group's scores all
    tie, each gathered back to the samples."""
    num_groups = int(group.max().item()) + 1 if group.numel() else 0
    zeros = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device)
    group = group.to(scores.device)
    count = zeros.index_add(0, group, torch.ones_like(scores))
    total = zeros.index_add(0, group, scores)
    centered = scores - (total / count.clamp(min=1.0))[group]
    squared_deviation = zeros.index_add(0, group, centered * centered)
    lowest = zeros.scatter_reduce(0, group, scores, reduce="amin", include_self=False)
    highest = zeros.scatter_reduce(0, group, scores, reduce="amax", include_self=False)
    tied = (lowest == highest)[group]
    return count[group], total[group], squared_deviation[group], tied


def group_ties(scores: torch.Tensor, group_ids: torch.Tensor | list) -> torch.Tensor:
    """Per sample, whether its group's scores all tie: min_g s = max_g s, the groups every group
    estimator gives A = 0 (dynamic sampling drops them by this same rule)."""
    return _group_stats(scores, dense_index(group_ids))[3]


def _broadcast_over_tokens(per_sequence: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(
        mask.bool(),
        per_sequence.unsqueeze(-1).to(mask.device),
        torch.zeros_like(mask, dtype=per_sequence.dtype),
    )


def _grpo_centred(scores: torch.Tensor, group: torch.Tensor, norm_by_std: bool, eps: float) -> torch.Tensor:
    count, total, squared_deviation, tied = _group_stats(scores, group)
    centered = scores - total / count
    if norm_by_std:
        std = (squared_deviation / (count - 1).clamp(min=1.0)).sqrt()
        centered = centered / (std + eps)
    return torch.where((count > 1) & ~tied, centered, torch.zeros_like(centered))


def _rloo_centred(scores: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    count, total, _, tied = _group_stats(scores, group)
    baseline = (total - scores) / (count - 1).clamp(min=1.0)
    return torch.where((count > 1) & ~tied, scores - baseline, torch.zeros_like(scores))


def _outcome_samples(
    scores: torch.Tensor, group_ids: torch.Tensor | list, trajectory_ids: torch.Tensor | list | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The samples a group baseline compares: (scores, dense group index, row → sample or None).

    Without trajectory ids each row is a sample. With them a trajectory is one sample, its
    score the sum of its rows' scores, so a trajectory of many steps counts once in its group.
    """
    scores = scores.to(torch.float32) if not scores.is_floating_point() else scores
    if trajectory_ids is None:
        return scores, dense_index(group_ids), None
    layout = step_layout(trajectory_ids)
    group = dense_index(group_of_each_trajectory(group_ids, layout))
    return sum_per_trajectory(scores, layout), group, layout.trajectory.to(scores.device)


def compute_grpo_advantages(
    scores: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | list,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    trajectory_ids: torch.Tensor | list | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative advantages (GRPO; Dr.GRPO when ``norm_by_std=False``).

    For sample i in group g with n_g samples and scores s:

        A_i = (s_i − mean_g(s)) / (std_g(s) + eps)      (GRPO)
        A_i =  s_i − mean_g(s)                           (Dr.GRPO)

    std is the unbiased estimate (÷ (n_g − 1)), as ``torch.std``. A group of one has no
    baseline, and a group whose scores all tie has no signal: both get A = 0 exactly (in
    float arithmetic the tie's mean can miss the scores by an ulp, which ÷ (std + eps)
    would blow up into a same-signed advantage). The scalar is broadcast over the
    unmasked tokens; returns equal advantages (there is no critic).

    ``scores`` are per row. With ``trajectory_ids`` a sample is a trajectory: s is the sum
    of its rows' scores, each trajectory counts once in its group, and its A is broadcast
    to the unmasked tokens of all its rows.
    """
    samples, group, row_sample = _outcome_samples(scores, group_ids, trajectory_ids)
    per_sample = _grpo_centred(samples, group, norm_by_std, eps)
    per_row = per_sample if row_sample is None else per_sample[row_sample]
    advantages = _broadcast_over_tokens(per_row, mask)
    return advantages, advantages.clone()


def compute_rloo_advantages(
    scores: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | list,
    trajectory_ids: torch.Tensor | list | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE Leave-One-Out: each sample's baseline is the mean of the *others*.

        A_i = s_i − (Σ_{j∈g} s_j − s_i) / (n_g − 1)  =  n_g/(n_g − 1) · (s_i − mean_g(s))

    A group of one, and a group whose scores all tie, get A = 0 exactly. With
    ``trajectory_ids`` a sample is a trajectory, as in ``compute_grpo_advantages``.
    """
    samples, group, row_sample = _outcome_samples(scores, group_ids, trajectory_ids)
    per_sample = _rloo_centred(samples, group)
    per_row = per_sample if row_sample is None else per_sample[row_sample]
    advantages = _broadcast_over_tokens(per_row, mask)
    return advantages, advantages.clone()


def compute_turn_advantages(
    turn_rewards: torch.Tensor,
    turn_ends: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | list,
    gamma: float = 1.0,
    baseline: str = "grpo",
    trajectory_ids: torch.Tensor | list | None = None,
    step_index: torch.Tensor | list | None = None,
    eps: float = 1e-6,
    turn_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """The group estimators' per-token turn advantage, added to the outcome advantage.

    Each turn reward r is compared with its group's n_g turn rewards at its turn index
    (``turn_index``; without it, pooled over the group) by the estimator's own baseline:

        r̃ = (r − mean_g) / (std_g + eps)        ("grpo"; std unbiased, as the outcome's)
        r̃ =  r − mean_g                          ("drgrpo")
        r̃ =  r − (Σ_g r − r) / (n_g − 1)         ("rloo")

    then summed as a discounted return-to-go over the turn ends at or after each token, across
    later steps: ``group_normalised_turn_returns``, which also states the scheme's bias.
    """
    if baseline == "rloo":
        centre = _rloo_centred
    elif baseline in ("grpo", "drgrpo"):
        centre = partial(_grpo_centred, norm_by_std=baseline == "grpo", eps=eps)
    else:
        raise ValueError(f"unknown turn baseline '{baseline}'; expected grpo, drgrpo or rloo")
    return group_normalised_turn_returns(
        turn_rewards, turn_ends, mask, group_ids, gamma, centre, trajectory_ids, step_index, turn_index
    )


def compute_reinforce_pp_advantages(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    trajectory_ids: torch.Tensor | list | None = None,
    step_index: torch.Tensor | list | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted return-to-go, whitened over the whole batch.

        G_t = r_t + γ G_{t'}        (t' = next unmasked token; masked tokens transparent)
        A_t = (G_t − mean(G)) / std(G)   over all unmasked tokens of the batch

    Returns (A, G): the un-whitened return-to-go is the "returns". With ``trajectory_ids``
    G runs across each trajectory's steps (t' of a step's last live token is the first live
    token of its next step) before the whitening.
    """
    if trajectory_ids is None:
        returns = discounted_return_to_go(rewards, mask, gamma)
    else:
        returns = return_to_go_across_steps(rewards, mask, gamma, step_layout(trajectory_ids, step_index))
    return masked_whiten(returns, mask), returns


# --- registry -------------------------------------------------------------------------


@dataclass(frozen=True)
class AdvantageInputs:
    """Everything any estimator may read; each takes what it needs. The step and turn fields
    default to None: every row its own trajectory, no turn rewards."""

    token_level_rewards: torch.Tensor  # (B, T): score on last token, minus β·KL when in-reward
    mask: torch.Tensor  # (B, T) loss mask
    values: torch.Tensor | None = None  # (B, T), for estimators with a critic
    group_ids: torch.Tensor | list | None = None  # (B,), for group baselines
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True
    trajectory_ids: list | None = None  # (B,): rows sharing one are the steps of one trajectory
    step_index: torch.Tensor | None = None  # (B,) long: step order within a trajectory
    turn_rewards: torch.Tensor | None = None  # (B, T): each turn's reward on its last sampled token
    turn_ends: torch.Tensor | None = None  # (B, T) bool: every turn's last sampled token
    turn_index: torch.Tensor | None = None  # (B, T) long: each turn end's turn number (baseline per index)


@dataclass(frozen=True)
class AdvantageEstimator:
    fn: Callable[[AdvantageInputs], tuple[torch.Tensor, torch.Tensor]]
    needs_critic: bool
    needs_groups: bool


def _sequence_scores(inputs: AdvantageInputs) -> torch.Tensor:
    """Outcome reward per sequence: the sum of its token-level rewards (masked)."""
    return torch.where(
        inputs.mask.bool(), inputs.token_level_rewards, torch.zeros_like(inputs.token_level_rewards)
    ).sum(dim=-1)


def _require(value, what: str, name: str):
    if value is None:
        raise ValueError(f"advantage estimator '{name}' needs {what}")
    return value


def _with_turn_rewards(inputs: AdvantageInputs) -> torch.Tensor:
    """Token rewards with the turn rewards added as they are (estimators with a return-to-go)."""
    if inputs.turn_rewards is None:
        return inputs.token_level_rewards
    return inputs.token_level_rewards + inputs.turn_rewards


def _gae(x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    values = _require(x.values, "values from a critic", "gae")
    return compute_gae_across_steps(
        _with_turn_rewards(x), values, x.mask, x.gamma, x.lam, x.trajectory_ids, x.step_index
    )


def _reinforce_pp(x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    return compute_reinforce_pp_advantages(
        _with_turn_rewards(x), x.mask, x.gamma, x.trajectory_ids, x.step_index
    )


def _group_estimator(name: str) -> Callable[[AdvantageInputs], tuple[torch.Tensor, torch.Tensor]]:
    """Outcome advantage over trajectories, plus the group-normalised turn advantage when
    turn rewards are given (``compute_turn_advantages`` with the same baseline)."""

    def estimate(x: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
        group_ids = _require(x.group_ids, "group_ids", name)
        scores = _sequence_scores(x)
        if name == "rloo":
            advantages, returns = compute_rloo_advantages(scores, x.mask, group_ids, x.trajectory_ids)
        else:
            norm = x.norm_adv_by_std_in_grpo if name == "grpo" else False
            advantages, returns = compute_grpo_advantages(
                scores, x.mask, group_ids, norm, trajectory_ids=x.trajectory_ids
            )
        if x.turn_rewards is None:
            return advantages, returns
        # grpo with norm_adv_by_std_in_grpo off normalises its turns as Dr.GRPO does.
        baseline = "drgrpo" if name == "grpo" and not x.norm_adv_by_std_in_grpo else name
        turn_ends = _require(x.turn_ends, "turn_ends with turn_rewards", name)
        layout = (x.trajectory_ids, x.step_index)
        advantages = advantages + compute_turn_advantages(
            x.turn_rewards, turn_ends, x.mask, group_ids, x.gamma, baseline, *layout, turn_index=x.turn_index
        )
        return advantages, advantages.clone()

    return estimate


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "gae": AdvantageEstimator(_gae, needs_critic=True, needs_groups=False),
    "grpo": AdvantageEstimator(_group_estimator("grpo"), needs_critic=False, needs_groups=True),
    "drgrpo": AdvantageEstimator(_group_estimator("drgrpo"), needs_critic=False, needs_groups=True),
    "rloo": AdvantageEstimator(_group_estimator("rloo"), needs_critic=False, needs_groups=True),
    "reinforce_plus_plus": AdvantageEstimator(_reinforce_pp, needs_critic=False, needs_groups=False),
}


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise KeyError(
            f"unknown advantage estimator '{name}'; expected one of {sorted(ADVANTAGE_ESTIMATORS)}"
        ) from None
