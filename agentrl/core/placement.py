"""Where rewards sit on the response tokens: the outcome on the trajectory's last model token.

With step-wise trajectories (several rows per trajectory) the outcome goes on the last model
token of the row holding the trajectory's last step only; a turn's own reward sits on that
turn's last sampled token (the reward role places it, ``turn_scores``).
"""

from __future__ import annotations

import torch

from agentrl.core.masked import last_true_index


def place_score_on_last_token(
    scores: torch.Tensor, mask: torch.Tensor, last_step: torch.Tensor | None = None
) -> torch.Tensor:
    """Token-level scores: s_i on the last unmasked token of row i, 0 elsewhere.

        r_{i,t} = s_i · [t = max{t' : mask_{i,t'} = 1}] · [row i holds its trajectory's last step]

    ``last_step`` (B,) bool: the rows that hold a trajectory's last step (None: every row is
    a whole trajectory). An all-masked row (no model token) receives nothing.
    """
    token_scores = torch.zeros(mask.shape, dtype=scores.dtype, device=mask.device)
    last = last_true_index(mask)
    receives = last >= 0
    if last_step is not None:
        receives &= last_step.to(device=mask.device, dtype=torch.bool)
    rows = torch.nonzero(receives, as_tuple=True)[0]
    token_scores[rows, last[rows]] = scores.to(mask.device)[rows]
    return token_scores


def trajectory_of_rows(last_step: torch.Tensor) -> torch.Tensor:
    """(B,) long: the trajectory (0, 1, …, in order) each row belongs to, when a trajectory's rows
    are consecutive and ``last_step`` (B,) bool marks the last of each:

        owner_i = Σ_{j<i} last_step_j
    """
    ends = last_step.to(torch.long)
    return torch.cumsum(ends, 0) - ends
