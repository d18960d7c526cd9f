"""Agents written against a chat API, rolled out through the endpoint: one episode per sample.

An agent is an async function ``run(task, client)``: ``task`` an ``AgentTask`` (the question
as chat messages, the run's tools' schemas and, to call them if it likes, the run's tools),
``client`` an ``openai.AsyncOpenAI`` whose base URL is its own episode on the endpoint. It
returns its final answer (a string: the body of its ``<answer>…</answer>`` when it has one,
else the whole string stripped, scored by the configured reward) or a reward (a number, used
as the trajectory's score instead of the rule's), or None (no answer).

``AgentRollout.run`` has the built-in manager's signature and result (``RolloutResult``,
trajectories grouped per prompt, ``rollout/*`` metrics), so the trainer takes either. It
serves the endpoint on loopback for the rollout's length and runs every episode at once, at
most ``max_concurrent`` at a time, each under ``timeout_s``. Sample ``row`` draws turn ``t``
with ``derive_seed(derive_seed(seed, row), t)``, the built-in loop's streams. A failed
episode (the agent raised, timed out, or returned something else) never fails the rollout: it
keeps the tokens it sampled, earns no answer (whatever a turn wrote), and is counted in
``agent/errors/<reason>`` (``timeout``, ``bad_return``, the API error code of an endpoint
refusal such as ``context_length_exceeded`` or ``episode_over``, or the exception's type name);
an episode that never asked for a turn is an empty trajectory, which trains nothing. The run's
tools (``task.tools``) run through one ``ToolDispatcher`` as the built-in loop runs them: the
schema checked, under each tool's timeout, a stateful tool in the episode's own session (closed
when the episode ends), a result's reward on the episode's latest turn. The counts
(``agent/errors/*``, ``agent/episodes``, ``endpoint/*``) add up over data-parallel ranks.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentrl.agent.actions import parse_action
from agentrl.agent.formats import build_format
from agentrl.agent.generation import RolloutResult, checked_tools, close_tools
from agentrl.agent.rollout_metrics import rollout_metrics
from agentrl.agent.sampling import rollout_sampling
from agentrl.agent.tool_dispatch import ToolDispatcher
from agentrl.agent.trajectory import PromptSpec, Trajectory
from agentrl.config.schema import RolloutConfig
from agentrl.endpoint.episode import Budget
from agentrl.endpoint.server import ChatEndpoint
from agentrl.engines.base import SamplingParams
from agentrl.engines.version import WeightsVersion
from agentrl.importing import import_object
from agentrl.seeding import derive_seed
from agentrl.tools.registry import build_tools

ToolCall = Callable[[dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True)
class AgentTask:
    """One episode's task as the agent reads it (no gold answers)."""

    messages: list[dict[str, Any]]  # the question as chat messages (the data's prompt)
    tool_schemas: list[dict[str, Any]]  # the run's tools in the API's form: pass them as ``tools=``
    tools: Mapping[str, ToolCall] = field(default_factory=dict)  # name → arguments → result text
    data_source: str = "unknown"
    index: Any = None
    extra_info: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 2  # the run's actor.rollout.max_turns: turns that may call tools, for an agent's cap

    @property
    def question(self) -> str:
        """The last user message's text."""
        return next((m["content"] for m in reversed(self.messages) if m.get("role") == "user"), "")


AgentFn = Callable[[AgentTask, Any], Awaitable[Any]]
_FAILED = object()  # an episode whose agent raised or timed out


def answer_of(returned: str) -> str | None:
    """The answer in an agent's returned text: its ``<answer>`` body, else the text stripped."""
    action = parse_action(returned, ())
    if action.kind == "answer":
        return action.content
    return returned.strip() or None


@dataclass
class _Rollout:
    """One rollout's shared parts: its endpoint, the run's tools behind one dispatcher, the bound
    on episodes in flight, and what the episodes counted."""

    endpoint: ChatEndpoint
    dispatcher: ToolDispatcher
    limit: asyncio.Semaphore
    errors: dict[str, int] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)

    def count(self, reason: str) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + 1


def _reason(exc: BaseException) -> str:
    """An agent's failure by reason: the API error code an endpoint refusal carries (a budget's
    end is ``context_length_exceeded``), else the exception's type name."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code else type(exc).__name__


class AgentRollout:
    """Rollouts by an agent function through the endpoint (module docstring)."""

    def __init__(
        self,
        engine: Any,
        tokenizer: Any,
        config: RolloutConfig,
        agent: AgentFn | str,
        *,
        max_prompt_length: int,
        max_response_length: int,
        tools: Mapping[str, Any] | Sequence[Any] | None = None,
        timeout_s: float = 600.0,
        max_concurrent: int = 256,
    ) -> None:
        self.engine, self.tokenizer, self.config = engine, tokenizer, config
        if isinstance(agent, str):
            agent = import_object(agent, "actor.rollout.agent.entry")
        self.agent: AgentFn = agent
        self.tools, typed = checked_tools(build_tools(config.tools) if tools is None else tools)
        self.specs = [t.spec for t in typed]
        self.format = build_format(config, tokenizer, self.specs, tags={t.name: t.tag for t in typed})
        self.budget = Budget(max_prompt_length, max_response_length, config.max_obs_length, config.max_turns)
        self.timeout_s, self.max_concurrent = timeout_s, max_concurrent
        self.weights = WeightsVersion()  # the engine's weights: the actor sets it (engines/version.py)

    def default_sampling(self, greedy: bool = False) -> SamplingParams:
        return rollout_sampling(self.config, greedy=greedy)

    def run(
        self,
        prompts: Sequence[PromptSpec],
        sampling: SamplingParams | None = None,
        n: int = 1,
        first_row: int = 0,
    ) -> RolloutResult:
        """Synchronous rollout (its own event loop); see ``arun``."""
        return asyncio.run(self.arun(prompts, sampling, n, first_row))

    async def arun(
        self,
        prompts: Sequence[PromptSpec],
        sampling: SamplingParams | None = None,
        n: int = 1,
        first_row: int = 0,
    ) -> RolloutResult:
        """``n`` episodes of every prompt, grouped per prompt (the built-in manager's contract)."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        for i, p in enumerate(prompts):
            if p.messages is None:
                raise ValueError(f"prompts[{i}]: an agent's episode starts from the prompt's chat messages")
        base = sampling or self.default_sampling()
        base = replace(base, max_new_tokens=min(base.max_new_tokens, self.config.max_tokens_per_turn))
        endpoint = ChatEndpoint(
            self.engine, self.format, self.tokenizer, self.budget, base, weights=self.weights
        )
        run = _Rollout(
            endpoint,
            ToolDispatcher(self.tools, self.config.tool_error_policy),
            asyncio.Semaphore(self.max_concurrent),
        )
        await endpoint.start()
        try:
            jobs = []
            for p in prompts:
                group_id = uuid.uuid4().hex
                for k in range(n):
                    seed = None if base.seed is None else derive_seed(base.seed, first_row + len(jobs))
                    jobs.append(self._episode(run, p, group_id, f"{group_id}-{k}", seed))
            trajectories = list(await asyncio.gather(*jobs))
        finally:
            await endpoint.stop()
            try:
                await run.dispatcher.close_all()  # no tool session outlives the rollout
            finally:
                await close_tools(self.tools.values())
        result = RolloutResult(trajectories, rollout_metrics(trajectories, [t.name for t in self.specs]))
        counts = {f"agent/errors/{reason}": float(n) for reason, n in sorted(run.errors.items())}
        result.add_summed(counts | {"agent/episodes": float(len(trajectories))} | endpoint.metrics)
        mean = sum(run.seconds) / len(run.seconds) if run.seconds else 0.0
        result.add_per_rank({"agent/episode_s": mean, "rollout/tool_busy_s": run.dispatcher.busy_seconds})
        return result

    def _task(self, run: _Rollout, prompt: PromptSpec, uid: str) -> AgentTask:
        """What the agent reads; its tools run through the rollout's dispatcher as episode ``uid``'s."""

        def tool(name: str) -> ToolCall:
            async def call(arguments: dict[str, Any]) -> str:
                return await self._call_tool(run, uid, name, arguments)

            return call

        return AgentTask(
            messages=[dict(m) for m in prompt.messages or ()],
            tool_schemas=[s.to_openai() for s in self.specs],
            tools={s.name: tool(s.name) for s in self.specs},
            data_source=prompt.data_source,
            index=prompt.index,
            extra_info=dict(prompt.extra_info),
            max_turns=self.config.max_turns,
        )

    @staticmethod
    async def _call_tool(run: _Rollout, uid: str, name: str, arguments: dict[str, Any]) -> str:
        """One call of the run's tool ``name`` (checked against its schema, under its timeout, in
        the episode's session): the result's text, or the error text the built-in loop would show.
        A result's reward goes to the episode's latest turn and its metrics to the trajectory, as
        in the built-in loop; a failure is counted in ``tool_failures``."""
        outcome = await run.dispatcher.call(uid, name, arguments)
        episode = run.endpoint.episodes.get(uid)
        traj = episode.trajectory if episode is not None else None
        if outcome.result is None:
            if traj is not None and outcome.invalid is None:
                traj.tool_failures += 1
            return f"Error: {outcome.error}"
        if traj is not None:
            for key, value in outcome.result.metrics.items():
                traj.tool_metrics[key] = traj.tool_metrics.get(key, 0.0) + float(value)
            if outcome.result.reward is not None and traj.turn_rewards:
                traj.turn_rewards[-1] += float(outcome.result.reward)
        return outcome.result.text

    async def _episode(
        self, run: _Rollout, prompt: PromptSpec, group_id: str, uid: str, seed: int | None
    ) -> Trajectory:
        """One episode from its URL to its trajectory, each failure counted (module docstring)."""
        from openai import AsyncOpenAI  # the agents' client; imported where an agent runs

        task = {"data_source": prompt.data_source, "ground_truth": prompt.ground_truth}
        task |= {"index": prompt.index, "extra_info": prompt.extra_info}
        agent_task = self._task(run, prompt, uid)
        returned: Any = None
        async with run.limit:
            url = run.endpoint.open_episode(uid, group_id, task, seed)
            client = AsyncOpenAI(base_url=url, api_key="agentrl", max_retries=0, timeout=self.timeout_s)
            start = time.monotonic()
            try:
                returned = await asyncio.wait_for(self.agent(agent_task, client), self.timeout_s)
            except TimeoutError:
                run.count("timeout")
                returned = _FAILED
            except Exception as exc:  # an agent's failure is its episode's, never the rollout's
                run.count(_reason(exc))
                returned = _FAILED
            finally:
                run.seconds.append(time.monotonic() - start)
                await client.close()
                trajectory = run.endpoint.close_episode(uid)
                await run.dispatcher.close_trajectory(uid)
        if trajectory is None:  # it never asked for a turn: an empty sample, trained on nothing
            ids = self.format.render_conversation(agent_task.messages)
            trajectory = Trajectory(prompt=replace(prompt, prompt_ids=ids), group_id=group_id, uid=uid)
        self._outcome(run, trajectory, returned)
        return trajectory

    @staticmethod
    def _outcome(run: _Rollout, trajectory: Trajectory, returned: Any) -> None:
        """What the agent returned, on the trajectory: an answer, a score, or (None, a failure,
        anything else) no answer, whatever a turn of the episode wrote."""
        if isinstance(returned, str):
            trajectory.answer = answer_of(returned)
            trajectory.finished = trajectory.answer is not None
            return
        if isinstance(returned, int | float) and not isinstance(returned, bool) and math.isfinite(returned):
            trajectory.outcome_reward = float(returned)
            return
        if returned is not None and returned is not _FAILED:
            run.count("bad_return")
        trajectory.answer, trajectory.finished = None, False
