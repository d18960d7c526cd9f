"""Trajectory dumps: one JSON line per trajectory, with what the loss sees.

Each line holds the ids, the per-token segment labels and loss mask, the engine
log-probs, the response rendered segment by segment (so a reader sees exactly which
text was trained on and which was inserted), every tool call with its arguments, status
and the tool message the policy read for it (``calls``), the reward if given, and the
rollout metadata. ``python -m agentrl.agent.viewer dump.jsonl --out dump.html`` renders it.

A trajectory of several steps (``trajectory.py``) is one line too: its top-level ids are its
last step's, and ``steps`` lists every step (the last included) with its prompt, response,
segments, spans, the turns it holds and why it began.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentrl.agent.trajectory import Segment, Trajectory


def _jsonable(value: Any) -> Any:
    """Ground truths and extra info may hold numpy arrays/scalars; make them JSON."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def _spans(response_ids: list[int], segment_spans: list[tuple[int, int, int]], tokenizer: Any) -> list[dict]:
    return [
        {
            "segment": Segment(seg).name.lower(),
            "start": start,
            "end": end,
            "loss_mask": int(seg == Segment.MODEL),
            "text": tokenizer.decode(response_ids[start:end], skip_special_tokens=False),
        }
        for seg, start, end in segment_spans
    ]


def _steps(traj: Trajectory, tokenizer: Any) -> list[dict]:
    return [
        {
            "reason": step.reason,
            "turns": list(step.turns),
            "prompt_ids": list(step.prompt_ids),
            "prompt_text": tokenizer.decode(step.prompt_ids, skip_special_tokens=False),
            "response_ids": list(step.response_ids),
            "segments": list(step.segments),
            "log_probs": [round(x, 6) for x in step.log_probs],
            "spans": _spans(step.response_ids, step.segment_spans, tokenizer),
        }
        for step in traj.all_steps
    ]


def dump_record(
    traj: Trajectory, tokenizer: Any, reward: float | None = None, step: int | None = None
) -> dict:
    """The JSON-able dump line of one trajectory: ids, segments, loss mask, log-probs, rendered
    spans (not the evaluator's scored record, ``agentrl.eval.records.trajectory_record``)."""
    spans = _spans(traj.response_ids, traj.segment_spans, tokenizer)
    return {
        "step": step,
        "uid": traj.uid,
        "group_id": traj.group_id,
        "data_source": traj.prompt.data_source,
        "index": _jsonable(traj.prompt.index),
        "ground_truth": _jsonable(traj.prompt.ground_truth),
        "extra_info": _jsonable(traj.prompt.extra_info),
        "reward": None if reward is None else float(reward),
        "prompt_ids": list(traj.prompt_ids),
        "prompt_text": tokenizer.decode(traj.prompt_ids, skip_special_tokens=False),
        "response_ids": list(traj.response_ids),
        "segments": list(traj.segments),
        "loss_mask": traj.loss_mask,
        "log_probs": [round(x, 6) for x in traj.log_probs],
        "spans": spans,
        "num_turns": traj.num_turns,
        "tool_calls": dict(traj.tool_calls),
        "calls": [_jsonable(asdict(call)) for call in traj.calls],
        "tool_calls_invalid": dict(traj.tool_calls_invalid),
        "calls_over_budget": traj.calls_over_budget,
        "num_valid_actions": traj.num_valid_actions,
        "num_invalid_actions": traj.num_invalid_actions,
        "finished": traj.finished,
        "truncation": asdict(traj.truncation),
        "tool_failures": traj.tool_failures,
        "tool_metrics": dict(traj.tool_metrics),
        "token_drift": traj.token_drift,
        "finish_reasons": list(traj.finish_reasons),
        "turn_rewards": list(traj.turn_rewards),
        "context_compactions": traj.context_compactions,
        "num_steps": traj.num_steps,
        "steps": _steps(traj, tokenizer) if traj.num_steps > 1 else [],
    }


def dump_trajectories(
    trajs: Sequence[Trajectory],
    path: str | Path,
    tokenizer: Any,
    rewards: Sequence[float] | None = None,
    step: int | None = None,
    append: bool = True,
) -> Path:
    """One JSON line per trajectory in ``path`` (created with its parents), after what it holds, or
    in place of it when ``append`` is False."""
    if rewards is not None and len(rewards) != len(trajs):
        raise ValueError(f"rewards has {len(rewards)} entries for {len(trajs)} trajectories")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for i, traj in enumerate(trajs):
            reward = None if rewards is None else rewards[i]
            f.write(json.dumps(dump_record(traj, tokenizer, reward, step), ensure_ascii=False) + "\n")
    return path
