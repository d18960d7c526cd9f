"""Multi-turn rollout: generate → call a tool → observe → generate …, token in, token out.

``LLMGenerationManager`` drives one ``Engine`` and a set of tools over a batch of
prompts and returns one ``Trajectory`` per sample; ``collate`` turns trajectories into
the ``Batch`` the trainer consumes.

Rules it keeps (DESIGN §2):

* The ids the engine sampled are kept as sampled, with the engine's log-probs; generated
  text is decoded only to *read* the action, never re-tokenized. Only observations are
  tokenized, and they are appended as their own segment (loss mask 0).
* A turn stops at the closing tag of any registered tool or ``</answer>`` (the stop token
  is a model token and is trained), at eos, or at the per-turn token budget.
* ``max_turns`` turns may call a tool (an invalid action uses up a turn too, as in
  Search-R1); then one final turn follows whose only stop string is ``</answer>``. The
  observation closing the last allowed turn tells the policy to answer. So
  ``num_turns <= max_turns + 1`` and ``num_valid_actions + num_invalid_actions == num_turns``.
* The prompt is never dropped or cut. Prompt + response stays within
  ``max_prompt_length + max_response_length`` and the response within
  ``max_response_length``; when the next turn or observation would not fit, the
  trajectory ends and ``truncation.context`` / ``truncation.response_budget`` is set.
* A tool that raises or exceeds its ``timeout_s`` gives that trajectory an error
  observation and counts in ``tool_failures`` (``tool_error_policy="observe"``), or fails
  the rollout with the tool's own error (``"raise"``). Nothing waits without a timeout
  except the engine.

Batch contract (``collate``): B trajectories, P = longest prompt, R = longest response
(at least 1).

======================  ===========  ============================================================
field                   shape/dtype  meaning
======================  ===========  ============================================================
``prompts``             (B,P) long   prompt ids, left-padded with ``pad_token_id``
``responses``           (B,R) long   response ids (model + observation), right-padded
``input_ids``           (B,P+R) long ``cat(prompts, responses)``
``attention_mask``      (B,P+R) long 1 on real prompt/response tokens, 0 on padding
``position_ids``        (B,P+R) long ``cumsum(attention_mask) - 1``, clamped at 0
``response_segments``   (B,R) int8   ``Segment``: 0 padding, 1 model, 2 observation
``response_mask``       (B,R) float  loss mask, ``response_segments == 1``
``rollout_log_probs``   (B,R) float  engine log-prob of each model token, 0 elsewhere
======================  ===========  ============================================================

Meta (object arrays of length B): ``group_id`` (shared by the n samples of one prompt,
unique across the batch and across calls), ``uid`` (unique per trajectory),
``data_source``, ``ground_truth``, ``extra_info``, ``index`` (dataset row, logs only),
``response_text`` (the response decoded without special tokens such as eos, which is
what the reward's tag grammar reads), ``num_turns``,
``num_searches`` (tool calls of any tool), ``num_valid_actions``, ``num_invalid_actions``,
``finished`` (ended with a complete answer), ``answer`` (its body, as the rollout
accepted it within one model turn; None if none: what the reward scores),
``truncated`` (any truncation),
``obs_truncations`` (observations cut), ``obs_tokens_cut``, ``context_truncated``,
``response_truncated``, ``turn_budget_hits``, ``tool_failures``, ``tool_calls``
(dict per tag), ``token_drift`` (None unless ``check_token_drift``).
"""

from __future__ import annotations

import asyncio
import difflib
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from agentrl.agent.actions import ANSWER_TAG, parse_action, stop_strings
from agentrl.agent.observations import INVALID_ACTION_HINT, ObservationEncoder, encode_text
from agentrl.agent.tools.base import Tool, ToolResult, validate_tool
from agentrl.agent.tools.registry import build_tools
from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory
from agentrl.config.schema import RolloutConfig
from agentrl.core.batch import Batch
from agentrl.engines.base import Engine, GenerationResult, SamplingParams
from agentrl.seeding import derive_seed

SCHEDULES = ("concurrent", "lockstep")
TOOL_ERROR_POLICIES = ("observe", "raise")


class ToolTimeout(TimeoutError):
    """A tool call exceeded its ``timeout_s``."""


@dataclass(frozen=True)
class _ToolOutcome:
    result: ToolResult | None
    error: str | None = None


class _ToolDispatcher:
    """Runs tool calls in batches with timeouts and failure isolation.

    ``run_batch`` executes one batch; if it fails, each call is retried alone so that one
    bad call (or a back end that chokes on one input) costs only its own trajectory.
    ``call`` is the concurrent path: calls that arrive in the same event-loop pass are
    coalesced into one ``run_batch`` per tool.
    """

    def __init__(self, tools: Mapping[str, Tool], policy: str) -> None:
        self.tools = tools
        self.policy = policy
        self._pending: dict[str, list[tuple[str, asyncio.Future[_ToolOutcome]]]] = defaultdict(list)
        self.busy_seconds = 0.0  # wall time with at least one tool call in flight
        self._in_flight = 0
        self._busy_since = 0.0

    async def _execute(self, tag: str, calls: list[str]) -> list[ToolResult]:
        tool = self.tools[tag]
        if self._in_flight == 0:
            self._busy_since = time.perf_counter()
        self._in_flight += 1
        try:
            results = await asyncio.wait_for(tool.execute(list(calls)), timeout=tool.timeout_s)
        except asyncio.TimeoutError:
            raise ToolTimeout(f"tool {tool.name!r} <{tag}> did not answer within {tool.timeout_s} s") from None
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.busy_seconds += time.perf_counter() - self._busy_since
        if len(results) != len(calls):
            raise RuntimeError(f"tool {tool.name!r} <{tag}> returned {len(results)} results for {len(calls)} calls")
        return list(results)

    async def run_batch(self, tag: str, calls: list[str]) -> list[_ToolOutcome]:
        try:
            return [_ToolOutcome(r) for r in await self._execute(tag, calls)]
        except Exception as exc:
            if self.policy == "raise":
                raise
            if len(calls) > 1:
                return [o for outs in await asyncio.gather(*(self.run_batch(tag, [c]) for c in calls)) for o in outs]
            return [_ToolOutcome(None, f"{type(exc).__name__}: {exc}")]

    async def call(self, tag: str, content: str) -> _ToolOutcome:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_ToolOutcome] = loop.create_future()
        self._pending[tag].append((content, future))
        if len(self._pending[tag]) == 1:
            loop.create_task(self._flush(tag))
        return await future

    async def _flush(self, tag: str) -> None:
        await asyncio.sleep(0)  # let every coroutine that is ready this pass enqueue its call
        batch, self._pending[tag] = self._pending[tag], []
        try:
            outcomes = await self.run_batch(tag, [c for c, _ in batch])
        except BaseException as exc:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, fut), outcome in zip(batch, outcomes, strict=True):
            if not fut.done():
                fut.set_result(outcome)


@dataclass(frozen=True)
class _ToolCall:
    tag: str
    content: str


class _Rollout:
    """The state machine of one trajectory, shared by both schedules."""

    def __init__(self, manager: LLMGenerationManager, traj: Trajectory, base: SamplingParams, seed: int | None):
        self.m = manager
        self.traj = traj
        self.base = base
        self.seed = seed  # this trajectory's own stream; turn t samples with derive_seed(seed, t)
        self.turns_used = 0  # non-final turns consumed
        self.done = False
        self._turn_cap_binding = True  # whether max_tokens_per_turn (not a budget) set this turn's cap

    # --- budgets ---------------------------------------------------------------------

    def _room(self) -> tuple[int, str]:
        """Tokens the response may still grow by, and which limit binds."""
        m, resp = self.m, len(self.traj.response_ids)
        response_room = m.max_response_length - resp
        context_room = m.max_prompt_length + m.max_response_length - len(self.traj.prompt_ids) - resp
        return (context_room, "context") if context_room < response_room else (response_room, "response")

    def _end_over_budget(self, limit: str) -> None:
        if limit == "context":
            self.traj.truncation.context = True
        else:
            self.traj.truncation.response_budget = True
        self.done = True

    @property
    def final_turn(self) -> bool:
        return self.turns_used >= self.m.max_turns

    # --- the loop --------------------------------------------------------------------

    def request(self) -> tuple[list[int], SamplingParams] | None:
        """The next engine call, or None when the trajectory is over."""
        if self.done:
            return None
        room, limit = self._room()
        if room <= 0:
            self._end_over_budget(limit)
            return None
        per_turn = self.base.max_new_tokens
        self._turn_cap_binding = per_turn <= room
        stops = self.m.final_stops if self.final_turn else self.m.turn_stops
        seed = None if self.seed is None else derive_seed(self.seed, self.traj.num_turns)
        params = replace(
            self.base,
            max_new_tokens=min(per_turn, room),
            stop=tuple(dict.fromkeys((*self.base.stop, *stops))),
            seed=seed,
        )
        return self.traj.prompt_ids + self.traj.response_ids, params

    def on_generation(self, result: GenerationResult) -> _ToolCall | None:
        """Record a turn; returns the tool call to run, if any."""
        traj = self.traj
        traj.append(list(result.token_ids), Segment.MODEL, list(result.log_probs))
        traj.num_turns += 1
        traj.finish_reasons.append(result.finish_reason)
        final = self.final_turn
        text = self.m.tokenizer.decode(list(result.token_ids), skip_special_tokens=False)
        action = parse_action(text, () if final else self.m.tools.keys())
        over_budget = result.finish_reason == "length" and not self._turn_cap_binding
        if result.finish_reason == "length" and self._turn_cap_binding and action.kind == "invalid":
            traj.truncation.turn_budget_hits += 1

        if action.kind == "answer":
            traj.num_valid_actions += 1
            traj.finished = True
            traj.answer = action.content
            self.done = True
            return None
        if action.kind == "tool":
            traj.num_valid_actions += 1
            self.turns_used += 1
            traj.num_searches += 1
            traj.tool_calls[action.tag] = traj.tool_calls.get(action.tag, 0) + 1  # type: ignore[index]
            return _ToolCall(action.tag, action.content)  # type: ignore[arg-type]

        traj.num_invalid_actions += 1
        if over_budget:
            self._end_over_budget(self._room()[1])
        elif final:
            self.done = True
        else:
            self.turns_used += 1
            self._observe(INVALID_ACTION_HINT)
        return None

    def on_tool_outcome(self, tag: str, outcome: _ToolOutcome) -> None:
        if outcome.result is not None:
            for key, value in outcome.result.metrics.items():
                self.traj.tool_metrics[key] = self.traj.tool_metrics.get(key, 0.0) + float(value)
            if self._observe(outcome.result.text):
                self.traj.tool_outputs.append((tag, outcome.result.text))
        else:
            self.traj.tool_failures += 1
            self._observe(f"Error: the tool call failed ({outcome.error}).")

    def _observe(self, text: str) -> bool:
        """Append ``text`` as an observation; False when there was no room and the trajectory ended."""
        obs = self.m.observations.encode(text, final_turn=self.final_turn)
        if obs.tokens_cut:
            self.traj.truncation.observations_cut += 1
            self.traj.truncation.observation_tokens_cut += obs.tokens_cut
        room, limit = self._room()
        if len(obs.ids) >= room:  # no room left for the policy to respond to it
            self._end_over_budget(limit)
            return False
        self.traj.append(obs.ids, Segment.OBSERVATION)
        return True


class LLMGenerationManager:
    """Multi-turn rollouts of one engine with a set of tools (see the module docstring).

    ``tools`` maps tag → tool; by default they are built from ``config.tools``.
    ``max_prompt_length`` / ``max_response_length`` come from ``DataConfig``.
    """

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        config: RolloutConfig,
        *,
        max_prompt_length: int,
        max_response_length: int,
        tools: Mapping[str, Tool] | Sequence[Tool] | None = None,
    ) -> None:
        if config.schedule not in SCHEDULES:
            raise ValueError(f"rollout.schedule must be one of {SCHEDULES}, got {config.schedule!r}")
        if config.tool_error_policy not in TOOL_ERROR_POLICIES:
            raise ValueError(
                f"rollout.tool_error_policy must be one of {TOOL_ERROR_POLICIES}, got {config.tool_error_policy!r}"
            )
        for name in ("max_turns",):
            if getattr(config, name) < 0:
                raise ValueError(f"rollout.{name} must be >= 0, got {getattr(config, name)}")
        for name in ("max_tokens_per_turn", "max_obs_length"):
            if getattr(config, name) < 1:
                raise ValueError(f"rollout.{name} must be >= 1, got {getattr(config, name)}")
        if max_prompt_length < 1 or max_response_length < 1:
            raise ValueError(
                f"max_prompt_length and max_response_length must be >= 1, got {max_prompt_length}, {max_response_length}"
            )
        self.engine = engine
        self.tokenizer = tokenizer
        self.config = config
        self.max_prompt_length = max_prompt_length
        self.max_response_length = max_response_length
        self.max_turns = config.max_turns
        if tools is None:
            tools = build_tools(config.tools)
        elif not isinstance(tools, Mapping):
            tools = {t.tag: t for t in tools}
        self.tools: dict[str, Tool] = {}
        for tag, tool in tools.items():
            validate_tool(tool, f"tool for <{tag}>")
            if tool.tag != tag:
                raise ValueError(f"tool {tool.name!r} has tag {tool.tag!r} but is registered under {tag!r}")
            self.tools[tag] = tool
        self.turn_stops = stop_strings([*self.tools, ANSWER_TAG])
        self.final_stops = stop_strings([ANSWER_TAG])
        self.observations = ObservationEncoder(tokenizer, config.max_obs_length)
        self.last_tool_seconds = 0.0  # of the latest run: wall time with a tool call in flight

    def default_sampling(self, greedy: bool = False) -> SamplingParams:
        """Sampling from the config: temperature/top-p/top-k and ``max_tokens_per_turn``."""
        c = self.config
        return SamplingParams(
            max_new_tokens=c.max_tokens_per_turn, temperature=c.temperature, top_p=c.top_p, top_k=c.top_k, greedy=greedy
        )

    # --- entry points ----------------------------------------------------------------

    def run(self, prompts: Sequence[PromptSpec], sampling: SamplingParams | None = None, n: int = 1) -> list[Trajectory]:
        """Synchronous rollout (runs its own event loop); see ``arun``."""
        return asyncio.run(self.arun(prompts, sampling, n))

    async def arun(
        self, prompts: Sequence[PromptSpec], sampling: SamplingParams | None = None, n: int = 1
    ) -> list[Trajectory]:
        """Roll out ``n`` samples of every prompt; trajectories come back grouped per prompt
        (``[p0 s0, p0 s1, …, p1 s0, …]``).

        ``sampling.max_new_tokens`` is the per-turn budget (default: ``max_tokens_per_turn``);
        its ``stop`` strings are extended with the tool/answer closing tags. A fixed
        ``sampling.seed`` makes the rollout reproducible under either schedule: trajectory
        ``row`` (its place in the returned list) samples turn ``t`` with
        ``derive_seed(derive_seed(seed, row), t)``, a stream no other row, turn or seed shares.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        for i, p in enumerate(prompts):
            if not isinstance(p, PromptSpec):
                raise TypeError(f"prompts[{i}] must be a PromptSpec, got {type(p).__name__}")
        base = sampling or self.default_sampling()
        base = replace(base, max_new_tokens=min(base.max_new_tokens, self.config.max_tokens_per_turn))
        rollouts = []
        for p in prompts:
            group_id = uuid.uuid4().hex
            for k in range(n):
                traj = Trajectory(prompt=p, group_id=group_id, uid=f"{group_id}-{k}")
                row_seed = None if base.seed is None else derive_seed(base.seed, len(rollouts))
                rollouts.append(_Rollout(self, traj, base, row_seed))
        dispatcher = _ToolDispatcher(self.tools, self.config.tool_error_policy)
        try:
            if self.config.schedule == "concurrent":
                await self._run_concurrent(rollouts, dispatcher)
            else:
                await self._run_lockstep(rollouts, dispatcher)
        finally:
            await self._close_tools()
            self.last_tool_seconds = dispatcher.busy_seconds
        trajs = [r.traj for r in rollouts]
        if self.config.check_token_drift:
            for t in trajs:
                t.token_drift = token_drift(self.tokenizer, t.response_ids)
        return trajs

    async def _close_tools(self) -> None:
        """Let tools release per-event-loop resources (HTTP sessions); ``close`` is optional."""
        for tool in self.tools.values():
            close = getattr(tool, "close", None)
            if close is not None:
                result = close()
                if asyncio.iscoroutine(result):
                    await result

    # --- schedules -------------------------------------------------------------------

    async def _run_concurrent(self, rollouts: list[_Rollout], dispatcher: _ToolDispatcher) -> None:
        async def one(r: _Rollout) -> None:
            while (req := r.request()) is not None:
                call = r.on_generation(await self.engine.generate(*req))
                if call is not None:
                    r.on_tool_outcome(call.tag, await dispatcher.call(call.tag, call.content))

        tasks = [asyncio.ensure_future(one(r)) for r in rollouts]
        try:
            await asyncio.gather(*tasks)  # the first failure (tool_error_policy="raise") propagates
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # reap the rest quietly

    async def _run_lockstep(self, rollouts: list[_Rollout], dispatcher: _ToolDispatcher) -> None:
        active = rollouts
        while active:
            requests = [(r, req) for r in active if (req := r.request()) is not None]
            if not requests:
                break
            # One generate_batch per distinct (budget, stop set), each row with its own seed.
            by_params: dict[SamplingParams, list[tuple[_Rollout, list[int], int | None]]] = defaultdict(list)
            for r, (ids, params) in requests:
                by_params[replace(params, seed=None)].append((r, ids, params.seed))
            calls: dict[str, list[tuple[_Rollout, str]]] = defaultdict(list)
            for params, group in by_params.items():
                seeds = [seed for _, _, seed in group]
                results = await self.engine.generate_batch(
                    [ids for _, ids, _ in group], params, seeds=None if None in seeds else seeds
                )
                for (r, _, _), result in zip(group, results, strict=True):
                    call = r.on_generation(result)
                    if call is not None:
                        calls[call.tag].append((r, call.content))
            tags = list(calls)
            outcomes = await asyncio.gather(*(dispatcher.run_batch(t, [c for _, c in calls[t]]) for t in tags))
            for tag, outs in zip(tags, outcomes, strict=True):
                for (r, _), outcome in zip(calls[tag], outs, strict=True):
                    r.on_tool_outcome(tag, outcome)
            active = [r for r, _ in requests if not r.done]


def token_drift(tokenizer: Any, ids: list[int]) -> int:
    """How many of ``ids`` a decode → encode round trip does not reproduce.

    Real BPE tokenizers can merge differently across a model/observation boundary, so
    drift is reported as a metric, not treated as an error.
    """
    if not ids:
        return 0
    again = encode_text(tokenizer, tokenizer.decode(ids, skip_special_tokens=False))
    matcher = difflib.SequenceMatcher(a=ids, b=again, autojunk=False)
    matched = sum(block.size for block in matcher.get_matching_blocks())
    return max(len(ids), len(again)) - matched


def collate(trajectories: Sequence[Trajectory], pad_token_id: int, tokenizer: Any = None) -> Batch:
    """Pad trajectories into the trainer's ``Batch`` (field contract in the module docstring).

    ``tokenizer`` renders ``response_text``; without it the field holds ``None``.
    """
    if not trajectories:
        raise ValueError("collate needs at least one trajectory")
    if pad_token_id is None or pad_token_id < 0:
        raise ValueError(f"pad_token_id must be a non-negative int, got {pad_token_id!r}")
    b = len(trajectories)
    p = max(len(t.prompt_ids) for t in trajectories)
    r = max(1, max(len(t.response_ids) for t in trajectories))
    prompts = torch.full((b, p), pad_token_id, dtype=torch.long)
    responses = torch.full((b, r), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((b, p), dtype=torch.long)
    segments = torch.zeros((b, r), dtype=torch.int8)
    log_probs = torch.zeros((b, r), dtype=torch.float32)
    for i, t in enumerate(trajectories):
        lp, lr = len(t.prompt_ids), len(t.response_ids)
        prompts[i, p - lp :] = torch.tensor(t.prompt_ids, dtype=torch.long)
        prompt_mask[i, p - lp :] = 1
        if lr:
            responses[i, :lr] = torch.tensor(t.response_ids, dtype=torch.long)
            segments[i, :lr] = torch.tensor(t.segments, dtype=torch.int8)
            log_probs[i, :lr] = torch.tensor(t.log_probs, dtype=torch.float32)
    response_attn = (segments != Segment.PADDING).long()
    attention_mask = torch.cat([prompt_mask, response_attn], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_segments": segments,
        "response_mask": (segments == Segment.MODEL).float(),
        "rollout_log_probs": log_probs,
    }
    meta: dict[str, list[Any]] = {
        "group_id": [t.group_id for t in trajectories],
        "uid": [t.uid for t in trajectories],
        "data_source": [t.prompt.data_source for t in trajectories],
        "ground_truth": [t.prompt.ground_truth for t in trajectories],
        "extra_info": [t.prompt.extra_info for t in trajectories],
        "index": [t.prompt.index for t in trajectories],
        "response_text": [
            tokenizer.decode(t.response_ids, skip_special_tokens=True) if tokenizer is not None else None
            for t in trajectories
        ],
        "num_turns": [t.num_turns for t in trajectories],
        "num_searches": [t.num_searches for t in trajectories],
        "num_valid_actions": [t.num_valid_actions for t in trajectories],
        "num_invalid_actions": [t.num_invalid_actions for t in trajectories],
        "finished": [t.finished for t in trajectories],
        "answer": [t.answer for t in trajectories],
        "truncated": [t.truncation.any for t in trajectories],
        "obs_truncations": [t.truncation.observations_cut for t in trajectories],
        "obs_tokens_cut": [t.truncation.observation_tokens_cut for t in trajectories],
        "context_truncated": [t.truncation.context for t in trajectories],
        "response_truncated": [t.truncation.response_budget for t in trajectories],
        "turn_budget_hits": [t.truncation.turn_budget_hits for t in trajectories],
        "tool_failures": [t.tool_failures for t in trajectories],
        "tool_calls": [dict(t.tool_calls) for t in trajectories],
        "token_drift": [t.token_drift for t in trajectories],
    }
    return Batch.from_dict(tensors, meta)


def rollout_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Batch-level rollout metrics for the logger (means per trajectory unless ``*_total``)."""
    if not trajectories:
        return {}
    n = len(trajectories)

    def mean(values: Sequence[float]) -> float:
        return float(sum(values)) / n

    metrics = {
        "rollout/num_turns": mean([t.num_turns for t in trajectories]),
        "rollout/num_searches": mean([t.num_searches for t in trajectories]),
        "rollout/valid_actions": mean([t.num_valid_actions for t in trajectories]),
        "rollout/invalid_actions": mean([t.num_invalid_actions for t in trajectories]),
        "rollout/finished": mean([t.finished for t in trajectories]),
        "rollout/model_tokens": mean([t.num_model_tokens for t in trajectories]),
        "rollout/response_length": mean([len(t.response_ids) for t in trajectories]),
        "rollout/obs_truncations_total": float(sum(t.truncation.observations_cut for t in trajectories)),
        "rollout/obs_tokens_cut_total": float(sum(t.truncation.observation_tokens_cut for t in trajectories)),
        "rollout/context_truncated": mean([t.truncation.context for t in trajectories]),
        "rollout/response_truncated": mean([t.truncation.response_budget for t in trajectories]),
        "rollout/turn_budget_hits_total": float(sum(t.truncation.turn_budget_hits for t in trajectories)),
        "rollout/tool_failures_total": float(sum(t.tool_failures for t in trajectories)),
    }
    for key in sorted({k for t in trajectories for k in t.tool_metrics}):
        metrics[f"rollout/tool/{key}"] = mean([t.tool_metrics.get(key, 0.0) for t in trajectories])
    drifts = [t.token_drift for t in trajectories if t.token_drift is not None]
    if drifts:
        metrics["rollout/token_drift_total"] = float(sum(drifts))
        metrics["rollout/token_drift_trajectories"] = float(sum(d > 0 for d in drifts))
    return metrics
