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
keeps the tokens it sampled, earns no answer, and is counted in
``agent/errors/<reason>`` (``timeout``, ``bad_return`` or the exception's type name); an
episode that never asked for a turn is an empty trajectory, which trains nothing.
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
from agentrl.agent.generation import RolloutResult, checked_tools
from agentrl.agent.rollout_metrics import rollout_metrics
from agentrl.agent.sampling import rollout_sampling
from agentrl.agent.trajectory import PromptSpec, Trajectory
from agentrl.config.schema import RolloutConfig
from agentrl.endpoint.episode import Budget
from agentrl.endpoint.server import ChatEndpoint
from agentrl.engines.base import SamplingParams
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


def answer_of(returned: str) -> str | None:
    """The answer in an agent's returned text: its ``<answer>`` body, else the text stripped."""
    action = parse_action(returned, ())
    if action.kind == "answer":
        return action.content
    return returned.strip() or None


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
        self.agent: AgentFn = (
            import_object(agent, "actor.rollout.agent.entry") if isinstance(agent, str) else agent
        )
        self.tools, typed = checked_tools(build_tools(config.tools) if tools is None else tools)
        self.specs = [t.spec for t in typed]
        self.format = build_format(config, tokenizer, self.specs, tags={t.name: t.tag for t in typed})
        self.budget = Budget(max_prompt_length, max_response_length, config.max_obs_length)
        self.timeout_s, self.max_concurrent = timeout_s, max_concurrent
        self._calls = {t.name: self._tool_call(self.tools[t.tag]) for t in typed}

    @staticmethod
    def _tool_call(tool: Any) -> ToolCall:
        async def call(arguments: dict[str, Any]) -> str:
            (result,) = await tool.call([arguments])
            return result.text

        return call

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
        base = sampling or self.default_sampling()
        base = replace(base, max_new_tokens=min(base.max_new_tokens, self.config.max_tokens_per_turn))
        endpoint = ChatEndpoint(self.engine, self.format, self.tokenizer, self.budget, base)
        await endpoint.start()
        errors: dict[str, int] = {}
        seconds: list[float] = []
        limit = asyncio.Semaphore(self.max_concurrent)
        try:
            jobs = []
            for p in prompts:
                if p.messages is None:
                    raise ValueError(
                        "an agent's episode starts from the prompt's chat messages; got a PromptSpec without"
                    )
                group_id = uuid.uuid4().hex
                for k in range(n):
                    row = first_row + len(jobs)
                    seed = None if base.seed is None else derive_seed(base.seed, row)
                    jobs.append(
                        self._episode(endpoint, p, group_id, f"{group_id}-{k}", seed, limit, errors, seconds)
                    )
            trajectories = list(await asyncio.gather(*jobs))
        finally:
            await endpoint.stop()
            await self._close_tools()
        metrics = rollout_metrics(trajectories, [t.name for t in self.specs])
        metrics |= {f"agent/errors/{reason}": float(count) for reason, count in sorted(errors.items())}
        metrics["agent/episode_s"] = sum(seconds) / len(seconds) if seconds else 0.0
        metrics |= endpoint.metrics
        return RolloutResult(trajectories, metrics)

    async def _episode(  # long: one episode from its URL to its trajectory, each failure counted
        self,
        endpoint: ChatEndpoint,
        prompt: PromptSpec,
        group_id: str,
        uid: str,
        seed: int | None,
        limit: asyncio.Semaphore,
        errors: dict[str, int],
        seconds: list[float],
    ) -> Trajectory:
        from openai import AsyncOpenAI  # the agents' client; imported where an agent runs

        task = {
            "data_source": prompt.data_source,
            "ground_truth": prompt.ground_truth,
            "index": prompt.index,
            "extra_info": prompt.extra_info,
        }
        agent_task = AgentTask(
            messages=[dict(m) for m in prompt.messages or ()],
            tool_schemas=[s.to_openai() for s in self.specs],
            tools=self._calls,
            data_source=prompt.data_source,
            index=prompt.index,
            extra_info=dict(prompt.extra_info),
            max_turns=self.config.max_turns,
        )
        async with limit:
            url = endpoint.open_episode(uid, group_id, task, seed)
            client = AsyncOpenAI(base_url=url, api_key="agentrl", max_retries=0, timeout=self.timeout_s)
            start = time.monotonic()
            returned: Any = None
            try:
                returned = await asyncio.wait_for(self.agent(agent_task, client), self.timeout_s)
            except TimeoutError:
                errors["timeout"] = errors.get("timeout", 0) + 1
            except Exception as exc:  # an agent's failure is its episode's, never the rollout's
                reason = type(exc).__name__
                errors[reason] = errors.get(reason, 0) + 1
            finally:
                seconds.append(time.monotonic() - start)
                await client.close()
                trajectory = endpoint.close_episode(uid)
        if trajectory is None:  # it never asked for a turn: an empty sample, trained on nothing
            ids = self.format.render_conversation(agent_task.messages)
            trajectory = Trajectory(prompt=replace(prompt, prompt_ids=ids), group_id=group_id, uid=uid)
        if isinstance(returned, str):
            trajectory.answer = answer_of(returned)
            trajectory.finished = trajectory.answer is not None
        elif isinstance(returned, int | float) and not isinstance(returned, bool) and math.isfinite(returned):
            trajectory.outcome_reward = float(returned)
        elif returned is not None:
            errors["bad_return"] = errors.get("bad_return", 0) + 1
        return trajectory

    async def _close_tools(self) -> None:
        for tool in self.tools.values():
            close = getattr(tool, "close", None)
            if close is not None:
                result = close()
                if asyncio.iscoroutine(result):
                    await result
