"""How a batch or a list is cut across a group's ranks: by token count, in chunks, per mini-batch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from agentrl.core.batch import Batch


def balanced_partition(weights: Sequence[float], parts: int) -> list[list[int]]:
    """``parts`` lists of equally many indices whose weight sums are as even as a greedy
    longest-first assignment makes them; each list keeps its indices in increasing order.

    Equal counts keep every rank's number of mini- and micro-batches the same (a rank with
    fewer would leave the others waiting in a collective); the greedy order balances tokens.
    """
    if len(weights) % parts:
        raise ValueError(f"{len(weights)} items cannot be split into {parts} equal parts")
    room = len(weights) // parts
    loads = [0.0] * parts
    members: list[list[int]] = [[] for _ in range(parts)]
    for index in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        rank = min((r for r in range(parts) if len(members[r]) < room), key=lambda r: (loads[r], r))
        members[rank].append(index)
        loads[rank] += weights[index]
    return [sorted(m) for m in members]


def token_counts(batch: Batch) -> list[float]:
    return batch["attention_mask"].sum(dim=-1).float().tolist()


def mini_batch_shards(batch: Batch, parts: int, mini_batch_size: int) -> list[Batch]:
    """One shard per rank for an update: rank r holds its part of every mini-batch, in order.

    Splitting rank r's shard into ``mini_batch_size // parts`` rows then gives, at position
    i, rank r's part of the i-th global mini-batch: N ranks step on the same mini-batches as
    one rank would. Within a mini-batch the rows go to ranks balanced by token count. Needs
    ``parts`` to divide the mini-batch and the batch (the config check enforces both).
    """
    if parts == 1:
        return [batch]
    if mini_batch_size % parts or len(batch) % parts:
        raise ValueError(
            f"{parts} ranks must divide both the mini-batch ({mini_batch_size}) and the batch ({len(batch)})"
        )
    pieces: list[list[Batch]] = [[] for _ in range(parts)]
    for mini in batch.split(mini_batch_size):
        for rank, rows in enumerate(balanced_partition(token_counts(mini), parts)):
            pieces[rank].append(mini.index(rows))
    return [Batch.concat(rank_pieces) for rank_pieces in pieces]


def chunk_bounds(length: int, parts: int) -> list[int]:
    """Where ``parts`` contiguous, near-equal chunks of ``length`` items start, and the end."""
    return np.linspace(0, length, parts + 1).round().astype(int).tolist()


# Fields a padding row carries as zeros: it trains nothing, scores nothing, ends no turn.
_ZEROED = (
    "response_mask",
    "response_segments",
    "rollout_log_probs",
    "response_turn_ends",
    "turn_scores",
    "scores",
)
_NONE = ("response_turn_index", "response_versions")  # -1: no turn ends here, no token sampled


def pad_rows(batch: Batch, multiple: int) -> tuple[Batch, int]:
    """``batch`` with rows appended until ``multiple`` divides its length, and how many.

    A trajectory of several steps has several rows, so a step's row count need not divide the
    data-parallel ranks that every stage splits it over (equal rows per rank: collectives).
    A padding row is row 0 with its loss mask, segments, log-probs, turn ends and scores zeroed,
    alone in its own group and trajectory: no estimator gives it an advantage, no loss or token
    count sees it. Drop the last ``added`` rows before reading the batch's metrics.
    """
    added = -len(batch) % multiple
    if added == 0:
        return batch, 0
    pad = batch.index([0] * added)
    for key in _ZEROED:
        if key in pad and isinstance(pad[key], torch.Tensor):
            pad[key] = torch.zeros_like(pad[key])
    for key in _NONE:
        if key in pad:
            pad[key] = torch.full_like(pad[key], -1)
    names = [f"padding-{len(batch) + k}" for k in range(added)]
    fields = {"group_id": names, "uid": names, "last_step": [True] * added}
    fields |= {"step_index": [0] * added, "num_steps": [1] * added, "step_turns": [[]] * added}
    fields |= {"step_turn_ends": [[]] * added}
    for key, values in fields.items():
        if key in pad:
            pad[key] = values
    return Batch.concat([batch, pad]), added
