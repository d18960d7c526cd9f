"""Credit across the steps and turns of one trajectory.

A trajectory may be split into several rows of a ``(B, T)`` batch, one per step: rows that
share a trajectory id are its steps, ordered by ``step_index``. Right-to-left recursions
(GAE, return-to-go) then run over a trajectory's rows as if their live (mask = 1) tokens
formed one sequence: the "next" live token of a step's last live token is the first live
token of the trajectory's next step, and past the trajectory's last live token the
recursion starts from its initial carry (0). A row with no live token is transparent, as a
masked token is inside a row. Per-turn rewards sit on each turn's last sampled token.

This module holds the step layout, the driver that runs a recursion across steps, and the
return of group-normalised turn rewards; the estimators and their group baselines live in
``agentrl.core.advantages``, which passes its baseline in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


def dense_index(ids: torch.Tensor | list) -> torch.Tensor:
    """Dense 0..N-1 indices for arbitrary (hashable) ids, in order of first appearance."""
    values = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    dense: dict = {}
    return torch.tensor([dense.setdefault(v, len(dense)) for v in values], dtype=torch.long)


@dataclass(frozen=True)
class StepLayout:
    """Which rows belong to which trajectory, and in what order.

    ``trajectory``: (B,) dense trajectory index of each row. ``successor``: (B,) the row of
    the same trajectory's next step, −1 for its last step. ``levels``: the rows grouped by
    their rank within their trajectory (first steps first), so that a backward pass can
    process whole levels at once, every successor before its predecessor.
    """

    trajectory: torch.Tensor
    successor: torch.Tensor
    levels: tuple[torch.Tensor, ...]
    num_trajectories: int


def step_layout(
    trajectory_ids: torch.Tensor | list, step_index: torch.Tensor | list | None = None
) -> StepLayout:
    """The layout of a batch whose rows carry trajectory ids and (optionally) step indices.

    Without ``step_index`` a trajectory's rows are its steps in batch order. Step indices
    need not be contiguous (only their order matters) but must not repeat within a trajectory.
    """
    trajectory = dense_index(trajectory_ids)
    batch = trajectory.numel()
    steps = list(range(batch)) if step_index is None else _as_list(step_index)
    if len(steps) != batch:
        raise ValueError(f"step_index has {len(steps)} entries for {batch} rows")
    rows_of: list[list[tuple[int, int]]] = [[] for _ in range(int(trajectory.max()) + 1 if batch else 0)]
    for row, (traj, step) in enumerate(zip(trajectory.tolist(), steps, strict=True)):
        rows_of[traj].append((int(step), row))
    successor = [-1] * batch
    rank = [0] * batch
    for members in rows_of:
        members.sort()
        for k, (step, row) in enumerate(members):
            rank[row] = k
            if k + 1 < len(members):
                if members[k + 1][0] == step:
                    raise ValueError(f"step_index {step} appears twice in one trajectory")
                successor[row] = members[k + 1][1]
    ranks = torch.tensor(rank, dtype=torch.long)
    depth = int(ranks.max()) + 1 if batch else 0
    levels = tuple(torch.nonzero(ranks == k, as_tuple=True)[0] for k in range(depth))
    return StepLayout(trajectory, torch.tensor(successor, dtype=torch.long), levels, len(rows_of))


def _as_list(values: torch.Tensor | list) -> list:
    return values.tolist() if isinstance(values, torch.Tensor) else list(values)


def first_live_or(values: torch.Tensor, mask: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """Per row, ``values`` at the first live token; ``fallback`` for a row with none (such a
    row is transparent: what its predecessor sees is what the row itself started from)."""
    live = mask.bool()
    first = torch.argmax(live.to(torch.uint8), dim=-1)  # first maximum: the first live token
    picked = values.gather(-1, first.unsqueeze(-1)).squeeze(-1)
    return torch.where(live.any(dim=-1), picked, fallback)


# (rows, carry into each row) → (the rows' outputs, the carry each row hands its predecessor)
StepRecursion = Callable[
    [torch.Tensor, tuple[torch.Tensor, ...]], tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]
]


def backward_over_steps(
    layout: StepLayout, recursion: StepRecursion, initial: tuple[torch.Tensor, ...]
) -> tuple[torch.Tensor, ...]:
    """Run a right-to-left per-row recursion over every trajectory's steps, last step first.

    ``initial`` holds one (B,) carry per recursion state: what a trajectory's last step
    starts from (zeros: nothing after the end). Every other row starts from the carry its
    successor handed back. ``recursion(rows, carry_in)`` must return its outputs for those
    rows, each ``(len(rows), T)``, and the carry each row hands its predecessor. Outputs are
    scattered back to (B, T) in batch order.
    """
    device = initial[0].device
    carries = tuple(c.clone() for c in initial)
    successor = layout.successor.to(device)
    outputs: list[torch.Tensor] = []
    # An empty batch has no level; one empty call still gives outputs of the right shape.
    levels = layout.levels or (torch.zeros(0, dtype=torch.long),)
    for rows in reversed(levels):
        rows = rows.to(device)
        after = successor[rows]
        has_successor = after >= 0
        safe = after.clamp(min=0)
        carry_in = tuple(torch.where(has_successor, c[safe], c[rows]) for c in carries)
        level_outputs, carry_out = recursion(rows, carry_in)
        if not outputs:
            batch = layout.trajectory.numel()
            outputs = [o.new_zeros((batch, *o.shape[1:])) for o in level_outputs]
        for full, part in zip(outputs, level_outputs, strict=True):
            full[rows] = part
        for c, out in zip(carries, carry_out, strict=True):
            c[rows] = out
    return tuple(outputs)


def discounted_return_to_go(
    rewards: torch.Tensor, mask: torch.Tensor, gamma: float, next_return: torch.Tensor | None = None
) -> torch.Tensor:
    """G_t = r_t + γ G_{t'} over the live tokens (t' = next live token; masked tokens
    transparent, and 0 there), starting past the row's last live token from ``next_return``
    (B,) (default 0)."""
    batch, length = rewards.shape
    is_live = mask.bool()
    running = (
        torch.zeros(batch, dtype=rewards.dtype, device=rewards.device)
        if next_return is None
        else next_return.to(dtype=rewards.dtype, device=rewards.device).clone()
    )
    returns = torch.zeros_like(rewards)
    for t in reversed(range(length)):
        live = is_live[:, t]
        candidate = rewards[:, t] + gamma * running
        running = torch.where(live, candidate, running)
        returns[:, t] = torch.where(live, candidate, torch.zeros_like(candidate))
    return returns


def return_to_go_across_steps(
    rewards: torch.Tensor, mask: torch.Tensor, gamma: float, layout: StepLayout
) -> torch.Tensor:
    """``discounted_return_to_go`` over each trajectory's live tokens, all its steps in order:
    a step's last live token continues from the first live token of the trajectory's next step."""

    def recursion(rows: torch.Tensor, carry: tuple[torch.Tensor, ...]):
        returns = discounted_return_to_go(rewards[rows], mask[rows], gamma, carry[0])
        return (returns,), (first_live_or(returns, mask[rows], carry[0]),)

    zeros = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    return backward_over_steps(layout, recursion, (zeros,))[0]


def sum_per_trajectory(per_row: torch.Tensor, layout: StepLayout) -> torch.Tensor:
    """(num_trajectories,): the sum of a per-row quantity over each trajectory's rows."""
    zeros = torch.zeros(layout.num_trajectories, dtype=per_row.dtype, device=per_row.device)
    return zeros.index_add(0, layout.trajectory.to(per_row.device), per_row)


def group_of_each_trajectory(group_ids: torch.Tensor | list, layout: StepLayout) -> list:
    """The group id of each trajectory, in dense trajectory order. A trajectory's rows must
    agree on it: its steps are one sample of its group."""
    groups = _as_list(group_ids)
    if len(groups) != layout.trajectory.numel():
        raise ValueError(f"group_ids has {len(groups)} entries for {layout.trajectory.numel()} rows")
    of_trajectory: dict[int, object] = {}
    for traj, group in zip(layout.trajectory.tolist(), groups, strict=True):
        if of_trajectory.setdefault(traj, group) != group:
            raise ValueError(
                f"the rows of one trajectory carry different group ids: {of_trajectory[traj]!r}, {group!r}"
            )
    return [of_trajectory[t] for t in range(layout.num_trajectories)]


def turn_end_positions(turn_ends: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, columns) of every turn's last sampled token, in row-major order. A mark on a
    masked token is ignored: masked positions are never read."""
    rows, columns = torch.nonzero(turn_ends.bool() & mask.bool(), as_tuple=True)
    return rows, columns


def group_normalised_turn_returns(
    turn_rewards: torch.Tensor,
    turn_ends: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | list,
    gamma: float,
    centre: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    trajectory_ids: torch.Tensor | list | None = None,
    step_index: torch.Tensor | list | None = None,
    turn_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token return of group-normalised turn rewards (B, T).

    With ``turn_index`` (B, T: each turn end's turn number, from 0) a turn is compared with
    the same turn of its group's other trajectories, not with every turn of the group: the
    baseline of turn k is over the group's trajectories that reached a turn k. Then a group
    whose samples earned the same at every turn gets r̃ = 0 throughout, and a turn's credit
    does not depend on how other kinds of turns (answers, searches) are rewarded; the
    property below holds per turn index. Without it, the pooled baseline described next.

    Each turn's reward r (on its last sampled token; ``turn_ends`` marks every turn's, zero
    rewards included) is normalised against its group's pooled turn rewards, every turn end
    of every trajectory of the group counted once: r̃ = ``centre(r, group)``, a group
    baseline over those pooled samples (see ``compute_turn_advantages``), which gives a
    group whose turn rewards all tie r̃ = 0. A group of one trajectory also gets r̃ = 0. A
    token's value is the discounted return-to-go of r̃ over the turn ends at or after it,
    through the trajectory's later steps (γ per live token, as REINFORCE++; masked tokens
    transparent; 0 past the trajectory's last live token):

        U_t = r̃_t + γ U_{t'}        (r̃_t = 0 off turn ends)

    Turn rewards drawn the same way whatever a trajectory's length make the pooled turns of
    a group exchangeable, so r̃ has mean 0 and so has U at every token of every length; the
    raw return-to-go of r would grow with the turns still to come and favour longer
    trajectories.

    Bias and limits. A mean-centred baseline includes the turn itself (its own r enters the
    mean with weight 1/n_g, so r̃ moves only (n_g − 1)/n_g as far as r, and a std is
    estimated from the same turns); a leave-one-out baseline leaves the turn out but not
    the other turns of its trajectory. The baseline is
    state-independent: one per group for every turn of every prefix, so when the turn
    reward's distribution depends on the turn's position or on the trajectory's length, r̃
    is not mean-zero per position and U does favour some lengths. Early turns sum more r̃
    terms, so their tokens carry more variance than late turns'. Long trajectories put more
    turns in the pool, so they weigh more in the group's statistics.
    """
    layout = step_layout(list(range(mask.shape[0])) if trajectory_ids is None else trajectory_ids, step_index)
    trajectory_group = dense_index(group_of_each_trajectory(group_ids, layout))
    trajectories_in_group = torch.bincount(trajectory_group)
    row_group = trajectory_group[layout.trajectory]

    dtype = turn_rewards.dtype if turn_rewards.is_floating_point() else torch.float32
    rows, columns = turn_end_positions(turn_ends, mask)
    rewards = turn_rewards[rows, columns].to(dtype)
    group = row_group.to(rows.device)[rows]
    key = (
        group
        if turn_index is None
        else dense_index(list(zip(group.tolist(), turn_index[rows, columns].tolist(), strict=True)))
    )
    centred = centre(rewards, key.to(rows.device))
    # A group of one trajectory has no other sample to compare with (its outcome gets A = 0
    # too); comparing its turns with each other would only move credit around inside it.
    alone = trajectories_in_group.to(rows.device)[group] < 2
    centred = torch.where(alone, torch.zeros_like(centred), centred)
    placed = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    placed[rows, columns] = centred
    return return_to_go_across_steps(placed, mask, gamma, layout)
