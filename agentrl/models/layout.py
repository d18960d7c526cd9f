"""How a micro-batch is laid out for the model: padding trimmed, or sequences packed into rows.

Batch layout (from ``agentrl.agent.collate.collate``): ``input_ids`` is the left-padded
prompt (width P) followed by the right-padded response (width R). The state that predicts
response token j is the one of the token before it; a ``ResponseIndex`` says where that
state sits in the model's output, for either layout, and scatters results back to (B, R).

Padded path: micro-batches are trimmed of columns that are padding in every row (left of
the longest prompt, right of the longest response), so a micro-batch of short sequences
costs what its own lengths cost, not the batch's widest row.

Packed path: the real tokens of every row (prompt without its left
padding, response without its right padding) are packed several to a row, position ids
restarting at 0 for each sequence, with ``attention_mask=None``. transformers reads such
position ids as packed sequences (``masking_utils.find_packed_sequence_indices``): flash
attention uses the boundaries directly, and so does ``agentrl.models.attention.VARLEN_SDPA``
(sdpa run per sequence), which the workers switch sdpa models to when they pack; under
either everything goes in one row. Plain sdpa and eager get a dense block-diagonal mask, so
for them rows hold 1 to 4 times the longest sequence (``row_capacity``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentrl.core.batch import Batch
from agentrl.models.attention import VARLEN_SDPA


@dataclass
class TrimmedInputs:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    responses: torch.Tensor  # (b, r) with r <= R
    first_logit: int  # column of the logit that predicts response token 0
    response_width: int  # R of the untrimmed batch, to pad results back


@dataclass
class ResponseIndex:
    """Where the state predicting each attended response token sits, and where its result goes."""

    sources: torch.Tensor  # (n,) position in the forward's flattened (rows × columns) output
    rows: torch.Tensor  # (n,) row of the token in the (b, R) result
    columns: torch.Tensor  # (n,) column of the token in the (b, R) result
    targets: torch.Tensor  # (n,) the token id
    shape: tuple[int, int]  # (b, R)

    def scatter(self, values: torch.Tensor) -> torch.Tensor:
        """(n,) per-token results → (b, R), 0 where there is no response token."""
        return values.new_zeros(self.shape).index_put((self.rows, self.columns), values)


@dataclass
class PackedInputs:
    """A micro-batch's real tokens packed into rows, sequences one after another."""

    input_ids: torch.Tensor  # (rows, capacity); one row of N = attention_mask.sum() when unbounded
    position_ids: torch.Tensor  # (rows, capacity), restarting at 0 at each sequence's first token
    index: ResponseIndex
    starts: list[int]  # each sequence's first token in the flattened rows


def trim_padding(batch: Batch) -> TrimmedInputs:
    """Drop columns that are padding in every row of this (micro-)batch."""
    attention = batch["attention_mask"]
    prompt_width = batch["input_ids"].shape[1] - batch["responses"].shape[1]
    response_width = batch["responses"].shape[1]
    attended = attention.bool().any(dim=0)
    prompt_attended = torch.nonzero(attended[:prompt_width])
    left = int(prompt_attended[0]) if len(prompt_attended) else prompt_width - 1
    left = min(left, prompt_width - 1)  # keep the column whose logit predicts response token 0
    response_attended = torch.nonzero(attended[prompt_width:])
    kept_response = int(response_attended[-1]) + 1 if len(response_attended) else 1
    right = prompt_width + kept_response
    return TrimmedInputs(
        input_ids=batch["input_ids"][:, left:right],
        attention_mask=attention[:, left:right],
        position_ids=batch["position_ids"][:, left:right],
        responses=batch["responses"][:, :kept_response],
        first_logit=prompt_width - 1 - left,
        response_width=response_width,
    )


def _padded_index(inputs: TrimmedInputs) -> ResponseIndex:
    """The attended response tokens of a trimmed batch, read from the column before each."""
    width = inputs.responses.shape[1]
    response_columns = inputs.attention_mask[:, inputs.first_logit + 1 : inputs.first_logit + 1 + width]
    rows, columns = torch.nonzero(response_columns.bool(), as_tuple=True)
    total = inputs.input_ids.shape[1]
    return ResponseIndex(
        sources=rows * total + inputs.first_logit + columns,
        rows=rows,
        columns=columns,
        targets=inputs.responses[rows, columns],
        shape=(inputs.input_ids.shape[0], inputs.response_width),
    )


def pack_rows(lengths: list[int], capacity: int) -> list[list[int]]:
    """Sequences per packed row, first-fit decreasing: each row's lengths sum to ≤ ``capacity``
    (a sequence longer than ``capacity`` gets a row of its own)."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        fit = next((r for r, free in enumerate(room) if lengths[i] <= free), None)
        if fit is None:
            rows.append([i])
            room.append(capacity - lengths[i])
        else:
            rows[fit].append(i)
            room[fit] -= lengths[i]
    return rows


def pack_sequences(batch: Batch, row_capacity: int | None = None) -> PackedInputs:
    """The attended tokens of every row, packed into rows (module docstring: packed path).

    ``row_capacity`` None puts every sequence in one row; a number packs them into rows of that
    many tokens (``pack_rows``), the tail of a row not full being padding that forms a sequence
    of its own. Positions count each sequence's attended tokens from 0, which is what
    ``collate``'s ``position_ids`` hold there. Response token j of a row is predicted by the
    state of the token before it in the same sequence (its last prompt token for j = 0), so
    every row needs a non-empty prompt.
    """
    attention = batch["attention_mask"].bool()
    total = attention.shape[1]
    width = batch["responses"].shape[1]
    lengths = [int(n) for n in attention.sum(dim=1).tolist()]
    capacity = sum(lengths) if row_capacity is None else max(row_capacity, max(lengths))
    groups = pack_rows(lengths, capacity)
    input_ids = batch["input_ids"].new_zeros((len(groups), capacity))
    device = input_ids.device  # the batch's: the indices below must live beside what they index
    position_ids = torch.zeros_like(input_ids)
    starts = [0] * len(lengths)  # each sequence's first token in the flattened packed rows
    for r, members in enumerate(groups):
        offset = 0
        for i in members:
            length = lengths[i]
            input_ids[r, offset : offset + length] = batch["input_ids"][i][attention[i]]
            position_ids[r, offset : offset + length] = torch.arange(length, device=device)
            starts[i] = r * capacity + offset
            offset += length
        # the tail: padding, a sequence on its own
        position_ids[r, offset:] = torch.arange(capacity - offset, device=device)
    within = attention.long().cumsum(dim=1) - 1  # each attended token's place in its sequence
    rows, columns = torch.nonzero(attention[:, total - width :], as_tuple=True)
    place = within[:, total - width :][rows, columns]
    if bool((place < 1).any()):
        raise ValueError("packing needs at least one attended prompt token before each row's response")
    sources = torch.tensor(starts, dtype=torch.long, device=device)[rows] + place - 1
    index = ResponseIndex(sources, rows, columns, batch["responses"][rows, columns], (len(lengths), width))
    return PackedInputs(input_ids, position_ids, index, starts)


def row_capacity(model: torch.nn.Module, batch: Batch) -> int | None:
    """How long packed rows may be: unbounded (one row) for a variable-length kernel (flash
    attention and ``VARLEN_SDPA`` read the boundaries from the positions). sdpa and eager attend over a dense
    (row × row) mask, so a row of C tokens costs C·(1 + C/α) token-units, α being a decoder
    layer's parameters over 2·hidden (its linear flops per token over attention's per key);
    the capacity, 1 to 4 times the longest sequence in quarter steps, minimises rows × that cost."""
    config = getattr(model, "config", None)
    attention = str(getattr(config, "_attn_implementation", "") or "")
    if attention.startswith("flash") or attention == VARLEN_SDPA:
        return None
    lengths = [int(n) for n in batch["attention_mask"].sum(dim=1).tolist()]
    hidden = getattr(config, "hidden_size", None)
    intermediate = getattr(config, "intermediate_size", None) or 4 * (hidden or 0)
    if not hidden:
        return max(lengths)
    alpha = (4 * hidden * hidden + 3 * hidden * intermediate) / (2 * hidden)

    def cost(capacity: int) -> float:
        return len(pack_rows(lengths, capacity)) * capacity * (1 + capacity / alpha)

    longest = max(lengths)
    return min((longest * quarters // 4 for quarters in range(4, 17)), key=cost)


def model_inputs(
    batch: Batch, packed: bool, row_capacity: int | None = None
) -> tuple[dict[str, torch.Tensor | None], ResponseIndex]:
    """The model's keyword inputs for the padded (trimmed) or the packed layout, and the response index."""
    if packed:
        inputs = pack_sequences(batch, row_capacity)
        # attention_mask=None is what makes transformers read the restarting positions as packing.
        kwargs = {"input_ids": inputs.input_ids, "attention_mask": None, "position_ids": inputs.position_ids}
        return kwargs, inputs.index
    trimmed = trim_padding(batch)
    kwargs = {
        "input_ids": trimmed.input_ids,
        "attention_mask": trimmed.attention_mask,
        "position_ids": trimmed.position_ids,
    }
    return kwargs, _padded_index(trimmed)
