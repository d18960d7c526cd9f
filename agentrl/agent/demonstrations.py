"""Demonstrations recorded from scripted model turns played through the real rollout.

``record_scripted_trajectories`` plays fixed model turns (e.g. the synthetic world's oracle
solutions) through the real ``LLMGenerationManager`` with the real tools, via
``agentrl.engines.scripted.ScriptedTurnEngine``. The manager parses each turn's action, calls
the retriever and tokenizes the observation exactly as it will at RL time, so a warm start
(``agentrl.trainer.sft``) sees the observations (format, truncation, final-turn note) the
policy will see, and no second observation formatter exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agentrl.agent.generation import LLMGenerationManager
from agentrl.agent.sampling import rollout_sampling
from agentrl.agent.trajectory import PromptSpec, Trajectory
from agentrl.config.schema import RolloutConfig
from agentrl.engines.scripted import ScriptedTurnEngine
from agentrl.tools.base import Tool

__all__ = ["record_scripted_trajectories"]


def record_scripted_trajectories(
    prompts: Sequence[PromptSpec],
    turns: Sequence[Sequence[str]],
    tokenizer: Any,
    rollout: RolloutConfig,
    *,
    max_prompt_length: int,
    max_response_length: int,
    tools: Mapping[str, Tool] | Sequence[Tool] | None = None,
    allow_observation_cut: bool = False,
) -> tuple[list[Trajectory], list[Trajectory]]:
    """Play ``turns[i]`` as the model's turns for ``prompts[i]`` through the real rollout.

    Returns ``(complete, incomplete)``: complete trajectories ended with an answer after
    using every scripted turn (nothing cut); the others (a turn over ``max_tokens_per_turn``,
    an over-long observation, a tool failure) are returned apart so callers can count them
    and not train on a half trajectory. With ``allow_observation_cut`` an observation cut to
    ``max_obs_length`` still counts as complete: real passages are long, and RL sees the same cut.
    """
    if len(prompts) != len(turns):
        raise ValueError(f"{len(prompts)} prompts but {len(turns)} turn scripts")
    for i, script in enumerate(turns):
        if not script:
            raise ValueError(f"turns[{i}] is empty")
    manager = LLMGenerationManager(
        ScriptedTurnEngine(tokenizer, {}),  # replaced below, once the scripts are keyed
        tokenizer,
        rollout,
        max_prompt_length=max_prompt_length,
        max_response_length=max_response_length,
        tools=tools,
    )
    # keyed by the prompts as the rollout encodes them (with the tools' schemas in hermes)
    encoded = [manager.encode_prompt(p) for p in prompts]
    scripts: dict[tuple[int, ...], Sequence[str]] = {}
    for i, (prompt, script) in enumerate(zip(encoded, turns, strict=True)):
        key = tuple(prompt.prompt_ids)
        if key in scripts:
            raise ValueError(f"prompts[{i}] repeats an earlier prompt; scripted prompts must be distinct")
        scripts[key] = list(script)
    manager.engine = ScriptedTurnEngine(tokenizer, scripts)
    params = rollout_sampling(rollout, greedy=True)
    trajectories = manager.run(encoded, params).trajectories
    complete, incomplete = [], []
    for traj, script in zip(trajectories, turns, strict=True):
        cut = traj.truncation
        if allow_observation_cut:
            cut = replace(cut, observations_cut=0, observation_tokens_cut=0)
        ok = (
            traj.finished
            and traj.num_turns == len(script)
            and not cut.any
            and traj.tool_failures == 0
            and traj.num_invalid_actions == 0
        )
        (complete if ok else incomplete).append(traj)
    return complete, incomplete
