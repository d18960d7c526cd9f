"""Forward passes over a rollout batch: per-response-token log-probs, entropy and values.

Every result comes back as ``(B, R)``, one value per response token (``collate``'s layout);
the policy's log-probs and entropy are 0 at padding, values there are unspecified (callers
reduce under ``response_mask``).

Layouts (``agentrl.models.layout``): the padded one trimmed of all-padding columns, or the
packed one (``packed=True``), sequences several to a row with restarting position ids; the
results are the same.

Vocabulary projection (policy): the model is called with ``logits_to_keep=1`` and the
decoder's output states (final norm applied) are taken with a forward hook, so the full
(tokens × vocabulary) logits are never built. Only the attended response positions are
projected, ``chunk_tokens`` at a time, each chunk's logits in fp32 and, when gradients are
needed, under activation checkpointing, so no chunk's logits are kept for backward (they
are recomputed there). Models whose logits are not ``lm_head(hidden)`` take the plain
full-logits path (``_output_head``).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from agentrl.core.batch import Batch
from agentrl.core.losses import entropy_from_logits, log_probs_from_logits
from agentrl.models.layout import model_inputs, row_capacity, trim_padding

# Config attributes of architectures whose logits are transformed after the LM head
# (Gemma-2/3 softcapping, Cohere and Granite scaling): those take the full-logits path.
_LOGIT_CAPS = ("final_logit_softcapping",)
_LOGIT_SCALES = ("logit_scale", "logits_scaling")
# Per model: does lm_head(decoder output) reproduce the logits the model itself returns?
# Checked once on the first call, so an architecture with an unlisted transform falls back too.
_HEAD_VERIFIED: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()


def _output_head(model: torch.nn.Module) -> torch.nn.Linear | None:
    """The LM head when the logits are ``lm_head(decoder output)``, else None (full-logits path).

    None for: configs with a logit softcap or scale; models without ``get_decoder`` /
    ``get_output_embeddings``, or whose head is not an ``nn.Linear``; forwards without
    ``logits_to_keep``; models whose first call showed a mismatch (``_HEAD_VERIFIED``).
    """
    config = getattr(model, "config", None)
    if any(getattr(config, key, None) is not None for key in _LOGIT_CAPS):
        return None
    if any(getattr(config, key, None) not in (None, 1, 1.0) for key in _LOGIT_SCALES):
        return None
    if not (hasattr(model, "get_decoder") and hasattr(model, "get_output_embeddings")):
        return None
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear) or model.get_decoder() is model:
        return None
    # A peft wrapper passes keyword arguments through to the model it adapts.
    forward = model.get_base_model().forward if hasattr(model, "get_base_model") else model.forward
    if "logits_to_keep" not in inspect.signature(forward).parameters:
        return None
    return None if _HEAD_VERIFIED.get(model) is False else head


def _decoder_states(
    model: torch.nn.Module, head: torch.nn.Linear, inputs: dict[str, torch.Tensor | None]
) -> torch.Tensor | None:
    """The decoder's output states (b, T, H) from a root-model call that computes one position's
    logits; None when the head cannot reproduce the model's logits.

    The root model is called, not its decoder, so hooks a wrapper put on the root (FSDP2's
    ``fully_shard`` gathers parameters there) still run; the states come from a forward hook.
    """
    captured: list[torch.Tensor] = []

    def keep(_module: torch.nn.Module, _args: object, output: object) -> None:
        captured.append(output[0] if isinstance(output, tuple) else output.last_hidden_state)

    handle = model.get_decoder().register_forward_hook(keep)
    try:
        logits = model(**inputs, use_cache=False, logits_to_keep=1).logits
    finally:
        handle.remove()
    # No capture: the root did not run its decoder. A tensor subclass as the head's weight: a
    # DTensor shard (FSDP2 resharded the root after forward), which cannot project plain states.
    if not captured or type(head.weight) not in (torch.Tensor, torch.nn.Parameter):
        return None
    return captured[-1] if _head_reproduces(model, head, captured[-1], logits) else None


def _head_reproduces(
    model: torch.nn.Module, head: torch.nn.Linear, states: torch.Tensor, logits: torch.Tensor
) -> bool:
    """Whether ``head(states)`` at the last position equals the model's own logits there (cached)."""
    if model not in _HEAD_VERIFIED:
        with torch.no_grad():
            ours = F.linear(states[:, -1], head.weight, head.bias).float()
            theirs = logits[:, -1].float()
            tolerance = 1e-2 * float(theirs.abs().max()) + 1e-5  # loose enough for bf16 rounding
            _HEAD_VERIFIED[model] = bool((ours - theirs).abs().max() <= tolerance)
    return _HEAD_VERIFIED[model]


def _chunk_stats(
    states: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each target (and entropy) from hidden states (``weight`` given) or from logits."""
    logits = states if weight is None else F.linear(states, weight, bias)
    logits = logits.float() / temperature
    log_probs = log_probs_from_logits(logits, targets)
    # The entropy comes last: under checkpointing, recomputation stops once the log-probs'
    # saved tensors exist again, so a metric-only entropy is never recomputed.
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    return log_probs, entropy


def _token_stats(
    states: torch.Tensor,
    targets: torch.Tensor,
    head: torch.nn.Linear | None,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool,
    chunk_tokens: int | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``_chunk_stats`` over (n, ·) states, ``chunk_tokens`` rows at a time (None: one piece).

    With gradients, chunks run under non-reentrant checkpointing: backward keeps each chunk's
    inputs only and recomputes its (tokens × vocabulary) logits when it reaches it.
    """
    if chunk_tokens is not None and chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1 or None, got {chunk_tokens}")
    weight, bias = (head.weight, head.bias) if head is not None else (None, None)
    size = max(chunk_tokens or len(targets), 1)
    needs_grad = torch.is_grad_enabled() and (
        states.requires_grad or (weight is not None and weight.requires_grad)
    )
    recompute = needs_grad and chunk_tokens is not None
    log_probs, entropies = [], []
    for start in range(0, max(len(targets), 1), size):
        args = (states[start : start + size], targets[start : start + size], weight, bias)
        options = (temperature, with_entropy, entropy_grad)
        if recompute:
            chunk = checkpoint(_chunk_stats, *args, *options, use_reentrant=False)
        else:
            chunk = _chunk_stats(*args, *options)
        log_probs.append(chunk[0])
        entropies.append(chunk[1])
    entropy = torch.cat(entropies) if with_entropy else None
    return torch.cat(log_probs), entropy


def policy_forward(
    model: torch.nn.Module,
    batch: Batch,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    *,
    chunk_tokens: int | None = 1024,
    packed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(a_j | context) / T-scaled, and optionally entropy, for every response token: (b, R).

    ``entropy_grad=False`` computes the entropy as a metric only: without a graph, so its
    (tokens × vocabulary) softmax is freed at once instead of staying in the autograd graph.
    ``chunk_tokens`` response tokens are projected to the vocabulary at a time (None: all
    at once, nothing recomputed: fastest, most memory). ``packed`` computes on the packed
    row (module docstring); the results are the same.
    """
    inputs, index = model_inputs(batch, packed, row_capacity(model, batch) if packed else None)
    head = _output_head(model)
    states = _decoder_states(model, head, inputs) if head is not None else None
    if states is None:  # the plain path: the model's own full logits
        head = None
        states = model(**inputs, use_cache=False).logits
    log_probs, entropy = _token_stats(
        states.flatten(0, 1)[index.sources],
        index.targets,
        head,
        temperature,
        with_entropy,
        entropy_grad,
        chunk_tokens,
    )
    return index.scatter(log_probs), index.scatter(entropy) if entropy is not None else None


def value_forward(model: torch.nn.Module, batch: Batch, *, packed: bool = False) -> torch.Tensor:
    """V(s_j) for the state before each response token: (b, R); ``packed`` as in ``policy_forward``."""
    if packed:
        inputs, index = model_inputs(batch, True, row_capacity(getattr(model, "backbone", model), batch))
        values = model(**inputs)
        return index.scatter(values.flatten()[index.sources].float())
    inputs = trim_padding(batch)
    values = model(
        input_ids=inputs.input_ids, attention_mask=inputs.attention_mask, position_ids=inputs.position_ids
    )
    width = inputs.responses.shape[1]
    return _pad_right(
        values[:, inputs.first_logit : inputs.first_logit + width].float(), inputs.response_width
    )


def _pad_right(values: torch.Tensor, width: int) -> torch.Tensor:
    if values.shape[1] == width:
        return values
    return torch.nn.functional.pad(values, (0, width - values.shape[1]))


def micro_batches(
    batch: Batch, micro_batch_size: int, max_tokens: int | None = None, packed: bool = False
) -> Iterator[Batch]:
    """Fixed-size micro-batches, or (``max_tokens`` set) groups whose cost stays under the budget.

    The token budget counts what a forward pass of the group computes: rows × the longest
    attended length for the trimmed padded layout, the sum of attended lengths when
    ``packed``. A single row longer than the budget still forms its own micro-batch.
    """
    if max_tokens is None:
        yield from batch.split(micro_batch_size)
        return
    lengths = [int(n) for n in batch["attention_mask"].sum(dim=-1).tolist()]
    start, longest, total = 0, 0, 0
    for i, length in enumerate(lengths):
        longest, total = max(longest, length), total + length
        cost = total if packed else longest * (i - start + 1)
        if i > start and cost > max_tokens:
            yield batch.index(slice(start, i))
            start, longest, total = i, length, length
    if start < len(lengths):
        yield batch.index(slice(start, len(lengths)))


def no_grad_over_micro_batches(
    fn: Callable[[Batch], torch.Tensor],
    batch: Batch,
    micro_batch_size: int,
    max_tokens: int | None = None,
    packed: bool = False,
) -> torch.Tensor:
    """Apply ``fn`` to each micro-batch without gradients and concatenate along the batch.

    ``packed``: budget ``max_tokens`` by real tokens (``micro_batches``), for an ``fn`` that
    computes on packed rows.
    """
    with torch.no_grad():
        groups = micro_batches(batch, micro_batch_size, max_tokens, packed)
        return torch.cat([fn(mb) for mb in groups], dim=0)
