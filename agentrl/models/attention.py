"""Variable-length causal attention for packed rows, on kernels that have none (sdpa on CPU).

A packed row holds several sequences one after another, position ids restarting at 0 at each
(``agentrl.models.layout``). Flash attention reads those boundaries and attends within each
sequence; PyTorch's sdpa has no such mode, so transformers hands it a dense block-diagonal
(row × row) mask: attention over a row of C tokens costs C², most of it masked out, and the
mask is built per forward. ``VARLEN_SDPA`` is an attention implementation, registered with
transformers' ``AttentionInterface``, that splits each packed row at the restarts and runs
sdpa causally on every sequence: cost Σ Lᵢ², no mask, the same result. Everything that is not
a packed row (a padding mask, a KV cache, a row holding one sequence) goes to transformers'
own sdpa function unchanged.

``use_varlen_attention(model)`` switches an sdpa model to it; ``row_capacity`` then packs
everything into one row, as under flash attention.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

VARLEN_SDPA = "agentrl_varlen_sdpa"


def sequence_bounds(position_ids: torch.Tensor) -> list[list[tuple[int, int]]]:
    """Per row, the ``(start, end)`` columns of each sequence: a new one wherever the position
    does not follow the previous one (``position[c] != position[c-1] + 1``)."""
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
    width = position_ids.shape[1]
    bounds = []
    for row in starts.tolist():
        firsts = [c for c, first in enumerate(row) if first]
        bounds.append(list(zip(firsts, firsts[1:] + [width], strict=True)))
    return bounds


def varlen_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention in transformers' interface: (b, heads, s, d) in, (b, s, heads, d) out.

    A row whose positions restart is split at the restarts and each sequence attends causally
    to itself only (Σ Lᵢ² instead of a dense C² mask); anything else is plain sdpa.
    """
    position_ids = kwargs.get("position_ids")
    plain = attention_mask is not None or position_ids is None or query.shape[2] != key.shape[2]
    bounds = None if plain else sequence_bounds(position_ids)
    if bounds is None or all(len(row) == 1 for row in bounds):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    window = kwargs.get("sliding_window")
    longest = max(end - start for row in bounds for start, end in row)
    if window is not None and longest > window:
        raise ValueError(
            f"packed attention: a sequence of {longest} tokens is longer than the model's sliding "
            f"window ({window}); set pack_sequences=false for this model"
        )
    kwargs = {k: v for k, v in kwargs.items() if k not in ("position_ids", "is_causal")}
    rows = []
    for r, row in enumerate(bounds):
        pieces = [
            sdpa_attention_forward(
                module,
                query[r : r + 1, :, start:end],
                key[r : r + 1, :, start:end],
                value[r : r + 1, :, start:end],
                None,
                is_causal=True,
                **kwargs,
            )[0]
            for start, end in row
        ]
        rows.append(torch.cat(pieces, dim=1))
    return torch.cat(rows, dim=0), None


def _varlen_mask(*args, attention_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor | None:
    """No mask for packed rows (the attention reads the positions); sdpa's mask for padded ones."""
    if attention_mask is None:
        return None
    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


AttentionInterface.register(VARLEN_SDPA, varlen_sdpa_forward)
AttentionMaskInterface.register(VARLEN_SDPA, _varlen_mask)


def use_varlen_attention(model: torch.nn.Module) -> bool:
    """Switch a model that attends with sdpa to ``VARLEN_SDPA``; True if it now uses it.

    Models on flash attention (variable length already) or eager (kept for debugging) and
    models that cannot switch implementation are left as they are.
    """
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current == VARLEN_SDPA:
        return True
    if current != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return False
    model.set_attn_implementation(VARLEN_SDPA)
    return config._attn_implementation == VARLEN_SDPA
