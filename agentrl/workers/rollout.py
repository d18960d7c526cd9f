"""The rollout on resources of its own: the policy in an engine of its own, fed the actor's weights.

With ``resources.rollout_workers`` > 0 the trajectories come from these workers, not from the
actor: each holds the policy (the actor's model directory, in the actor's compute dtype) in the
transformers engine (``engines.factory.rollout_role_engine``), generates the step's prompts the
actor would have (``Rollouts.sample``: the same streams, so the same tokens from the same
weights), and takes the actor's weights after each update (``load_weights``), between two decode
steps of whatever it is generating: turns asked for after that sample with, and record, the new
version (a partial rollout that continues). Several rollouts may generate at once, one per
concurrency slot (the driver keeps up to ``trainer.max_staleness`` in flight): they all run on one
event loop the worker keeps, so they share the engine's running batch and the tools' sessions
(closed when the worker shuts down, not after each rollout, as another may be using them). Its
ranks never meet: each generates its chunk of a step's prompts.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any

import torch

from agentrl.agent.generation import RolloutResult
from agentrl.config.schema import ActorConfig
from agentrl.engines.factory import rollout_role_engine
from agentrl.models.loading import DTYPES, load_causal_lm, load_tokenizer
from agentrl.workers.base import ModelWorker, RoleWorker
from agentrl.workers.rollouts import Rollouts


class RolloutWorker(RoleWorker, ModelWorker, Rollouts):
    """Built from the actor's config section (module docstring)."""

    collective = False
    shards = False
    closes_tools_after_run = False  # the rollouts in flight share the tools' sessions

    def _setup(self, actor: ActorConfig) -> None:
        self.actor = actor
        self.compute_dtype = DTYPES[actor.compute_dtype]
        self.model = load_causal_lm(actor.model_path, dtype=self.compute_dtype, device=self.device).eval()
        self.model.requires_grad_(False)
        self.tokenizer = load_tokenizer(actor.model_path)
        choice = rollout_role_engine(actor.rollout, self.context.partial_rollout)
        # never stale: the engine shares this module
        self.engine_link = self.link_engine(choice, actor.model_path, weights=lambda: self.model.state_dict())
        self._loop = asyncio.new_event_loop()  # every rollout of this worker runs here
        threading.Thread(target=self._loop.run_forever, name="rollouts", daemon=True).start()

    def run_rollout(self, rollout: Coroutine[Any, Any, RolloutResult]) -> RolloutResult:
        """On the worker's one event loop, beside the other rollouts in flight."""
        return asyncio.run_coroutine_threadsafe(rollout, self._loop).result()

    def generate_sequences(
        self,
        prompts: list,
        n: int,
        seed: int | None = None,
        validate: bool = False,
        first_index: int = 0,
        weights_version: int = 0,
    ) -> RolloutResult:
        """The actor's ``generate_sequences``, on the weights this worker holds: the turns record the
        version ``load_weights`` last set, never ``weights_version`` (the driver's view when it
        asked, which a load that arrived since may have passed)."""
        del weights_version
        return self.sample(prompts, n, seed, validate, first_index)

    def load_weights(self, weights: dict[str, torch.Tensor], weights_version: int) -> float:
        """Take the actor's weights after its ``weights_version``-th update, between two decode steps
        of the rollouts generating; the turns asked for from then on record that version. The
        seconds it took."""
        start = time.perf_counter()
        self.engine_link.engine.update_weights(weights)
        self.rollout.weights.value = weights_version  # after the copy: never ahead of the engine
        return time.perf_counter() - start

    def shutdown(self) -> None:
        if self._rollout is not None:  # the tools' sessions live on the worker's loop
            asyncio.run_coroutine_threadsafe(self._rollout.close_tools(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self.engine_link.shutdown()
        super().shutdown()
