"""The decoding step of a transformers causal LM, shared by the HF engine's two loops.

The batch-at-once loop (``hf.py``) and continuous batching (``continuous.py``) do the same
things per step and per row: left-pad prompts with positions that count real tokens only (so
a padded row computes exactly what it would alone), run a forward that keeps only the last
position's logits, sample with the row's own seeded generator, and decide whether the row
ends (eos, a stop string, its token budget). ``CausalLMDecoder`` holds the model and these
rules; each loop only schedules rows over it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from transformers import DynamicCache

from agentrl.engines.base import FinishReason, SamplingParams
from agentrl.engines.stopping import StopStringMatcher


def eos_ids_of(model: nn.Module, tokenizer: Any) -> set[int]:
    """Every id that ends a sequence: the tokenizer's eos and the generation config's."""
    ids: set[int] = set()
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_cfg = getattr(model, "generation_config", None)
    cfg_eos = getattr(gen_cfg, "eos_token_id", None) if gen_cfg is not None else None
    if isinstance(cfg_eos, int):
        ids.add(cfg_eos)
    elif isinstance(cfg_eos, Iterable):
        ids.update(int(i) for i in cfg_eos)
    return ids


class CausalLMDecoder:
    """A causal LM on ``device`` and the per-row rules of decoding it.

    Args:
        model: a ``*ForCausalLM`` module (already on ``device``).
        tokenizer: decodes continuations for stop strings; gives the pad id.
        device: where inputs go.
        eos_token_ids: ids that end a sequence; None: the tokenizer's eos plus
            ``model.generation_config.eos_token_id``.
    """

    def __init__(
        self, model: nn.Module, tokenizer: Any, device: torch.device, eos_token_ids: Iterable[int] | None
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.eos_token_ids = set(eos_token_ids) if eos_token_ids is not None else eos_ids_of(model, tokenizer)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else 0  # pad positions are masked anyway
        config = getattr(model, "config", None)
        self.vocab_size = int(getattr(config, "vocab_size", 0)) or None
        self.max_positions = getattr(config, "max_position_embeddings", None)
        self._supports_logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters

    # ------------------------------------------------------------------ the batch
    @contextmanager
    def eval_mode(self) -> Iterator[None]:
        """The model in eval mode for the block; its train/eval mode is restored after."""
        was_training = self.model.training
        self.model.eval()
        try:
            yield
        finally:
            self.model.train(was_training)

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=getattr(self.model, "config", None))

    def left_padded(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``input_ids``, ``attention_mask`` and ``position_ids`` of left-padded prompts, on the
        decoder's device; positions count real tokens only, so padding does not shift a row."""
        n, width = len(prompts), max(len(p) for p in prompts)
        input_ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((n, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[i, width - len(p) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        return input_ids, attention, (attention.cumsum(-1) - 1).clamp(min=0)

    def next_token_logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: DynamicCache,
    ) -> torch.Tensor:
        """One forward that extends ``cache``; the logits of each row's last position ``(B, V)``
        (only those are computed when the model takes ``logits_to_keep``)."""
        kwargs: dict[str, Any] = {"logits_to_keep": 1} if self._supports_logits_to_keep else {}
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            **kwargs,
        )
        return out.logits[:, -1, :]

    # ------------------------------------------------------------------ one row
    def row_generator(self, seed: int) -> torch.Generator:
        """A row's own sampling generator: on the GPU when the model is there, else on the CPU."""
        device = self.device if self.device.type == "cuda" else torch.device("cpu")
        return torch.Generator(device=device).manual_seed(seed)

    def stop_matcher(self, params: SamplingParams) -> StopStringMatcher:
        """A row's matcher of ``params.stop`` on its decoded continuation."""
        return StopStringMatcher(self.tokenizer, params.stop)

    def token_budget(self, prompt: list[int], params: SamplingParams) -> int:
        """New tokens a row may take: ``max_new_tokens``, capped by the model's positions."""
        if self.max_positions is None:
            return params.max_new_tokens
        return min(params.max_new_tokens, self.max_positions - len(prompt))

    def finish_of(
        self, token: int, matcher: StopStringMatcher, produced: int, budget: int
    ) -> tuple[FinishReason | None, str | None]:
        """Why a row ends after sampling ``token`` (its ``produced``-th) and the stop string hit;
        (None, None) while it goes on."""
        hit = matcher.push(token)
        if token in self.eos_token_ids:
            return "eos", None
        if hit is not None:
            return "stop", hit
        if produced >= budget:
            return "length", None
        return None, None
