"""Advantage estimators: GAE for PPO, and the critic-free group/REINFORCE baselines.

Every estimator returns ``(advantages, returns)``, both ``(batch, T)`` and zero at
masked positions. Masked tokens inside a response (observations: retrieved documents,
tool output) are *transparent* to the recursion: the "next" token of a model token is
the next unmasked one, so the credit flows across an ``<information>`` block as if it
were not there, and the observation tokens themselves get no advantage and no return.

The registry at the bottom maps the config names (``algorithm.adv_estimator``) to
estimators with one calling convention, so the trainer never branches on the name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from agentrl.core.masked import last_true_index, masked_whiten


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation over the unmasked response tokens.

    With t' the next unmasked position after t (and V_{t'} = 0, A_{t'} = 0 past the
    last one):

        δ_t = r_t + γ V_{t'} − V_t
        A_t = δ_t + γ λ A_{t'}
        R_t = A_t + V_t

    Masked positions are skipped in the recursion (their rewards and values are never
    read) and get A_t = R_t = 0. Advantages are not normalised; see ``masked_whiten``.
    """
    batch, length = rewards.shape
    is_live = mask.bool()
    next_value = torch.zeros(batch, dtype=values.dtype, device=values.device)
    next_advantage = torch.zeros(batch, dtype=values.dtype, device=values.device)
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


def _group_index(group_ids: torch.Tensor | list) -> torch.Tensor:
    """Dense 0..G-1 indices for arbitrary (hashable) group ids."""
    ids = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
    dense: dict = {}
    return torch.tensor([dense.setdefault(g, len(dense)) for g in ids], dtype=torch.long)


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
    return _group_stats(scores, _group_index(group_ids))[3]


def _broadcast_over_tokens(per_sequence: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(
        mask.bool(),
        per_sequence.unsqueeze(-1).to(mask.device),
        torch.zeros_like(mask, dtype=per_sequence.dtype),
    )


def compute_grpo_advantages(
    scores: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | list,
    norm_by_std: bool = True,
    eps: float = 1e-6,
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
    """
    scores = scores.to(torch.float32) if not scores.is_floating_point() else scores
    count, total, squared_deviation, tied = _group_stats(scores, _group_index(group_ids))
    centered = scores - total / count
    if norm_by_std:
        std = (squared_deviation / (count - 1).clamp(min=1.0)).sqrt()
        centered = centered / (std + eps)
    per_sequence = torch.where((count > 1) & ~tied, centered, torch.zeros_like(centered))
    advantages = _broadcast_over_tokens(per_sequence, mask)
    return advantages, advantages.clone()


def compute_rloo_advantages(
    scores: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor | list
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE Leave-One-Out: each sample's baseline is the mean of the *others*.

        A_i = s_i − (Σ_{j∈g} s_j − s_i) / (n_g − 1)  =  n_g/(n_g − 1) · (s_i − mean_g(s))

    A group of one, and a group whose scores all tie, get A = 0 exactly.
    """
    scores = scores.to(torch.float32) if not scores.is_floating_point() else scores
    count, total, _, tied = _group_stats(scores, _group_index(group_ids))
    baseline = (total - scores) / (count - 1).clamp(min=1.0)
    per_sequence = torch.where((count > 1) & ~tied, scores - baseline, torch.zeros_like(scores))
    advantages = _broadcast_over_tokens(per_sequence, mask)
    return advantages, advantages.clone()


def compute_reinforce_pp_advantages(
    rewards: torch.Tensor, mask: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted return-to-go, whitened over the whole batch.

        G_t = r_t + γ G_{t'}        (t' = next unmasked token; masked tokens transparent)
        A_t = (G_t − mean(G)) / std(G)   over all unmasked tokens of the batch

    Returns (A, G): the un-whitened return-to-go is the "returns".
    """
    batch, length = rewards.shape
    is_live = mask.bool()
    running = torch.zeros(batch, dtype=rewards.dtype, device=rewards.device)
    returns = torch.zeros_like(rewards)
    for t in reversed(range(length)):
        live = is_live[:, t]
        candidate = rewards[:, t] + gamma * running
        running = torch.where(live, candidate, running)
        returns[:, t] = torch.where(live, candidate, torch.zeros_like(candidate))
    return masked_whiten(returns, mask), returns


def place_score_on_last_token(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-level scores: s_i on the last unmasked token of row i, 0 elsewhere.

    An all-masked row (no model token) receives nothing.
    """
    token_scores = torch.zeros(mask.shape, dtype=scores.dtype, device=mask.device)
    last = last_true_index(mask)
    rows = torch.nonzero(last >= 0, as_tuple=True)[0]
    token_scores[rows, last[rows]] = scores.to(mask.device)[rows]
    return token_scores


# --- registry -------------------------------------------------------------------------


@dataclass(frozen=True)
class AdvantageInputs:
    """Everything any estimator may read; each takes what it needs."""

    token_level_rewards: torch.Tensor  # (B, T): score on last token, minus β·KL when in-reward
    mask: torch.Tensor  # (B, T) loss mask
    values: torch.Tensor | None = None  # (B, T), for estimators with a critic
    group_ids: torch.Tensor | list | None = None  # (B,), for group baselines
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True


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


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "gae": AdvantageEstimator(
        lambda x: compute_gae(
            x.token_level_rewards, _require(x.values, "values from a critic", "gae"), x.mask, x.gamma, x.lam
        ),
        needs_critic=True,
        needs_groups=False,
    ),
    "grpo": AdvantageEstimator(
        lambda x: compute_grpo_advantages(
            _sequence_scores(x), x.mask, _require(x.group_ids, "group_ids", "grpo"), x.norm_adv_by_std_in_grpo
        ),
        needs_critic=False,
        needs_groups=True,
    ),
    "drgrpo": AdvantageEstimator(
        lambda x: compute_grpo_advantages(
            _sequence_scores(x), x.mask, _require(x.group_ids, "group_ids", "drgrpo"), norm_by_std=False
        ),
        needs_critic=False,
        needs_groups=True,
    ),
    "rloo": AdvantageEstimator(
        lambda x: compute_rloo_advantages(
            _sequence_scores(x), x.mask, _require(x.group_ids, "group_ids", "rloo")
        ),
        needs_critic=False,
        needs_groups=True,
    ),
    "reinforce_plus_plus": AdvantageEstimator(
        lambda x: compute_reinforce_pp_advantages(x.token_level_rewards, x.mask, x.gamma),
        needs_critic=False,
        needs_groups=False,
    ),
}


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise KeyError(
            f"unknown advantage estimator '{name}'; expected one of {sorted(ADVANTAGE_ESTIMATORS)}"
        ) from None
