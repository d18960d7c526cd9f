"""Padding trajectories into the trainer's ``Batch``: the field contract every role reads.

One row per step of each trajectory (``Trajectory.all_steps``: one for an append-only
trajectory, so B trajectories give B rows, bit-identical to before steps existed); rows of
one trajectory are consecutive, in step order. P = longest prompt, R = longest response
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
``response_turn_ends``  (B,R) bool   each model turn's last sampled token (where its reward goes)
``response_turn_index`` (B,R) long   that turn's number (from 0) at those tokens, -1 elsewhere
``response_versions``   (B,R) long   the version of the weights that sampled each model token
                                     (``Trajectory.turn_versions``), -1 elsewhere
======================  ===========  ============================================================

Meta (object arrays of length B): ``group_id`` (shared by the n samples of one prompt,
unique across the batch and across calls), ``uid`` (unique per trajectory),
``data_source``, ``ground_truth``, ``extra_info``, ``index`` (dataset row, logs only),
``response_text`` (``render_response``: what the reward's tag grammar reads),
``num_turns``, ``tool_calls`` (dict: calls per tool name; a tag tool's is its tag),
``tool_calls_invalid`` (dict: malformed calls and invalid turns by reason; what the
reward's ``format_penalty`` reads), ``tool_outputs`` (list: what the tools returned, in
order; with the two counts, what the reward's ``hermes`` format check reads), ``num_valid_actions``,
``num_invalid_actions``, ``finished`` (ended with a complete answer), ``answer`` (its
body, as the rollout accepted it within one model turn; None if none: what the reward
scores), ``truncated`` (any truncation), ``obs_truncations`` (observations cut),
``obs_tokens_cut``, ``context_truncated``, ``response_truncated``, ``turn_budget_hits``,
``tool_failures``, ``token_drift`` (None unless ``check_token_drift``), ``calls`` (list of
``(turn, tool name, status, message)``: every call, for the turn scorers), ``turn_rewards``
(list: the tools' reward per model turn, summed over its calls), ``context_compactions``.

Per row (step): ``step_index`` (0, 1, …), ``num_steps``, ``last_step`` (the row that holds the
trajectory's last turn, where the outcome goes), ``step_reason`` (why the step began),
``step_turns`` (the model turns sampled in this row) and ``step_turn_ends`` (the position in
``responses`` of each one's last token, where its turn reward goes). A trajectory-level field
repeats on each of its rows; ``uid`` is the trajectory's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentrl.agent.trajectory import Segment, Trajectory
from agentrl.core.batch import Batch


def render_response(tokenizer: Any, response_ids: Sequence[int]) -> str:
    """The one decoding rule for scoring and evaluation: the whole response (model turns and
    observations) decoded *without* special tokens, so an eos or chat marker the model
    emitted is not read as text outside the tags."""
    return tokenizer.decode(list(response_ids), skip_special_tokens=True)


def collate(trajectories: Sequence[Trajectory], pad_token_id: int, tokenizer: Any = None) -> Batch:
    """Pad trajectories' steps into the trainer's ``Batch`` (field contract in the module docstring).

    ``tokenizer`` renders ``response_text``; without it the field holds ``None``.
    """
    if not trajectories:
        raise ValueError("collate needs at least one trajectory")
    if pad_token_id is None or pad_token_id < 0:
        raise ValueError(f"pad_token_id must be a non-negative int, got {pad_token_id!r}")
    rows = [(t, k, step) for t in trajectories for k, step in enumerate(t.all_steps)]
    b = len(rows)
    p = max(len(step.prompt_ids) for _, _, step in rows)
    r = max(1, max(len(step.response_ids) for _, _, step in rows))
    prompts = torch.full((b, p), pad_token_id, dtype=torch.long)
    responses = torch.full((b, r), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((b, p), dtype=torch.long)
    segments = torch.zeros((b, r), dtype=torch.int8)
    log_probs = torch.zeros((b, r), dtype=torch.float32)
    turn_ends = torch.zeros((b, r), dtype=torch.bool)
    turn_index = torch.full((b, r), -1, dtype=torch.long)
    versions = torch.full((b, r), -1, dtype=torch.long)
    for i, (traj, _, step) in enumerate(rows):
        _stamp_versions(versions[i], traj, step)
        turn_ends[i, step.turn_ends] = True
        turn_index[i, step.turn_ends] = torch.tensor(step.turns, dtype=torch.long)
        lp, lr = len(step.prompt_ids), len(step.response_ids)
        prompts[i, p - lp :] = torch.tensor(step.prompt_ids, dtype=torch.long)
        prompt_mask[i, p - lp :] = 1
        if lr:
            responses[i, :lr] = torch.tensor(step.response_ids, dtype=torch.long)
            segments[i, :lr] = torch.tensor(step.segments, dtype=torch.int8)
            log_probs[i, :lr] = torch.tensor(step.log_probs, dtype=torch.float32)
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
        "response_turn_ends": turn_ends,
        "response_turn_index": turn_index,
        "response_versions": versions,
    }
    per_trajectory = _meta(trajectories, tokenizer)
    where = {id(t): i for i, t in enumerate(trajectories)}
    meta = {key: [values[where[id(t)]] for t, _, _ in rows] for key, values in per_trajectory.items()}
    meta |= {
        "step_index": [k for _, k, _ in rows],
        "num_steps": [t.num_steps for t, _, _ in rows],
        "last_step": [k == t.num_steps - 1 for t, k, _ in rows],
        "step_reason": [step.reason for _, _, step in rows],
        "step_turns": [list(step.turns) for _, _, step in rows],
        "step_turn_ends": [list(step.turn_ends) for _, _, step in rows],
    }
    return Batch.from_dict(tensors, meta)


def _stamp_versions(row: torch.Tensor, traj: Trajectory, step: Any) -> None:
    """Each model token of ``step`` gets its turn's weights version: a turn's tokens are the model
    tokens after the previous turn's last one, up to its own last (``step.turn_ends``)."""
    start = 0
    for turn, end in zip(step.turns, step.turn_ends, strict=True):
        if turn < len(traj.turn_versions):  # a trajectory built without add_turn records none
            model = torch.tensor(step.segments[start : end + 1]) == Segment.MODEL
            row[start : end + 1][model] = traj.turn_versions[turn]
        start = end + 1


def _meta(trajectories: Sequence[Trajectory], tokenizer: Any) -> dict[str, list[Any]]:
    return {
        "group_id": [t.group_id for t in trajectories],
        "uid": [t.uid for t in trajectories],
        "data_source": [t.prompt.data_source for t in trajectories],
        "ground_truth": [t.prompt.ground_truth for t in trajectories],
        "extra_info": [t.prompt.extra_info for t in trajectories],
        "index": [t.prompt.index for t in trajectories],
        "response_text": [
            render_response(tokenizer, t.response_ids_of_all_steps()) if tokenizer is not None else None
            for t in trajectories
        ],
        "num_turns": [t.num_turns for t in trajectories],
        "tool_calls": [dict(t.tool_calls) for t in trajectories],
        "tool_calls_invalid": [dict(t.tool_calls_invalid) for t in trajectories],
        "tool_outputs": [[text for _, text in t.tool_outputs] for t in trajectories],
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
        "token_drift": [t.token_drift for t in trajectories],
        "calls": [[(c.turn, c.name, c.status, c.message) for c in t.calls] for t in trajectories],
        "turn_rewards": [list(t.turn_rewards) for t in trajectories],
        "context_compactions": [t.context_compactions for t in trajectories],
        "outcome_reward": [t.outcome_reward for t in trajectories],
    }
