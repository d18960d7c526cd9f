"""The version of the weights a rollout's engine samples with: the training step they come from.

The version is the driver's step count when the weights were synced into the engine (the
updates they have had, except during a critic's warm-up, when steps pass without an actor
update). The actor sets it before a rollout, from the version the driver says it synced, and
again when it loads new weights while trajectories are in flight (``trainer.partial_rollout:
continue``, after the swap); a trajectory continued across that update then carries both
versions. Each sampled turn records the value it reads when the turn is asked for
(``Trajectory.turn_versions``): a turn whose sampling new weights interrupt keeps the older
version, so a token is never counted newer than the weights that sampled it (at worst older).
The trainer reads the versions from the batch (``response_versions``) to bound and report
staleness.
"""

from __future__ import annotations

__all__ = ["WeightsVersion"]


class WeightsVersion:
    """A counter shared by whoever loads weights into the engine and the rollout that reads it."""

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"WeightsVersion({self.value})"
