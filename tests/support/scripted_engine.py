"""Engines for rollout tests, and the invariants every rollout must satisfy.

``ScriptedEngine`` is the project's ``agentrl.engines.scripted.ScriptedEngine`` (a real
``BatchingEngine``) with a policy function of the decoded context as its plan: real token
ids of the real tokenizer. It is an injected policy (a random tiny model rarely writes
``<search>``), not a stand-in for the code under test: it honours ``max_new_tokens`` and
``stop`` as every engine does, and it records every call so tests can check that the
manager kept exactly the sampled ids.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pytest
import torch

from agentrl.agent import Segment, collate
from agentrl.core.batch import Batch
from agentrl.engines.base import Engine, GenerationResult, SamplingParams
from agentrl.engines.scripted import ScriptedEngine as BaseScriptedEngine

ASSISTANT_START = "<|im_start|>assistant\n"


def fake_log_prob(token_id: int) -> float:
    """A recognisable non-zero log-prob per token, so tests can check where they land."""
    return -0.001 * (token_id + 1)


def response_part(context: str) -> str:
    """The part of the decoded context after the assistant turn started (the response)."""
    return context.split(ASSISTANT_START)[-1]


@dataclass
class EngineCall:
    prompt_ids: list[int]
    params: SamplingParams
    result: GenerationResult
    batched: bool


class ScriptedEngine(BaseScriptedEngine):
    """The project's scripted engine with ``policy(decoded_context) -> turn text`` as its plan
    (plus eos), recognisable log-probs, an optional delay, and a record of every call."""

    def __init__(self, tokenizer, policy: Callable[[str], str], delay_s: float = 0.0) -> None:
        super().__init__(tokenizer)
        self.policy = policy
        self.delay_s = delay_s
        self.calls: list[EngineCall] = []

    def plan(self, prompt_ids: list[int]) -> list[int]:
        context = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        return self.tokenizer.encode(self.policy(context), add_special_tokens=False) + [self.eos_token_id]

    def log_prob_of(self, token_id: int) -> float:
        return fake_log_prob(token_id)

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        result = await super().generate(prompt_ids, params)
        self.calls.append(EngineCall(list(prompt_ids), params, result, batched=False))
        return result

    async def generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[GenerationResult]:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        results = await super().generate_batch(prompts, params, seeds)
        row_params = [params] * len(prompts) if seeds is None else [replace(params, seed=s) for s in seeds]
        self.calls.extend(
            EngineCall(list(p), rp, r, batched=True)
            for p, rp, r in zip(prompts, row_params, results, strict=True)
        )
        return results


class SeedRecordingEngine(ScriptedEngine):
    """Records the seed each row was generated with: the random streams a sampling engine would use."""

    def __init__(self, tokenizer, policy: Callable[[str], str]) -> None:
        super().__init__(tokenizer, policy)
        self.seeds: list[int] = []

    def _generate_rows(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int]):
        self.seeds.extend(seeds)
        return super()._generate_rows(prompts, params, seeds)


class RecordingEngine:
    """Wraps a real engine and records every call, without changing what it returns."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.calls: list[EngineCall] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        result = await self.engine.generate(prompt_ids, params)
        self.calls.append(EngineCall(list(prompt_ids), params, result, batched=False))
        return result

    async def generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[GenerationResult]:
        results = await self.engine.generate_batch(prompts, params, seeds)
        row_params = [params] * len(prompts) if seeds is None else [replace(params, seed=s) for s in seeds]
        self.calls.extend(
            EngineCall(list(p), rp, r, batched=True)
            for p, rp, r in zip(prompts, row_params, results, strict=True)
        )
        return results

    def update_weights(self, weights) -> None:  # pragma: no cover
        self.engine.update_weights(weights)

    def sleep(self, release_weights: bool = False) -> int:  # pragma: no cover
        return self.engine.sleep(release_weights)

    def wake_up(self) -> None:  # pragma: no cover
        self.engine.wake_up()

    def shutdown(self) -> None:  # pragma: no cover
        self.engine.shutdown()


def assert_rollout_invariants(trajs, engine: ScriptedEngine | RecordingEngine, tokenizer) -> Batch:
    """Masks and ids are exactly what the engine sampled and what the manager inserted, in
    every step of every trajectory (``collate``'s rows, one per step, in order): each model span
    was sampled from exactly its step's prompt and the response before it, every sampled token
    is in exactly one step's loss, and a closed step ends with a sampled token."""
    info_open = tokenizer.convert_tokens_to_ids("<information>")
    info_close = tokenizer.convert_tokens_to_ids("</information>")
    sampled: dict[tuple[int, ...], list[GenerationResult]] = {}  # n copies share their first context
    for c in engine.calls:
        sampled.setdefault(tuple(c.prompt_ids), []).append(c.result)
    batch = collate(trajs, tokenizer.pad_token_id, tokenizer)
    mask, segs = batch["response_mask"], batch["response_segments"]
    assert int(mask.sum()) == sum(len(c.result.token_ids) for c in engine.calls)
    rows = [(t, k, step) for t in trajs for k, step in enumerate(t.all_steps)]
    assert len(rows) == len(batch)
    for i, (t, k, step) in enumerate(rows):
        n = len(step.response_ids)
        assert len(step.segments) == len(step.log_probs) == n
        assert (
            batch["prompts"][i, batch["prompts"].shape[1] - len(step.prompt_ids) :].tolist()
            == step.prompt_ids
        )
        assert torch.all(mask[i, n:] == 0) and torch.all(segs[i, n:] == Segment.PADDING)
        if k < t.num_steps - 1:
            assert step.segments and step.segments[-1] == Segment.MODEL
        assert [step.segments[end] for end in step.turn_ends] == [Segment.MODEL] * len(step.turns)
        # every model span is exactly one engine result, sampled from exactly this context
        for seg, start, end in step.segment_spans:
            if seg == Segment.MODEL:
                candidates = sampled[tuple(step.prompt_ids + step.response_ids[:start])]
                result = next(r for r in candidates if r.token_ids == step.response_ids[start:end])
                candidates.remove(result)  # each sampled continuation is used exactly once
                assert step.log_probs[start:end] == pytest.approx(result.log_probs)
                assert torch.all(mask[i, start:end] == 1)
            else:
                assert torch.all(mask[i, start:end] == 0)
                assert all(lp == 0.0 for lp in step.log_probs[start:end])
        # everything from an inserted <information> to its </information> is masked (a policy
        # may also *write* those tags itself: those are sampled tokens, checked above)
        inside = False
        for pos, tok in enumerate(step.response_ids):
            if tok == info_open and step.segments[pos] == Segment.OBSERVATION:
                inside = True
            if inside:
                assert mask[i, pos] == 0 and segs[i, pos] == Segment.OBSERVATION
            if tok == info_close:
                inside = False
    for t in trajs:
        assert t.num_valid_actions + t.num_invalid_actions == t.num_turns
        assert len(t.turn_versions) == t.num_turns  # each turn says which weights sampled it
    # a weights version on exactly the sampled tokens, -1 on observations and padding
    assert torch.equal(batch["response_versions"] >= 0, mask > 0)
    assert not any(candidates for candidates in sampled.values()), "a sampled turn is in no step"
    return batch
