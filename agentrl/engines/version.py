"""The version of the weights a rollout's engine samples with: how many policy updates they have had.

The actor sets it before a rollout (the driver says which version it synced the engine to) and,
when new weights reach the engine while trajectories are in flight, sets it again; each sampled
turn records the value it reads when its tokens come back (``Trajectory.turn_versions``), so a
trajectory continued across a weight update carries both versions. The trainer reads the
versions from the batch (``response_versions``) to bound and report staleness.
"""

from __future__ import annotations

__all__ = ["WeightsVersion"]


class WeightsVersion:
    """A counter shared by whoever loads weights into the engine and the rollout that reads it."""

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"WeightsVersion({self.value})"
