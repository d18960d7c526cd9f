"""Multi-turn rollout: generate → call a tool → observe → generate …, token in, token out.

``LLMGenerationManager.run`` drives one ``Engine`` and a set of tools over a batch of
prompts and returns a ``RolloutResult``: one ``Trajectory`` per sample and the rollout's
metrics. The parts: ``turns.py`` (one trajectory's state machine), ``schedules.py``
(concurrent or lockstep), ``tool_dispatch.py`` (tool calls), ``collate.py`` (trajectories
→ the trainer's ``Batch``), ``rollout_metrics.py`` and ``drift.py``.

Rules it keeps:

* The ids the engine sampled are kept as sampled, with the engine's log-probs; generated
  text is decoded only to *read* the turn, never re-tokenized. Only what the rollout inserts
  is tokenized (observations, by the tool-call format), appended as its own segment (loss
  mask 0).
* How the policy calls tools is the format's (``formats/``, ``actor.rollout.tool_format``):
  ``tags`` (the default) stops a turn at the closing tag of any registered tool or
  ``</answer>``, one call a turn, results as ``<information>…</information>``; ``hermes``
  ends a turn at the template's end-of-turn token (eos), one or more JSON calls a turn,
  results as the template's tool messages. A turn also ends at the per-turn token budget.
  A prompt given with its chat messages (``PromptSpec.messages``) is encoded by the format
  (``hermes``: with the tools' schemas); the tags encoding is the data's own.
* A turn's calls run concurrently and come back in call order; the observation answering
  them is one segment: exactly the format's tokens for all their tool messages (and, in
  ``hermes``, the next assistant header). ``max_calls_per_turn`` calls a turn and
  ``max_calls_per_trajectory`` in all are run; a call past either gets an error message
  saying which budget was reached, and once the trajectory's budget is used up the next
  turn is the final one.
* A malformed call (bad JSON, an unknown tool, arguments off the schema, a call cut by the
  token budget, ...) is never an exception: it is not run, the policy reads an error tool
  message, and it is counted by reason (``Trajectory.tool_calls_invalid``), as is a turn
  that neither calls nor answers (which reads the format's hint instead).
* ``max_turns`` turns may call a tool (an invalid turn uses up a turn too, as in
  Search-R1); then one final turn follows in which only an answer counts. The observation
  closing the last allowed turn tells the policy to answer. So
  ``num_turns <= max_turns + 1`` and ``num_valid_actions + num_invalid_actions == num_turns``
  (a turn is valid when it answers or makes at least one well-formed call).
* The prompt is never dropped or cut. Prompt + response stays within
  ``max_prompt_length + max_response_length`` and the response within
  ``max_response_length``; when the next turn or observation would not fit, the
  trajectory ends and ``truncation.context`` / ``truncation.response_budget`` is set.
* A trajectory is one sample (one step) while each turn extends the tokens before it. A
  template that rewrites earlier turns, or a context policy (``actor.rollout.context``) that
  compacts the conversation, continues it as a new step whose prompt is the conversation as
  it is now (``history.py``, ``context.py``); the budgets above are then each step's.
* A tool that raises or exceeds its ``timeout_s`` gives that trajectory an error
  observation and counts in ``tool_failures`` (``tool_error_policy="observe"``), or fails
  the rollout with the tool's own error (``"raise"``). Nothing waits without a timeout
  except the engine. Every trajectory's tool sessions are closed when it ends, and all of
  them when the rollout ends, however it ends.
"""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentrl.agent.context import check_context_config
from agentrl.agent.drift import token_drift
from agentrl.agent.formats import build_format
from agentrl.agent.rollout_metrics import rollout_metrics
from agentrl.agent.sampling import rollout_sampling
from agentrl.agent.schedules import SCHEDULE_RUNNERS, SCHEDULES
from agentrl.agent.tool_dispatch import TOOL_ERROR_POLICIES, ToolDispatcher
from agentrl.agent.trajectory import PromptSpec, Trajectory
from agentrl.agent.turn_calls import CallBudget
from agentrl.agent.turns import TrajectoryState, TurnRules
from agentrl.config.schema import RolloutConfig
from agentrl.engines.base import Engine, SamplingParams
from agentrl.engines.version import WeightsVersion
from agentrl.seeding import derive_seed
from agentrl.tools.base import Tool
from agentrl.tools.registry import build_tools
from agentrl.tools.typed import TypedTool, as_typed


@dataclass
class RolloutResult:
    """What one rollout returns: the trajectories, grouped per prompt, and its metrics
    (``rollout_metrics`` plus ``rollout/tool_busy_s``: wall time with a tool call in flight,
    which overlaps generation under the concurrent schedule)."""

    trajectories: list[Trajectory]
    metrics: dict[str, float]
    # The names in ``metrics`` that are one rank's figure, not a property of the trajectories:
    # merged over data-parallel ranks by their maximum (the ranks run at once). Each producer
    # declares its own (``add_per_rank``), so the merge knows no name it did not make.
    per_rank: tuple[str, ...] = ()
    # The names in ``metrics`` that are counts of this rank's events (an agent rollout's errors by
    # reason, its endpoint's requests): summed over data-parallel ranks. Declared by their producer.
    summed: tuple[str, ...] = ()

    def add_summed(self, counts: dict[str, float]) -> None:
        """Add counts of this rank's events to ``metrics``: over ranks they merge by their sum."""
        self.metrics.update(counts)
        self.summed = tuple(dict.fromkeys((*self.summed, *counts)))

    def add_per_rank(self, figures: dict[str, float]) -> None:
        """Add figures of this rank alone to ``metrics``, under their producer's names (the
        actor's weight sync and engine sleep): over ranks they merge by their maximum."""
        self.metrics.update(figures)
        self.per_rank = tuple(dict.fromkeys((*self.per_rank, *figures)))

    @classmethod
    def merge(cls, parts: Sequence[RolloutResult]) -> RolloutResult:
        """The data-parallel ranks' rollouts as one: trajectories in rank order, the metrics
        recomputed over all of them, the largest of each per-rank figure (``per_rank``) and the
        sum of each count (``summed``)."""
        trajectories = [t for part in parts for t in part.trajectories]
        prefix = "rollout/tool_calls/"
        names = sorted(
            {
                key[len(prefix) :]
                for part in parts
                for key in part.metrics
                if key.startswith(prefix) and "/" not in key[len(prefix) :]  # not invalid/<reason>
            }
        )
        per_rank = tuple(dict.fromkeys(key for part in parts for key in part.per_rank))
        largest = {
            key: max(part.metrics[key] for part in parts if key in part.metrics)
            for key in per_rank
            if any(key in part.metrics for part in parts)
        }
        summed_names = tuple(dict.fromkeys(key for part in parts for key in part.summed))
        sums = {key: sum(part.metrics.get(key, 0.0) for part in parts) for key in summed_names}
        metrics = rollout_metrics(trajectories, names) | {"rollout/tool_busy_s": 0.0} | largest | sums
        return cls(trajectories, metrics, per_rank, summed_names)


def _check_rollout_config(config: RolloutConfig, max_prompt_length: int, max_response_length: int) -> None:
    if config.schedule not in SCHEDULES:
        raise ValueError(f"rollout.schedule must be one of {SCHEDULES}, got {config.schedule!r}")
    if config.tool_error_policy not in TOOL_ERROR_POLICIES:
        raise ValueError(
            f"rollout.tool_error_policy must be one of {TOOL_ERROR_POLICIES}, "
            f"got {config.tool_error_policy!r}"
        )
    if config.max_turns < 0:
        raise ValueError(f"rollout.max_turns must be >= 0, got {config.max_turns}")
    for name in ("max_tokens_per_turn", "max_obs_length", "max_calls_per_turn"):
        if getattr(config, name) < 1:
            raise ValueError(f"rollout.{name} must be >= 1, got {getattr(config, name)}")
    if config.max_calls_per_trajectory is not None and config.max_calls_per_trajectory < 1:
        raise ValueError(
            f"rollout.max_calls_per_trajectory must be >= 1 or null, got {config.max_calls_per_trajectory}"
        )
    if max_prompt_length < 1 or max_response_length < 1:
        raise ValueError(
            "max_prompt_length and max_response_length must be >= 1, "
            f"got {max_prompt_length}, {max_response_length}"
        )
    check_context_config(config.context, max_prompt_length + max_response_length)


def checked_tools(tools: Mapping[str, Any] | Sequence[Any]) -> tuple[dict[str, Any], list[TypedTool]]:
    """The tools by tag (tag tools and schema tools alike), each checked, and their typed faces."""
    by_tag = dict(tools) if isinstance(tools, Mapping) else {as_typed(t).tag: t for t in tools}
    typed = []
    for tag, tool in by_tag.items():
        face = as_typed(tool, f"tool for <{tag}>")
        if face.tag != tag:
            raise ValueError(f"tool {face.name!r} has tag {face.tag!r} but is registered under {tag!r}")
        typed.append(face)
    return by_tag, typed


def prompt_encoder(
    config: RolloutConfig, tokenizer: Any, tools: Mapping[str, Any] | Sequence[Any] | None = None
) -> Callable[[list[dict[str, Any]]], list[int]]:
    """How a rollout with ``config`` encodes a prompt's chat messages (its format, with its tools'
    schemas in ``hermes``), for whoever must know the prompt's length before the rollout (the
    training data's ``max_prompt_length`` check). Builds the tools and the format, checked."""
    _, typed = checked_tools(build_tools(config.tools) if tools is None else tools)
    specs = [t.spec for t in typed]
    fmt = build_format(config, tokenizer, specs, tags={t.name: t.tag for t in typed})
    return lambda messages: fmt.prompt_ids(list(messages), specs)


class LLMGenerationManager:
    """Multi-turn rollouts of one engine with a set of tools (see the module docstring).

    ``tools`` maps tag → tool (or lists them); by default they are built from ``config.tools``.
    Tag tools and schema tools alike (``tools/typed.py``). ``max_prompt_length`` /
    ``max_response_length`` are the data's budgets. The tool-call format is built (and its
    template checked) here, once: ``format``.
    """

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        config: RolloutConfig,
        *,
        max_prompt_length: int,
        max_response_length: int,
        tools: Mapping[str, Tool | Any] | Sequence[Tool | Any] | None = None,
    ) -> None:
        _check_rollout_config(config, max_prompt_length, max_response_length)
        self.engine = engine
        self.tokenizer = tokenizer
        self.config = config
        self.close_tools_after_run = True
        self.weights = WeightsVersion()  # the engine's weights: the actor sets it (engines/version.py)
        self.tools, typed = checked_tools(build_tools(config.tools) if tools is None else tools)
        self.specs = [t.spec for t in typed]
        self.format = build_format(config, tokenizer, self.specs, tags={t.name: t.tag for t in typed})
        if getattr(self.format, "renders_history", False):  # said once: every turn may be a new step
            warnings.warn(
                f"the chat template rewrites earlier turns ({self.format.history_rewrite}): the rollout "
                "renders the conversation before each turn and continues as a new step where it changed "
                "(actor.rollout.keep_thinking=true keeps the turns as sampled instead)",
                stacklevel=2,
            )
        self.rules = TurnRules(
            tokenizer=tokenizer,
            format=self.format,
            tool_names=tuple(t.name for t in typed),
            max_turns=config.max_turns,
            max_prompt_length=max_prompt_length,
            max_response_length=max_response_length,
            max_obs_length=config.max_obs_length,
            calls=CallBudget(config.max_calls_per_turn, config.max_calls_per_trajectory),
            context=config.context,
            weights=self.weights,
        )

    def encode_prompt(self, prompt: PromptSpec) -> PromptSpec:
        """``prompt`` as this rollout generates from it: its messages encoded by the format.

        Without messages the ids are taken as given, except in a format that must render the
        tools' schemas into the prompt (``hermes``), which refuses them.
        """
        if prompt.messages is not None:
            return replace(prompt, prompt_ids=self.format.prompt_ids(list(prompt.messages), self.specs))
        if self.format.traits.prompt_from_messages:
            raise ValueError(
                f"actor.rollout.tool_format={self.format.name} renders each prompt from its chat messages "
                "with the tools' schemas, but a PromptSpec came without messages; build prompts with "
                "PromptSpec(..., messages=[...]) (trainer.dataset.prompt_spec and the evaluator do)"
            )
        return prompt

    def default_sampling(self, greedy: bool = False) -> SamplingParams:
        """Sampling from the config: temperature/top-p/top-k and ``max_tokens_per_turn``."""
        return rollout_sampling(self.config, greedy=greedy)

    # --- entry points ----------------------------------------------------------------

    def run(
        self,
        prompts: Sequence[PromptSpec],
        sampling: SamplingParams | None = None,
        n: int = 1,
        first_row: int = 0,
    ) -> RolloutResult:
        """Synchronous rollout (runs its own event loop); see ``arun``."""
        return asyncio.run(self.arun(prompts, sampling, n, first_row))

    async def arun(
        self,
        prompts: Sequence[PromptSpec],
        sampling: SamplingParams | None = None,
        n: int = 1,
        first_row: int = 0,
    ) -> RolloutResult:
        """Roll out ``n`` samples of every prompt; trajectories come back grouped per prompt
        (``[p0 s0, p0 s1, …, p1 s0, …]``).

        ``sampling.max_new_tokens`` is the per-turn budget (default: ``max_tokens_per_turn``);
        its ``stop`` strings are extended with the tool/answer closing tags. A fixed
        ``sampling.seed`` makes the rollout reproducible under either schedule: trajectory
        ``row`` (its place in the returned list) samples turn ``t`` with
        ``derive_seed(derive_seed(seed, row), t)``, a stream no other row, turn or seed shares.
        ``first_row`` numbers the rows from there instead of 0: a rank rolling out one chunk of a
        larger rollout draws the streams the whole rollout's rows would.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        for i, p in enumerate(prompts):
            if not isinstance(p, PromptSpec):
                raise TypeError(f"prompts[{i}] must be a PromptSpec, got {type(p).__name__}")
        base = sampling or self.default_sampling()
        base = replace(base, max_new_tokens=min(base.max_new_tokens, self.config.max_tokens_per_turn))
        states = []
        for p in map(self.encode_prompt, prompts):
            group_id = uuid.uuid4().hex
            for k in range(n):
                traj = Trajectory(prompt=p, group_id=group_id, uid=f"{group_id}-{k}")
                row_seed = None if base.seed is None else derive_seed(base.seed, first_row + len(states))
                states.append(TrajectoryState(traj, base, row_seed, self.rules))
        dispatcher = ToolDispatcher(self.tools, self.config.tool_error_policy)
        try:
            await SCHEDULE_RUNNERS[self.config.schedule](states, self.engine, dispatcher)
        finally:
            try:
                await dispatcher.close_all()  # no tool session outlives the rollout
            finally:
                if self.close_tools_after_run:
                    await self.close_tools()
        trajectories = [s.traj for s in states]
        if self.config.check_token_drift:
            for t in trajectories:
                t.token_drift = token_drift(self.tokenizer, t.response_ids)
        result = RolloutResult(trajectories, rollout_metrics(trajectories, self.rules.tool_names))
        result.add_per_rank({"rollout/tool_busy_s": dispatcher.busy_seconds})
        return result

    async def close_tools(self) -> None:
        """Let tools release per-event-loop resources (``close_tools``). A rollout does it at its
        end unless ``close_tools_after_run`` is off (a server whose requests share one event loop
        and its tools' sessions closes them when it stops)."""
        await close_tools(self.tools.values())


async def close_tools(tools: Iterable[Any]) -> None:
    """Let each tool release its per-event-loop resources (HTTP sessions): ``close`` is optional,
    and may be a coroutine function."""
    for tool in tools:
        close = getattr(tool, "close", None)
        if close is not None:
            result = close()
            if asyncio.iscoroutine(result):
                await result
