"""The LLM judge's scores of a reward batch, a trajectory's on each of its rows (``reward.judge.url``).

A trajectory is judged once, on its last row (``last_step``; every row where the batch has no
such field, one row per trajectory), and each of its rows gets that score. Its question is
``extra_info["question"]``, its answer ``answer`` (None: 0, never sent) and its gold answers
``ground_truth["target"]``; one a harness scored (``outcome_reward``) is not sent, its score
being the harness's (0 here). The trajectories of one ``group_id`` (the samples of one prompt) form
one ``JudgeGroup``: one request scores them all under ``reward.judge.mode=group``, one request
each under ``pointwise``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from agentrl.core.batch import Batch
from agentrl.core.placement import trajectory_of_rows
from agentrl.rewards.judge import JudgeGroup, LLMJudge, judge_batch
from agentrl.rewards.scorers import golds_from_ground_truth

__all__ = ["judged_scores", "row_owner"]


def row_owner(batch: Batch) -> torch.Tensor:
    """The trajectory (0, 1, …, in order) each row belongs to (``core.placement.trajectory_of_rows``;
    one row per trajectory where the batch has no ``last_step``)."""
    if "last_step" not in batch:
        return torch.arange(len(batch))
    return trajectory_of_rows(torch.tensor([bool(x) for x in batch["last_step"]]))


def _question(extra_info: Mapping[str, Any] | None, row: int, data_source: str) -> str:
    question = (extra_info or {}).get("question")
    if not isinstance(question, str) or not question.strip():
        raise KeyError(
            f"reward.judge.url is set, so the reward sends each answer's question to the judge, read "
            f"from the batch's extra_info['question']; row {row} (data_source={data_source!r}) has "
            f"{question!r}: give the prompts' rows an extra_info.question, or set reward.judge.url to null"
        )
    return question


def judged_scores(judge: LLMJudge, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
    """One float32 score per row of ``batch``: its trajectory's judged score (module docstring);
    and the metrics: the judge's ``judge/*`` of this call and ``reward/judged``, the mean score
    over the trajectories judged.

    Raises KeyError naming ``extra_info['question']`` when a judged row has no question, and
    what ``judge.score`` raises (``JudgeError`` under ``reward.judge.on_failure=raise``).
    """
    owners = row_owner(batch)
    last = [row for row in range(len(batch)) if "last_step" not in batch or bool(batch["last_step"][row])]
    rated = batch["outcome_reward"] if "outcome_reward" in batch else [None] * len(batch)
    groups: dict[Any, list[int]] = {}  # group_id -> the last rows of its trajectories, in order
    for row in last:
        if rated[row] is None:  # a harness's score replaces the judge's anyway: not paid for
            groups.setdefault(batch["group_id"][row], []).append(row)
    judge_groups = []
    for rows in groups.values():
        first = rows[0]  # the samples of one prompt share its question and gold answers
        judge_groups.append(
            JudgeGroup(
                question=_question(batch["extra_info"][first], first, batch["data_source"][first]),
                answers=[batch["answer"][row] for row in rows],
                golds=golds_from_ground_truth(batch["ground_truth"][first]),
            )
        )
    verdicts = judge_batch(judge, judge_groups)
    per_trajectory = torch.zeros(len(last), dtype=torch.float32)
    for rows, scores in zip(groups.values(), verdicts, strict=True):
        for row, score in zip(rows, scores, strict=True):
            per_trajectory[owners[row]] = score
    metrics = judge.metrics(reset=True)  # this call's requests, latency and cost, not the run's so far
    judged = [float(per_trajectory[owners[row]]) for rows in groups.values() for row in rows]
    metrics["reward/judged"] = float(np.mean(judged)) if judged else 0.0
    return per_trajectory[owners], metrics
