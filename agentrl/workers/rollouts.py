"""A worker's rollout: the generation loop around its engine, and one call's trajectories from it.

Two roles generate: the actor, whose engine shares or copies the policy it trains, and a rollout
worker on resources of its own (``rollout.py``). Both build the same loop around their engine
(the built-in ``LLMGenerationManager``, or the configured agent function's ``AgentRollout``) and
sample a call's prompts the same way (``sample``), so a rollout draws the same tokens from the
same weights whichever role runs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from agentrl.agent.generation import LLMGenerationManager, RolloutResult
from agentrl.agent.sampling import rollout_sampling
from agentrl.config.schema import ActorConfig
from agentrl.endpoint.agents import AgentRollout
from agentrl.engines.base import Engine
from agentrl.engines.factory import EngineChoice
from agentrl.engines.link import EngineLink
from agentrl.engines.weights import WeightStream
from agentrl.seeding import derive_seed
from agentrl.workers.base import RunContext


class Rollouts:
    """The rollout of a worker with ``actor`` (its config section), ``context``, ``tokenizer``,
    ``model`` and ``engine_link``: built on first use (its tools may open connections)."""

    actor: ActorConfig
    context: RunContext
    tokenizer: Any
    model: Any
    compute_dtype: Any
    device: Any
    engine_link: EngineLink
    _rollout: LLMGenerationManager | AgentRollout | None = None
    closes_tools_after_run = True  # the built-in loop's tools close at each rollout's end

    def link_engine(
        self, choice: EngineChoice, model_path: str, weights: Callable[[], WeightStream]
    ) -> EngineLink:
        """The link to ``choice``'s engine around this worker's module, refreshed from ``weights``."""

        def build() -> Engine:  # on first use
            return choice.build(
                self.actor.rollout,
                model=self.model,
                tokenizer=self.tokenizer,
                model_path=model_path,
                dtype=self.compute_dtype,
                device=self.device,
            )

        return EngineLink(choice, build=build, weights=weights)

    @property
    def rollout(self) -> LLMGenerationManager | AgentRollout:
        """The loop around the link's engine: the built-in one, or the configured agent's episodes."""
        if self._rollout is None:
            rollout = self.actor.rollout
            lengths = {
                "max_prompt_length": self.context.max_prompt_length,
                "max_response_length": self.context.max_response_length,
            }
            engine = self.engine_link.engine
            if rollout.agent.entry is None:
                self._rollout = LLMGenerationManager(engine, self.tokenizer, rollout, **lengths)
                self._rollout.close_tools_after_run = self.closes_tools_after_run
            else:
                agent = rollout.agent
                self._rollout = AgentRollout(
                    engine,
                    self.tokenizer,
                    rollout,
                    agent.entry,
                    timeout_s=agent.timeout_s,
                    max_concurrent=agent.max_concurrent,
                    **lengths,
                )
        return self._rollout

    def run_rollout(self, rollout: Coroutine[Any, Any, RolloutResult]) -> RolloutResult:
        """One rollout's coroutine run to its end: on an event loop of its own (one rollout at a
        time), unless the worker keeps one loop for several at once (``rollout.py``)."""
        return asyncio.run(rollout)

    def sample(
        self, prompts: list, n: int, seed: int | None, validate: bool, first_index: int
    ) -> RolloutResult:
        """Multi-turn rollouts of ``prompts``, ``n`` samples each, on the engine's weights now.

        ``prompts`` are the step's prompts from ``first_index`` on (``WorkerGroup.submit_chunks``):
        sample k of the step's prompt i draws its own stream, row ``i·n + k`` of one stream for the
        whole step, so a rollout samples the same tokens on any number of ranks, and a run resumed
        on fewer ranks continues as it would have.
        """
        manager = self.rollout
        synced = self.engine_link.wake()
        # "rank 0": the stream of the one rank, from when every rank drew its own; kept so that a
        # one-rank run samples exactly what it did before
        step_seed = None if seed is None else derive_seed(seed, "rank", 0)
        sampling = rollout_sampling(
            self.actor.rollout, greedy=validate and self.actor.rollout.val_greedy, seed=step_seed
        )
        result = self.run_rollout(manager.arun(prompts, sampling, n=n, first_row=first_index * n))
        result.add_per_rank(synced)  # the engine link's figures: this rank's, merged by their maximum
        result.add_per_rank(self.engine_link.rest())
        return result
