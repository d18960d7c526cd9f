"""The actor's hold on its rollout engine: weights kept current, memory freed between rollouts.

An engine that shares the training module is always current. One with its own copy
(``factory.EngineChoice.own_copy``) falls behind whenever the policy's weights change (an
update, a restored checkpoint) and when a sleep released its copy; the link then marks it
stale and streams the weights in (``weights.py``) before the next rollout, once. Around each
rollout it wakes the engine and, when the choice says it sleeps, puts it back to sleep after.

Metrics, under the names the actor reports them by: ``actor/weight_sync_s`` (seconds a sync
before the rollout took, when one ran) and ``actor/engine_sleep_freed_mb`` (what the sleep
after it freed).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agentrl.engines.base import Engine
from agentrl.engines.factory import EngineChoice
from agentrl.engines.weights import WeightStream

WEIGHT_SYNC_METRIC = "actor/weight_sync_s"
SLEEP_FREED_METRIC = "actor/engine_sleep_freed_mb"


class EngineLink:
    """An engine built on first use by ``build``, refreshed from ``weights`` (a fresh stream of
    the policy's current weights at each call) as ``choice`` requires."""

    def __init__(
        self, choice: EngineChoice, build: Callable[[], Engine], weights: Callable[[], WeightStream]
    ) -> None:
        self.choice = choice
        self._build = build
        self._weights = weights
        self._engine: Engine | None = None
        self.stale = False  # the engine's own copy is behind the policy

    @property
    def built(self) -> bool:
        return self._engine is not None

    @property
    def engine(self) -> Engine:
        """The engine, built on first use (an own transformers copy is then marked stale)."""
        if self._engine is None:
            self._engine = self._build()
            if self.choice.syncs_before_first_rollout:
                self.stale = True
        return self._engine

    def weights_changed(self) -> None:
        """The policy's weights moved: an engine with its own copy is now behind."""
        self.stale = self.choice.own_copy

    def sync(self) -> float | None:
        """Stream the current weights in if the engine is behind; the seconds it took, or None
        when nothing was sent (a collective under fsdp: every rank calls it)."""
        return self.push() if self.stale else None

    def push(self) -> float:
        """Stream the current weights into the engine, tensor by tensor; the seconds it took."""
        start = time.perf_counter()
        self.engine.update_weights(self._weights())
        self.stale = False
        return time.perf_counter() - start

    def wake(self) -> dict[str, float]:
        """Before a rollout: wake the engine and bring its copy up to date; the sync's metric."""
        self.engine.wake_up()
        seconds = self.sync()
        return {} if seconds is None else {WEIGHT_SYNC_METRIC: seconds}

    def rest(self) -> dict[str, float]:
        """After a rollout: put a sleeping engine to sleep, releasing its own copy (then resent
        before the next rollout); the sleep's metric, or nothing when the engine stays awake."""
        if not self.choice.sleeps:
            return {}
        freed = self.engine.sleep(release_weights=self.choice.own_copy)
        if freed and self.choice.own_copy:  # its copy was released: resend before the next rollout
            self.stale = True
        return {SLEEP_FREED_METRIC: freed / 2**20}

    def shutdown(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
