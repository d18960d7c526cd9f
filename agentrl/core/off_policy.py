"""Off-policy correction for tokens sampled by weights other than π_old: importance weights and staleness.

An asynchronous trainer samples with the engine's weights (the behaviour policy π_b), which may be
some updates behind the weights that computed ``old_log_prob`` (π_old, the proximal policy PPO clips
against). This module weighs or rejects those tokens, measures how uneven the weights are (ESS), and
measures and bounds how stale the sampling weights were.

Tensors are ``(B, R)``: B rows (one sample each, e.g. one step of a trajectory), R response
positions, with ``mask`` 1.0 on the tokens the policy sampled (the ones trained) and 0 elsewhere.
Metrics are python floats under ``off_policy/``. A batch with no sampled token yields weights and
``keep`` of all 0 and every metric 0.0 (the ESS included: there is no sample to be effective).
"""

from __future__ import annotations

import torch

from agentrl.core.masked import masked_mean, masked_sum

IS_LEVELS = ("token", "sequence")
IS_MODES = ("truncate", "reject")

# Bound on |log ρ| before exp: e^20 ≈ 4.9e8 is far above any useful cap, and exp stays finite in
# float32 (the old ``truncated_importance_weights`` clamps at the same max).
_MAX_LOG_RATIO = 20.0


def _validate_importance_args(level: str, mode: str, cap: float) -> None:
    if level not in IS_LEVELS:
        raise ValueError(f"unknown level '{level}'; expected one of {list(IS_LEVELS)}")
    if mode not in IS_MODES:
        raise ValueError(f"unknown mode '{mode}'; expected one of {list(IS_MODES)}")
    # ``not cap > 0`` also rejects NaN, which every comparison would silently pass.
    if not cap > 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    if mode == "reject" and cap < 1:
        raise ValueError(
            f"cap must be >= 1 in mode 'reject' (the accepted band [1/cap, cap] must contain 1), got {cap}"
        )


def _log_ratio(
    old_log_prob: torch.Tensor, behaviour_log_prob: torch.Tensor, mask: torch.Tensor, level: str
) -> torch.Tensor:
    """log ρ per token, ``(B, R)``; at sequence level each row's summed log-ratio on all its positions."""
    # The weights are constants of the loss: no gradient may flow into π_old or π_b through them.
    delta = (old_log_prob - behaviour_log_prob).detach()
    if level == "sequence":
        # masked_sum replaces (not multiplies) off-mask positions, so a −inf log-prob on padding
        # cannot turn a row's sum into NaN.
        delta = masked_sum(delta, mask, dim=-1).unsqueeze(-1).expand_as(delta)
    return torch.clamp(delta, min=-_MAX_LOG_RATIO, max=_MAX_LOG_RATIO)


def importance_weights(
    old_log_prob: torch.Tensor,
    behaviour_log_prob: torch.Tensor,
    mask: torch.Tensor,
    *,
    level: str,
    mode: str,
    cap: float,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Importance weights that correct PPO for tokens sampled by π_b rather than π_old, and the loss mask.

    The ratio, with log-ratios clamped to [−20, 20] before exp:

        token:     ρ_t = exp(log π_old(a_t) − log π_b(a_t))
        sequence:  ρ_i = exp(Σ_t m_t (log π_old(a_t) − log π_b(a_t))), shared by every token of row i

    The weight w and the loss mask ``keep``, with C = ``cap``:

        truncate (TIS):        w = min(ρ, C) · m,   keep = m
        reject (masked IS):    keep = m · 1[1/C ≤ ρ ≤ C],   w = ρ · keep

    A unit (a token, or a whole row at sequence level) outside [1/C, C] is rejected: it is dropped
    from the loss instead of being down-weighted. ``weights`` are 0 wherever ``keep`` is 0.

    Metrics: ``off_policy/is_weight_mean`` (mean of w over kept tokens), ``off_policy/is_truncated_frac``
    (truncate: share of masked tokens with ρ > C; 0.0 in reject mode), ``off_policy/is_rejected_frac``
    (reject: share of masked tokens rejected; 0.0 in truncate mode) and ``off_policy/ess``
    (``effective_sample_size`` of w over the kept units). With no masked token all are 0.0.
    """
    _validate_importance_args(level, mode, cap)
    ratio = torch.exp(_log_ratio(old_log_prob, behaviour_log_prob, mask, level))
    sampled = mask.to(ratio.dtype)
    truncated_frac = rejected_frac = 0.0
    if mode == "truncate":
        keep = sampled.clone()
        capped = torch.clamp(ratio, max=cap)
        truncated_frac = float(masked_mean((ratio > cap).to(ratio.dtype), sampled))
    else:
        inside = ((ratio >= 1.0 / cap) & (ratio <= cap)).to(ratio.dtype)
        keep = sampled * inside
        capped = ratio
        rejected_frac = float(masked_mean(1.0 - inside, sampled))
    weights = torch.where(keep.bool(), capped, torch.zeros_like(capped))
    metrics = {
        "off_policy/is_weight_mean": float(masked_mean(weights, keep)),
        "off_policy/is_truncated_frac": truncated_frac,
        "off_policy/is_rejected_frac": rejected_frac,
        "off_policy/ess": effective_sample_size(weights, keep, level),
    }
    return weights, keep, metrics


def effective_sample_size(weights: torch.Tensor, mask: torch.Tensor, level: str) -> float:
    """Normalised effective sample size of importance weights (Kish):

        ESS = (Σ_u w_u)² / (N · Σ_u w_u²)

    over the N units u: the tokens with mask > 0 at ``level="token"``; at ``level="sequence"`` the
    rows with any such token, each weighted by its row's weight (the mean of w over the row's masked
    tokens, which all share it). ESS lies in (0, 1] and is 1 when all weights are equal; it falls
    towards 1/N as one unit dominates. No unit, or all weights 0, gives 0.0.
    """
    if level not in IS_LEVELS:
        raise ValueError(f"unknown level '{level}'; expected one of {list(IS_LEVELS)}")
    active = mask > 0
    if level == "token":
        units = weights[active]
    else:
        has_token = active.any(dim=-1)
        units = masked_mean(weights, active, dim=-1)[has_token]
    # Float64 and division by the largest weight: ESS is scale-invariant, and this keeps w² from
    # overflowing (w up to e^20) or underflowing in float32.
    units = units.detach().double()
    if units.numel() == 0 or not bool((units > 0).any()):
        return 0.0
    units = units / units.abs().max()
    ess = units.sum().square() / (units.numel() * units.square().sum())
    # Cauchy–Schwarz bounds ESS by 1; rounding can overshoot by an ulp.
    return min(float(ess), 1.0)


def _sampled_versions(versions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Versions of the sampled tokens (mask > 0 and a known version ≥ 0), flattened."""
    return versions[(mask > 0) & (versions >= 0)]


def staleness_metrics(
    versions: torch.Tensor, mask: torch.Tensor, current_version: int, max_staleness: int
) -> dict[str, float]:
    """How many updates old the weights were that sampled each token.

        staleness_t = current_version − version_t

    over the sampled tokens (mask > 0 and version ≥ 0; −1 marks a position no weights sampled).
    Returns ``off_policy/staleness_mean`` and ``off_policy/staleness_max``, the histogram
    ``off_policy/staleness_frac/{k}`` = share of those tokens exactly k versions old for k in
    0..max_staleness (it sums to 1 when no token is older than ``max_staleness``), and
    ``off_policy/version_spread`` = max − min version. With no sampled token every value is 0.0.
    """
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    sampled = _sampled_versions(versions, mask)
    names = [f"off_policy/staleness_frac/{k}" for k in range(max_staleness + 1)]
    if sampled.numel() == 0:
        empty = {"off_policy/staleness_mean": 0.0, "off_policy/staleness_max": 0.0}
        return {**empty, **dict.fromkeys(names, 0.0), "off_policy/version_spread": 0.0}
    staleness = current_version - sampled
    metrics = {
        "off_policy/staleness_mean": float(staleness.double().mean()),
        "off_policy/staleness_max": float(staleness.max()),
    }
    for k, name in enumerate(names):
        metrics[name] = float((staleness == k).double().mean())
    metrics["off_policy/version_spread"] = float(sampled.max() - sampled.min())
    return metrics


def stale_tokens(versions: torch.Tensor, mask: torch.Tensor, current_version: int, max_staleness: int) -> int:
    """Number of sampled tokens whose version is out of bounds; the trainer refuses a batch with any.

        count = #{t : m_t > 0, version_t ≥ 0, staleness_t > max_staleness or staleness_t < 0}

    with staleness_t = current_version − version_t. A token newer than ``current_version`` (negative
    staleness) cannot have been sampled by weights that exist yet, so it is counted as an error too.
    """
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    staleness = current_version - _sampled_versions(versions, mask)
    return int(((staleness > max_staleness) | (staleness < 0)).sum())
