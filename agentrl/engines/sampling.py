"""Next-token selection for engines that run their own decoding loop (the HF engine).

Kept apart from the loop so the log-prob convention of ``base.py`` lives in one place:
the reported log-prob is ``log_softmax(logits / temperature)[id]`` computed *before*
top-k / top-p truncation (temperature 1 when greedy), while the token itself is drawn
from the truncated distribution.
"""

from __future__ import annotations

import torch

from agentrl.engines.base import SamplingParams


def truncate_logits(scaled_logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to -inf) every token outside the top-k and outside the top-p nucleus.

    ``scaled_logits`` is ``(B, V)`` and already divided by the temperature. At least
    the most likely token always survives.
    """
    logits = scaled_logits
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Mass strictly before each token; a token is kept while that mass is < top_p,
        # so the token that crosses top_p is included and the first is always kept.
        mass_before = torch.cumsum(probs, dim=-1) - probs
        remove_sorted = mass_before >= top_p
        remove = torch.zeros_like(remove_sorted).scatter(-1, sorted_idx, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits


def select_tokens(
    logits: torch.Tensor, params: SamplingParams, generators: list[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of ``logits`` ``(B, V)``; return ``(token_ids, log_probs)``.

    Each row draws from its own generator so a sequence's sample does not depend on
    which other sequences share its batch (a seeded request is reproducible whether it
    ran alone or coalesced with others).
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be (batch, vocab), got shape {tuple(logits.shape)}")
    if len(generators) != logits.shape[0]:
        raise ValueError(f"need one generator per row: {len(generators)} for {logits.shape[0]} rows")
    logits = logits.float()
    if params.greedy:
        log_probs = torch.log_softmax(logits, dim=-1)
        tokens = logits.argmax(dim=-1)
    else:
        scaled = logits / params.temperature
        log_probs = torch.log_softmax(scaled, dim=-1)
        probs = torch.softmax(truncate_logits(scaled, params.top_k, params.top_p), dim=-1)
        tokens = torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(generators)])
    return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)
