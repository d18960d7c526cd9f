"""The version of the weights a rollout's engine samples with: the training step they come from.

The version is the driver's step count when the weights were synced into the engine (the
updates they have had, except during a critic's warm-up, when steps pass without an actor
update). The actor sets it before a rollout, from the version the driver says it synced; each
sampled turn records the value it reads when its tokens come back (``Trajectory.turn_versions``).
Whoever loads new weights while trajectories are in flight (a partial rollout) sets it again,
and a trajectory continued across that update then carries both versions; the colocated actor
never does today (its engine serves one rollout at a time). The trainer reads the versions from
the batch (``response_versions``) to bound and report staleness.
"""

from __future__ import annotations

__all__ = ["WeightsVersion"]


class WeightsVersion:
    """A counter shared by whoever loads weights into the engine and the rollout that reads it."""

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"WeightsVersion({self.value})"
