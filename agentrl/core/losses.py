"""Per-token losses and their aggregation: KL estimators, clipped policy loss, value loss, entropy.

All functions take ``(batch, T)`` tensors and a 0/1 ``mask`` (the loss mask: model tokens
only). Aggregation over tokens is always ``agg_loss``, so one config key
(``loss_agg_mode``) decides how every loss is reduced.
"""

from __future__ import annotations

import torch

from agentrl.core.masked import masked_mean, masked_sum

# --- KL estimators ----------------------------------------------------------------------

_KL_ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}
KL_KINDS = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl")


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token estimate of KL(π_θ ‖ π_ref) from the log-probs of the sampled tokens.

    With Δ = log π_θ(a) − log π_ref(a):

        k1 (kl):           Δ
        abs:               |Δ|
        k2 (mse):          ½ Δ²
        k3 (low_var_kl):   exp(−Δ) + Δ − 1, clamped to [−10, 10]

    k1 is unbiased but noisy, k3 is unbiased, non-negative and low-variance
    (Schulman, "Approximating KL divergence").
    """
    kind = _KL_ALIASES.get(kind, kind)
    delta = log_prob - ref_log_prob
    if kind == "k1":
        return delta
    if kind == "abs":
        return delta.abs()
    if kind == "k2":
        return 0.5 * delta.square()
    if kind == "k3":
        neg = -delta  # ref − lp
        return torch.clamp(torch.exp(neg) - neg - 1, min=-10.0, max=10.0)
    raise ValueError(f"unknown KL estimator '{kind}'; expected one of {list(KL_KINDS)}")


def kl_in_reward(
    token_scores: torch.Tensor,
    log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    mask: torch.Tensor,
    coef: float,
    kind: str = "k1",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rewards with the KL penalty, and the per-token KL (0 off the mask).

        r_t = s_t − β · KL_t    on model tokens (m_t = 1)
        r_t = s_t               elsewhere (observations, padding: the policy did not write them)

    with KL_t the ``kind`` estimator of log π_old − log π_ref and β = ``coef``.
    """
    kl = torch.where(mask.bool(), kl_penalty(log_prob, ref_log_prob, kind), torch.zeros_like(log_prob))
    return token_scores - coef * kl, kl


# --- aggregation -----------------------------------------------------------------------

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def agg_loss(
    loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, norm_tokens: int | None = None
) -> torch.Tensor:
    """Reduce a ``(B, T)`` loss matrix to a scalar over the unmasked tokens.

        token-mean:               Σ_{i,t} m L / Σ_{i,t} m
        seq-mean-token-sum:       (1/B) Σ_i Σ_t m L
        seq-mean-token-mean:      (1/B) Σ_i (Σ_t m L / Σ_t m)
        seq-mean-token-sum-norm:  (1/B) Σ_i Σ_t m L / C      (Dr.GRPO constant normaliser)

    C = ``norm_tokens`` is a configured constant (the response budget, as Dr.GRPO
    specifies), never a property of the batch: dividing by the batch's longest response
    would change the effective learning rate from one step to the next.
    Sequences with no unmasked token contribute 0 to the seq-mean modes' sums.
    """
    if mode == "token-mean":
        return masked_mean(loss_mat, mask)
    per_sequence_sum = masked_sum(loss_mat, mask, dim=-1)
    if mode == "seq-mean-token-sum":
        return per_sequence_sum.mean()
    if mode == "seq-mean-token-mean":
        counts = mask.to(loss_mat.dtype).sum(dim=-1).clamp(min=1.0)
        return (per_sequence_sum / counts).mean()
    if mode == "seq-mean-token-sum-norm":
        if norm_tokens is None or norm_tokens < 1:
            raise ValueError(
                f"loss_agg_mode 'seq-mean-token-sum-norm' divides by a constant token count: pass "
                f"norm_tokens >= 1 (the response budget), got {norm_tokens!r}"
            )
        return (per_sequence_sum / norm_tokens).mean()
    raise ValueError(f"unknown loss_agg_mode '{mode}'; expected one of {list(LOSS_AGG_MODES)}")


# --- policy and value losses -----------------------------------------------------------


def policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = None,
    agg: str = "token-mean",
    norm_tokens: int | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate, per token, aggregated by ``agg`` (``norm_tokens``: see ``agg_loss``).

        r_t = exp(log π_θ(a_t) − log π_old(a_t))
        L_t = −min(r_t A_t, clip(r_t, 1 − ε_low, 1 + ε_high) A_t)

    Dual clip (Ye et al. 2020), for A_t < 0 only, bounds the loss by −c·A_t (c > 1):

        L_t = min(L_t, −c A_t)

    ``token_weights`` w_t (constants, e.g. ``off_policy.importance_weights``) scale each token's
    loss, L_t ← w_t · L_t, before aggregation.

    Metrics: ``pg_clipfrac`` (share of tokens where the clipped term is the active one),
    ``pg_clipfrac_lower`` (share bounded by the dual clip) and ``ppo_kl`` (mean of
    old_log_prob − log_prob, the sample estimate of KL(π_old ‖ π_θ)).
    """
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1 (got {dual_clip_c})")
    # The log-ratio is clamped before exp for numerical safety only; ±20 is far outside
    # any ratio the clip would let through.
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss_mat = torch.maximum(unclipped, clipped)
    clip_active = (clipped > unclipped).to(loss_mat.dtype)

    lower_active = torch.zeros_like(loss_mat)
    if dual_clip_c is not None:
        bound = -advantages * dual_clip_c
        dual = torch.minimum(loss_mat, bound)
        negative = advantages < 0
        lower_active = (negative & (loss_mat > bound)).to(loss_mat.dtype)
        loss_mat = torch.where(negative, dual, loss_mat)
    if token_weights is not None:
        loss_mat = loss_mat * token_weights.detach()

    loss = agg_loss(loss_mat, mask, agg, norm_tokens)
    metrics = {
        "pg_clipfrac": masked_mean(clip_active, mask).detach(),
        "pg_clipfrac_lower": masked_mean(lower_active, mask).detach(),
        "ppo_kl": masked_mean(-log_ratio, mask).detach(),
    }
    return loss, metrics


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None = 0.5,
    agg: str = "token-mean",
    norm_tokens: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value regression (PPO2 style).

        v_clip = V_old + clip(V − V_old, −ε, ε)
        L_t = ½ max((V − R)², (v_clip − R)²)

    With ``clip=None`` it is the plain ½ (V − R)². ``vf_clipfrac`` is the share of
    tokens where the clipped branch is the larger one.
    """
    unclipped = (values - returns).square()
    if clip is None:
        loss_mat = 0.5 * unclipped
        clip_active = torch.zeros_like(loss_mat)
    else:
        values_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        clipped = (values_clipped - returns).square()
        loss_mat = 0.5 * torch.maximum(unclipped, clipped)
        clip_active = (clipped > unclipped).to(loss_mat.dtype)
    loss = agg_loss(loss_mat, mask, agg, norm_tokens)
    return loss, {"vf_clipfrac": masked_mean(clip_active, mask).detach()}


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution at each position.

        H = logsumexp(z) − Σ_v softmax(z)_v z_v

    ``logits``: (..., V) → (...). Computed in the logits' dtype without materialising
    log-softmax twice.
    """
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def log_probs_from_logits(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """log softmax(z)[a] for each position: (..., V), (...) → (...)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
