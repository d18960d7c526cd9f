"""DAPO's two treatments of responses that run into the length budget, as tensor math.

A response cut by the budget carries no judgement of its answer (there is none), only of its
length. DAPO (Yu et al., 2025) either takes such samples out of the loss (overlong filtering)
or shapes the reward of long responses with a linear ramp (soft overlong punishment).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["overlong_loss_mask", "overlong_rows", "soft_overlong_penalty"]


def soft_overlong_penalty(
    lengths: torch.Tensor, max_length: int, buffer: int, factor: float = 1.0
) -> torch.Tensor:
    """The reward added to each response of length ``|y|`` (``lengths``, one per row):

        R(y) = 0                              if |y| ≤ L_max − L_buf
        R(y) = −f · (|y| − (L_max − L_buf)) / L_buf   if L_max − L_buf < |y| ≤ L_max
        R(y) = −f                             if |y| > L_max

    with L_max = ``max_length`` (the response budget), L_buf = ``buffer`` tokens and f =
    ``factor``. ``buffer`` 0 turns it off (all zeros). The ramp reaches −f exactly at the budget.
    """
    if buffer < 0 or buffer >= max_length:
        raise ValueError(f"the overlong buffer must be in [0, {max_length}), got {buffer}")
    lengths = lengths.to(torch.float32)
    if buffer == 0:
        return torch.zeros_like(lengths)
    excess = (lengths - (max_length - buffer)).clamp(min=0.0, max=float(buffer))
    return -factor * excess / buffer


def overlong_rows(response_truncated: Sequence[bool], context_truncated: Sequence[bool]) -> torch.Tensor:
    """o_i = 1 for a row the response budget or the context cut short: a sample with no answer
    to judge, only a length."""
    flags = [bool(a or b) for a, b in zip(response_truncated, context_truncated, strict=True)]
    return torch.tensor(flags, dtype=torch.bool)


def overlong_loss_mask(mask: torch.Tensor, overlong: torch.Tensor) -> torch.Tensor:
    """Overlong filtering: the loss mask ``m`` with every row of an overlong sample zeroed,

        m'_{i,t} = m_{i,t} · (1 − o_i)

    for ``mask`` (B, T) and ``overlong`` o (B,) booleans. The row's tokens then leave every
    aggregation (``agg_loss``): the token-mean denominators too.
    """
    if overlong.shape != mask.shape[:1]:
        raise ValueError(
            f"overlong must have one flag per row: {tuple(overlong.shape)} vs mask {tuple(mask.shape)}"
        )
    keep = (~overlong.to(torch.bool)).to(mask.dtype)
    return mask * keep.unsqueeze(-1)
