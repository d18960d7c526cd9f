"""Forward passes over a rollout batch: per-response-token log-probs, entropy and values.

Batch layout (from ``agentrl.agent.collate.collate``): ``input_ids`` is the left-padded
prompt (width P) followed by the right-padded response (width R). The logit that predicts
response token j sits at column P − 1 + j, so every quantity here is read from columns
[P − 1, P + R − 1) and comes back as ``(B, R)``. Values at padding positions are
unspecified (callers reduce under ``response_mask``).

Micro-batches are trimmed of columns that are padding in every row (left of the longest
prompt, right of the longest response), so a micro-batch of short sequences costs what
its own lengths cost, not the batch's widest row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from agentrl.core.batch import Batch
from agentrl.core.losses import entropy_from_logits, log_probs_from_logits


@dataclass
class TrimmedInputs:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    responses: torch.Tensor  # (b, r) with r <= R
    first_logit: int  # column of the logit that predicts response token 0
    response_width: int  # R of the untrimmed batch, to pad results back


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


def _pad_right(values: torch.Tensor, width: int) -> torch.Tensor:
    if values.shape[1] == width:
        return values
    return torch.nn.functional.pad(values, (0, width - values.shape[1]))


def policy_forward(
    model: torch.nn.Module,
    batch: Batch,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(a_j | context) / T-scaled, and optionally entropy, for every response token: (b, R).

    ``entropy_grad=False`` computes the entropy as a metric only: under ``no_grad``, so its
    (tokens × vocabulary) softmax is freed at once instead of staying in the autograd graph.
    """
    inputs = trim_padding(batch)
    logits = model(
        input_ids=inputs.input_ids,
        attention_mask=inputs.attention_mask,
        position_ids=inputs.position_ids,
        use_cache=False,
    ).logits
    width = inputs.responses.shape[1]
    response_logits = logits[:, inputs.first_logit : inputs.first_logit + width].float() / temperature
    log_probs = log_probs_from_logits(response_logits, inputs.responses)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = entropy_from_logits(response_logits if entropy_grad else response_logits.detach())
    return (
        _pad_right(log_probs, inputs.response_width),
        _pad_right(entropy, inputs.response_width) if entropy is not None else None,
    )


def value_forward(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """V(s_j) for the state before each response token: (b, R)."""
    inputs = trim_padding(batch)
    values = model(
        input_ids=inputs.input_ids, attention_mask=inputs.attention_mask, position_ids=inputs.position_ids
    )
    width = inputs.responses.shape[1]
    return _pad_right(
        values[:, inputs.first_logit : inputs.first_logit + width].float(), inputs.response_width
    )


def micro_batches(batch: Batch, micro_batch_size: int, max_tokens: int | None = None) -> Iterator[Batch]:
    """Fixed-size micro-batches, or (``max_tokens`` set) groups whose padded cost stays under the budget.

    The token budget counts rows × the longest attended length in the group, which is
    what a trimmed forward pass costs; a single row longer than the budget still forms
    its own micro-batch.
    """
    if max_tokens is None:
        yield from batch.split(micro_batch_size)
        return
    lengths = batch["attention_mask"].sum(dim=-1).tolist()
    start, longest = 0, 0
    for i, length in enumerate(lengths):
        candidate = max(longest, int(length))
        if i > start and candidate * (i - start + 1) > max_tokens:
            yield batch.index(slice(start, i))
            start, candidate = i, int(length)
        longest = candidate
    if start < len(lengths):
        yield batch.index(slice(start, len(lengths)))


def no_grad_over_micro_batches(
    fn: Callable[[Batch], torch.Tensor], batch: Batch, micro_batch_size: int, max_tokens: int | None = None
) -> torch.Tensor:
    """Apply ``fn`` to each micro-batch without gradients and concatenate along the batch."""
    with torch.no_grad():
        return torch.cat([fn(mb) for mb in micro_batches(batch, micro_batch_size, max_tokens)], dim=0)
