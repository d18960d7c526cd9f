"""Scoring one rolled-out trajectory into an evaluation record: the scoring rule of evaluation.

The trainer's validation, the quickstart and the evaluation CLI all turn trajectories into
records here, so their numbers agree. The rule, stated once:

* **prediction**: what the answer-extraction rule of the evaluation (``answer_rule``, see
  ``agentrl.eval.extraction`` for both rules, stated exactly) reads from the trajectory:

  - ``tag`` (default, and what the training reward scores): the answer the rollout
    accepted (``Trajectory.answer``: the body of the ``<answer>…</answer>`` one model turn
    wrote to end the trajectory); none without one.
  - ``tag-or-first-line`` (the fair baseline protocol): that accepted answer when there is
    one, else a short answer read from the last model turn by the steps stated in
    ``agentrl.eval.extraction``; ``extracted`` marks such predictions.

* **EM / F1 / cover-EM** score the prediction; no prediction scores 0. ``answered`` stays
  strict under both rules: the rollout accepted an ``<answer>`` tag.
* The structure and retrieval metrics read the response rendered by
  ``agentrl.agent.collate.render_response`` (the whole response, special tokens such as eos
  left out), the text the reward reads.
* ``retrieval_hit`` (gold in docs): a golden answer occurs on token boundaries in the
  documents the question was given (rag prompts) or in what the tools returned (agent),
  never in hints or notes; None when the question saw no documents.
* Tool calls (``tool_calls``, by tool name, and ``num_searches``, the ``search`` tool's) are
  the calls the rollout sent the tools, the same record in every tool-call format (``tags``,
  ``hermes``), never re-read from the text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.agent.collate import render_response
from agentrl.agent.trajectory import Segment, Trajectory
from agentrl.eval.extraction import predict
from agentrl.rewards import answer_metrics, cover_exact_match, gold_in_documents

__all__ = ["last_turn_text", "records_of", "segment_text", "trajectory_record"]


def segment_text(tokenizer: Any, traj: Trajectory, segment: Segment, start: int = 0) -> str:
    """The response tokens from ``start`` on that carry ``segment``, decoded without special
    tokens: what the model wrote (``MODEL``) or what the policy read (``OBSERVATION``)."""
    ids = [
        t for t, seg in zip(traj.response_ids[start:], traj.segments[start:], strict=True) if seg == segment
    ]
    return tokenizer.decode(ids, skip_special_tokens=True)


def last_turn_text(tokenizer: Any, traj: Trajectory) -> str:
    """What the model wrote in its last turn: the response tokens after the last observation
    (all of them model tokens), without special tokens; "" when the response ends with an
    observation (the last turn wrote nothing)."""
    start = next(
        (k + 1 for k in range(len(traj.segments) - 1, -1, -1) if traj.segments[k] == Segment.OBSERVATION), 0
    )
    return segment_text(tokenizer, traj, Segment.MODEL, start)


def trajectory_record(
    traj: Trajectory,
    tokenizer: Any,
    golds: Sequence[str],
    *,
    dataset: str,
    question_id: str,
    question: str = "",
    documents: Sequence[Mapping[str, Any]] | None = None,
    answer_rule: str = "tag",
) -> dict[str, Any]:
    """The record of one question: prediction (under ``answer_rule``), match metrics,
    behaviour and the response."""
    text = render_response(tokenizer, traj.response_ids_of_all_steps())
    golds = list(golds)
    turn = last_turn_text(tokenizer, traj) if traj.answer is None and answer_rule != "tag" else ""
    prediction, extracted = predict(traj.answer, turn, answer_rule)
    metrics = answer_metrics(text, prediction, golds)
    if documents is not None:
        hit: float | None = float(gold_in_documents([d["contents"] for d in documents], golds))
    elif traj.tool_outputs:
        hit = float(gold_in_documents([output for _, output in traj.tool_outputs], golds))
    else:
        hit = None
    return {
        "dataset": dataset,
        "data_source": traj.prompt.data_source,
        "id": question_id,
        "question": question,
        "golden_answers": golds,
        "prediction": prediction,
        "em": metrics["em"],
        "f1": metrics["f1"],
        "cover_em": metrics["cover_em"],
        # strict under every rule: the rollout accepted an <answer> tag
        "answered": traj.answer is not None,
        # the prediction came from the fallback of ``tag-or-first-line``, not from a tag
        "extracted": extracted,
        # Lenient diagnostic, not a Search-R1 metric: a gold answer anywhere in what the model
        # wrote, tags or not. Shows what a model that ignores the answer format knows.
        "text_cover_em": cover_exact_match(segment_text(tokenizer, traj, Segment.MODEL), golds),
        "retrieval_hit": hit,
        "num_searches": traj.tool_calls.get("search", 0),
        "tool_calls": dict(traj.tool_calls),
        "num_turns": traj.num_turns,
        "response_tokens": traj.num_model_tokens,
        "observation_tokens": len(traj.response_ids_of_all_steps()) - traj.num_model_tokens,
        "prompt_tokens": len(traj.prompt_ids),
        "finished": traj.finished,
        "truncated": traj.truncation.any,
        "tool_failures": traj.tool_failures,
        "retrieved_ids": [d["id"] for d in documents] if documents is not None else None,
        "response": text,
    }


def records_of(
    trajectories: Sequence[Trajectory], tokenizer: Any, answer_rule: str = "tag"
) -> list[dict[str, Any]]:
    """Records of trajectories rolled out from training rows (golds in ``ground_truth``),
    grouped by their ``data_source``: the trainer's validation."""
    from agentrl.rewards.scorers import golds_from_ground_truth

    return [
        trajectory_record(
            t,
            tokenizer,
            golds_from_ground_truth(t.prompt.ground_truth),
            dataset=t.prompt.data_source,
            question_id=str(t.prompt.index),
            question=str(t.prompt.extra_info.get("question", "")),
            answer_rule=answer_rule,
        )
        for t in trajectories
    ]
