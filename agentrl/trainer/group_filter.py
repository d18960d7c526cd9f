"""Dynamic sampling (DAPO): a step's prompt groups drawn round by round until enough carry a signal.

Under a group estimator (grpo, drgrpo, rloo) a group whose samples all score alike, all right or
all wrong, gets advantage 0 on every token: its forward and backward cost a full share of the
update and teach nothing. ``fill_groups`` drops such groups and asks for another round of
prompts until the step holds ``target`` informative groups or ``max_rounds`` rounds were drawn;
a step still short then takes tied groups, in the order they were drawn, so the batch always
has exactly ``target`` groups (the shape the data-parallel split and the mini-batches need),
and its metrics say how many were padded. Groups beyond ``target`` are discarded, as DAPO does;
their prompts count as consumed, so a resumed run draws on from where this one stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from agentrl.agent.generation import RolloutResult
from agentrl.agent.trajectory import Trajectory
from agentrl.core.advantages import group_ties
from agentrl.core.batch import Batch
from agentrl.core.placement import trajectory_of_rows

__all__ = [
    "Scored",
    "Selection",
    "fill_groups",
    "group_rows",
    "informative",
    "merge_scored",
    "select_groups",
    "signal_metrics",
    "tied_share",
]


@dataclass(frozen=True)
class Scored:
    """Trajectories collated with their scores (``batch["scores"]``, one per row, in order) and the
    reward role's metrics of them: what one round of a step gives, and what the update reads."""

    rollout: RolloutResult
    batch: Batch
    reward_metrics: dict[str, float] = field(default_factory=dict)

    @property
    def scores(self) -> torch.Tensor:
        return self.batch["scores"]

    @property
    def group_ids(self) -> list[str]:
        """One per trajectory (a trajectory of several steps has several rows in ``batch``)."""
        return [t.group_id for t in self.rollout.trajectories]

    @property
    def outcomes(self) -> torch.Tensor:
        """Each trajectory's score, once: the score of the row holding its last step."""
        return self.scores[_last_step_rows(self.batch)]

    @property
    def turn_values(self) -> list[list[float]]:
        """Each trajectory's turn rewards (``turn_scores`` at its turns' last tokens), by turn."""
        values: list[list[float]] = [[] for _ in self.rollout.trajectories]
        turns = self.batch.get("turn_scores")
        if turns is None:
            return values
        ends = self.batch["response_turn_ends"]
        for row, owner in enumerate(_row_owner(self.batch).tolist()):
            values[owner].extend(turns[row][ends[row]].tolist())
        return values


def _last_step_rows(batch: Batch) -> torch.Tensor:
    if "last_step" not in batch:
        return torch.arange(len(batch))
    return torch.tensor([bool(x) for x in batch["last_step"]]).nonzero().flatten()


def _row_owner(batch: Batch) -> torch.Tensor:
    """The trajectory (0, 1, …, in order) each row belongs to: rows of one are consecutive."""
    if "last_step" not in batch:
        return torch.arange(len(batch))
    return trajectory_of_rows(torch.tensor([bool(x) for x in batch["last_step"]]))


def rows_of_trajectories(scored: Scored, outcomes: torch.Tensor) -> torch.Tensor:
    """Per-trajectory ``outcomes`` repeated over each trajectory's rows in ``scored.batch``."""
    return outcomes[_row_owner(scored.batch)]


@dataclass(frozen=True)
class Selection:
    """The rows a step keeps, group by group in the order they were drawn."""

    rows: list[int]
    informative: int  # kept groups whose scores differ
    padded: int  # kept groups that tied, taken because the rounds ran out


def group_rows(group_ids: Sequence[str]) -> dict[str, list[int]]:
    """Each group's row indices, groups in the order their first row appears."""
    rows: dict[str, list[int]] = {}
    for i, gid in enumerate(group_ids):
        rows.setdefault(gid, []).append(i)
    return rows


def _tied_groups(
    group_ids: Sequence[str], scores: torch.Tensor, turn_values: Sequence[Sequence[float]] | None = None
) -> dict[str, tuple[list[int], bool]]:
    """Each group's rows and whether it gives every sample A = 0, groups in draw order: its scores
    all tie (``core.advantages.group_ties``: the estimators' own rule) and so do its turn rewards
    turn by turn (the group turn scheme of ``core.turn_credit``: a baseline per turn index)."""
    ties = group_ties(scores, list(group_ids))
    groups = {}
    for gid, rows in group_rows(group_ids).items():
        by_turn: dict[int, set[float]] = {}
        for i in rows:
            for k, value in enumerate(turn_values[i] if turn_values is not None else ()):
                by_turn.setdefault(k, set()).add(value)
        groups[gid] = (rows, bool(ties[rows[0]]) and all(len(values) == 1 for values in by_turn.values()))
    return groups


def tied_share(
    group_ids: Sequence[str], scores: torch.Tensor, turn_values: Sequence[Sequence[float]] | None = None
) -> float:
    """The share of groups whose scores (and turn rewards) all tie (exactly equal: advantage 0)."""
    groups = _tied_groups(group_ids, scores, turn_values)
    if not groups:
        return 0.0
    return sum(tied for _, tied in groups.values()) / len(groups)


def signal_metrics(
    group_ids: Sequence[str],
    scores: torch.Tensor,
    grouped: bool,
    turn_values: Sequence[Sequence[float]] | None = None,
) -> dict[str, float]:
    """What a step's scores say about its learning signal, over every sample it generated (before
    any filtering): ``signal/score_mean``, ``signal/score_spread`` (max − min score) and, for a
    group estimator (``grouped``), ``signal/tied_group_share``. The dead-signal alarms read them."""
    metrics = {
        "signal/score_mean": float(scores.mean()) if len(scores) else 0.0,
        "signal/score_spread": float(scores.max() - scores.min()) if len(scores) else 0.0,
    }
    if grouped:
        metrics["signal/tied_group_share"] = tied_share(group_ids, scores, turn_values)
    return metrics


def select_groups(
    group_ids: Sequence[str],
    scores: torch.Tensor,
    target: int,
    turn_values: Sequence[Sequence[float]] | None = None,
) -> Selection:
    """The first ``target`` informative groups in draw order; tied groups (also in draw order)
    fill what is missing. Fewer than ``target`` groups in all is an error: a round always draws
    ``target`` prompts."""
    groups = _tied_groups(group_ids, scores, turn_values)
    if len(groups) < target:
        raise ValueError(f"{len(groups)} groups drawn, fewer than the {target} a step trains on")
    informative = [rows for rows, tied in groups.values() if not tied][:target]
    tied = [rows for rows, tied in groups.values() if tied][: target - len(informative)]
    chosen = {rows[0] for rows in informative + tied}  # keep the draw order across both kinds
    rows = [i for members, _ in groups.values() if members[0] in chosen for i in members]
    return Selection(rows, informative=len(informative), padded=len(tied))


def _weighted_metrics(parts: Sequence[Scored]) -> dict[str, float]:
    """The reward role's per-round means as one mean over every row of every round."""
    totals: dict[str, float] = {}
    weights: dict[str, int] = {}
    for part in parts:
        size = len(part.rollout.trajectories)
        for name, value in part.reward_metrics.items():
            totals[name] = totals.get(name, 0.0) + value * size
            weights[name] = weights.get(name, 0) + size
    return {name: totals[name] / weights[name] for name in totals}


def fill_groups(
    first: Scored,
    draw: Callable[[int], Scored],
    collate: Callable[[list[Trajectory]], Batch],
    target: int,
    max_rounds: int,
    by_turns: bool = True,
) -> tuple[Scored, dict[str, float]]:
    """Rounds of ``draw(round)`` after ``first`` until ``target`` informative groups were drawn or
    ``max_rounds`` rounds ran (informative: outcomes differ, or with ``by_turns`` any turn's
    rewards differ; ``algorithm.dynamic_sampling.signal``); returns the kept rows (``collate``d
    anew, their scores carried over) and metrics: ``dynamic_sampling/*`` and ``signal_metrics``
    of every drawn row. The kept ``Scored`` has the kept trajectories, the rollout metrics of
    everything generated (``RolloutResult.merge``), and the reward metrics averaged over every
    scored row."""
    rounds = [first]
    found = _informative_groups(first, by_turns)
    while len(rounds) < max_rounds and found < target:
        rounds.append(draw(len(rounds)))
        found += _informative_groups(rounds[-1], by_turns)
    trajectories = [t for part in rounds for t in part.rollout.trajectories]
    outcomes = torch.cat([part.outcomes for part in rounds])  # one per trajectory
    turn_values = [values for part in rounds for values in part.turn_values]
    group_ids = [t.group_id for t in trajectories]
    selection = select_groups(group_ids, outcomes, target, turn_values if by_turns else None)
    merged = _merge_rounds([part.rollout for part in rounds])
    kept = _kept(trajectories, outcomes, selection.rows, merged, _weighted_metrics(rounds), collate)
    drawn = len(group_rows(group_ids))
    metrics = {
        "dynamic_sampling/rounds": float(len(rounds)),
        "dynamic_sampling/prompts_consumed": float(drawn),
        "dynamic_sampling/informative_groups": float(selection.informative),
        "dynamic_sampling/padded_groups": float(selection.padded),
    }
    metrics |= signal_metrics(group_ids, outcomes, grouped=True, turn_values=turn_values)
    return kept, metrics


def merge_scored(
    kept: Sequence[Scored], collate: Callable[[list[Trajectory]], Batch], left_out: Sequence[Scored] = ()
) -> Scored:
    """Scored groups that generated side by side (taken as they finish) as one: the ``kept``
    groups' trajectories in order, ``collate``d anew with each one's outcome carried over (the
    caller scores the turns anew); the rollout metrics (merged as data-parallel ranks' are:
    ``RolloutResult.merge``) and the reward metrics (averaged over every row) of all of them, those
    ``left_out`` of the batch too, as ``fill_groups`` reports every round."""
    trajectories = [t for part in kept for t in part.rollout.trajectories]
    outcomes = torch.cat([part.outcomes for part in kept])
    generated = RolloutResult.merge([part.rollout for part in [*kept, *left_out]])
    everything = _weighted_metrics([*kept, *left_out])
    return _kept(trajectories, outcomes, range(len(trajectories)), generated, everything, collate)


def _kept(
    trajectories: Sequence[Trajectory],
    outcomes: torch.Tensor,
    rows: Sequence[int],
    generated: RolloutResult,
    reward_metrics: dict[str, float],
    collate: Callable[[list[Trajectory]], Batch],
) -> Scored:
    """The trajectories at ``rows`` collated, each with its outcome on every one of its rows; the
    rollout metrics are those of everything ``generated``."""
    kept_trajectories = [trajectories[i] for i in rows]
    batch = collate(kept_trajectories)
    rollout = RolloutResult(kept_trajectories, generated.metrics, generated.per_rank, generated.summed)
    kept = Scored(rollout, batch, reward_metrics)
    batch["scores"] = rows_of_trajectories(kept, outcomes[list(rows)])
    return kept


def _merge_rounds(parts: Sequence[RolloutResult]) -> RolloutResult:
    """The rounds' rollouts as one: metrics recomputed over every trajectory; the seconds each
    round spent (tool-busy time, the per-rank figures such as an engine's weight sync) summed,
    since the rounds ran one after another (across ranks, at once, they merge by maximum)."""
    if len(parts) == 1:
        return parts[0]
    merged = RolloutResult.merge(parts)
    for name in ("rollout/tool_busy_s", *merged.per_rank):
        merged.metrics[name] = sum(part.metrics.get(name, 0.0) for part in parts)
    return merged


def _informative_groups(part: Scored, by_turns: bool) -> int:
    groups = _tied_groups(part.group_ids, part.outcomes, part.turn_values if by_turns else None)
    return sum(not tied for _, tied in groups.values())


def informative(group: Scored, by_turns: bool) -> bool:
    """Whether one prompt's scored group carries a signal: its outcomes differ, or with ``by_turns``
    any turn's rewards do (``algorithm.dynamic_sampling.signal``)."""
    return _informative_groups(group, by_turns) > 0
