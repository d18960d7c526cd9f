"""The transformers engine: our own batched decoding loop over any causal LM.

Runs on CPU and GPU and is the default for tests and the quickstart. It holds the very
``nn.Module`` the trainer optimises (no copy, so no weight sync is needed when
colocated); ``update_weights`` streams weights in place for the case where it was
given a separate copy.

Why not ``model.generate``: we need per-token log-probs under one fixed convention
(``base.py``), stop strings matched on the decoded continuation without re-tokenizing,
per-row seeded generators, and rows leaving the batch as soon as they finish.

The loop: left-pad the prompts, build ``attention_mask`` and ``position_ids`` from the
real tokens only (so a padded row computes exactly what it would alone), prefill into
a ``DynamicCache``, then one token per step for the rows still running. Finished rows
are dropped from the batch and the KV cache (``batch_select_indices``), so a turn that
ends early stops costing compute. The step itself (padding, forward, a row's generator,
budget and end) is ``decoding.py``'s, shared with continuous batching (``continuous.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentrl.engines.base import FinishReason, GenerationResult, SamplingParams
from agentrl.engines.batching import BatchingEngine
from agentrl.engines.continuous import ContinuousBatcher
from agentrl.engines.decoding import CausalLMDecoder
from agentrl.engines.requests import check_prompt_fits
from agentrl.engines.sampling import select_tokens
from agentrl.engines.weights import WeightStream, named_tensors


class HFEngine(BatchingEngine):
    """Token-in/token-out generation with a transformers causal LM.

    Args:
        model: a ``*ForCausalLM`` module; shared, not copied. Its train/eval mode is
            restored after each generation (continuous batching: when its batch drains).
        tokenizer: used to decode continuations for stop strings and for the pad/eos ids.
        max_batch_size: most sequences in one forward (the running batch, a coalesced one,
            a chunk of ``generate_batch``).
        device: where inputs go; defaults to the device of the model's parameters.
            Passing a different device moves the (shared) model there.
        eos_token_ids: ids that end a sequence with ``finish_reason="eos"``; defaults to
            the tokenizer's eos plus ``model.generation_config.eos_token_id``.
        continuous: ``generate`` requests join and leave one running batch at every decode
            step (``continuous.py``, the default: it keeps the batch full where coalescing runs
            small batches to completion, ``docs/scaling.md``); False coalesces them into batches
            run to completion (``batching.py``). ``generate_batch`` (lockstep) runs its batch
            the same way in both: in chunks of ``max_batch_size``, each to completion.
        recompute_on_new_weights: with continuous batching, the sequences being decoded when
            ``update_weights`` loads new weights are re-prefilled under them before the next
            decode step (``ContinuousBatcher.recompute``), so every later token is the new
            weights' alone; False keeps the KV cache the old weights computed.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        max_batch_size: int = 64,
        device: str | torch.device | None = None,
        eos_token_ids: Iterable[int] | None = None,
        continuous: bool = True,
        recompute_on_new_weights: bool = False,
    ) -> None:
        super().__init__(max_batch_size)
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch nn.Module, got {type(model).__name__}")
        param = next(model.parameters())
        if device is not None and torch.device(device) != param.device:
            model.to(device)
        device = torch.device(device) if device is not None else param.device
        self.decoder = CausalLMDecoder(model, tokenizer, device, eos_token_ids)
        self._continuous: ContinuousBatcher | None = None
        if continuous:
            self._continuous = ContinuousBatcher(self.decoder, self.stats, self._exec_lock, max_batch_size)
        elif recompute_on_new_weights:
            raise ValueError(
                "recompute_on_new_weights needs continuous=True: a coalesced batch runs to completion "
                "on the weights it started with"
            )
        self._recompute_on_new_weights = recompute_on_new_weights
        self._released_shapes: dict[str, torch.Size] | None = None  # set while asleep without weights
        self._awaiting_weights = False  # woke from such a sleep; update_weights not yet called

    @property
    def model(self) -> nn.Module:
        return self.decoder.model

    @property
    def tokenizer(self) -> Any:
        return self.decoder.tokenizer

    @property
    def device(self) -> torch.device:
        return self.decoder.device

    @classmethod
    def from_pretrained(
        cls, path: str | Path, dtype: torch.dtype | str = "auto", device: str = "cpu", **kwargs: Any
    ) -> HFEngine:
        """Load a model directory and wrap it (for serving/evaluation without a trainer)."""
        from agentrl.models.loading import load_causal_lm, load_tokenizer

        return cls(
            load_causal_lm(path, dtype=dtype, device=device), load_tokenizer(path), device=device, **kwargs
        )

    # ------------------------------------------------------------------ Engine API
    def update_weights(self, weights: WeightStream) -> None:
        """Copy new weights into the engine's module in place, tensor by tensor as the stream
        yields them (``weights.py``); every weight must arrive, under the module's own names."""
        targets = self.model.state_dict()
        arrived: set[int] = set()  # storages, so tied weights count once under either name
        with self._exec_lock, torch.no_grad():
            for name, tensor in named_tensors(weights):
                target = targets.get(name)
                if target is None:
                    raise KeyError(f"update_weights: {name!r} is not a weight of the engine's model")
                if target.shape != tensor.shape:
                    raise ValueError(
                        f"update_weights: {name!r} has shape {tuple(tensor.shape)}, "
                        f"the engine's model expects {tuple(target.shape)}"
                    )
                target.copy_(tensor)
                arrived.add(target.data_ptr())
        missing = [name for name, t in targets.items() if t.data_ptr() not in arrived]
        if missing:
            raise ValueError(
                f"update_weights: {len(missing)} weights never arrived (first: {missing[:3]}); "
                "the engine now mixes old and new weights"
            )
        self._awaiting_weights = False
        if self._recompute_on_new_weights:
            self._continuous.weights_changed()

    def sleep(self, release_weights: bool = False) -> int:
        """Free the engine's own weight copy when the caller will resend it (``release_weights``;
        never for a module shared with the trainer); returns the bytes freed."""
        freed = 0
        if release_weights and self._released_shapes is None:
            with self._exec_lock:
                self._released_shapes = {}
                for name, param in self.model.named_parameters():  # tied weights appear once
                    self._released_shapes[name] = param.shape
                    freed += param.numel() * param.element_size()
                    param.data = torch.empty(0, dtype=param.dtype, device=param.device)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return freed

    def wake_up(self) -> None:
        """Re-allocate released weights; generation waits for ``update_weights`` to fill them."""
        if self._released_shapes is None:
            return
        with self._exec_lock:
            for name, param in self.model.named_parameters():
                shape = self._released_shapes[name]
                param.data = torch.empty(shape, dtype=param.dtype, device=param.device)
            self._released_shapes = None
            self._awaiting_weights = True

    def shutdown(self) -> None:
        self._stop_worker()
        if self._continuous is not None:
            self._continuous.close()

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        """One continuation; it joins the running batch at the next decode step (``continuous``)."""
        if self._continuous is None:
            return await super().generate(prompt_ids, params)
        params, seed = self._checked_request(prompt_ids, params)
        return await self._continuous.submit(prompt_ids, params, seed)

    # ------------------------------------------------------------------ decoding
    def _validate_prompt(self, prompt_ids: list[int]) -> None:
        if self._released_shapes is not None or self._awaiting_weights:
            raise RuntimeError(
                "HFEngine released its weights in sleep(release_weights=True): "
                "call wake_up() and then update_weights() before generating"
            )
        super()._validate_prompt(prompt_ids)
        decoder = self.decoder
        check_prompt_fits(
            prompt_ids, decoder.vocab_size, decoder.max_positions, "the model's max_position_embeddings"
        )

    @torch.inference_mode()
    def _generate_rows(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int]
    ) -> list[GenerationResult]:
        n = len(prompts)
        decoder = self.decoder
        input_ids, attention, positions = decoder.left_padded(prompts)
        next_pos = positions[:, -1] + 1
        budget = [decoder.token_budget(p, params) for p in prompts]
        generators = [decoder.row_generator(s) for s in seeds]
        matchers = [decoder.stop_matcher(params) for _ in range(n)]
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lp: list[list[float]] = [[] for _ in range(n)]
        finish: list[FinishReason | None] = [None] * n
        stop_hit: list[str | None] = [None] * n
        active = list(range(n))  # original row index of each batch row still running
        kind, fed = "prefill", int(attention.sum())  # what the forward below is, its real tokens

        with decoder.eval_mode():
            cache = decoder.new_cache()
            started = time.perf_counter()
            logits = decoder.next_token_logits(input_ids, attention, positions, cache)
            while True:
                tokens, log_probs = select_tokens(logits, params, [generators[r] for r in active])
                tok_list, lp_list = tokens.tolist(), log_probs.tolist()
                keep: list[int] = []
                for b, row in enumerate(active):
                    tok = tok_list[b]
                    out_ids[row].append(tok)
                    out_lp[row].append(lp_list[b])
                    produced = len(out_ids[row])
                    finish[row], stop_hit[row] = decoder.finish_of(tok, matchers[row], produced, budget[row])
                    if finish[row] is None:
                        keep.append(b)
                now = time.perf_counter()
                self.stats.count_forward(kind, len(active), now - started, fed)
                started = now
                if not keep:
                    break
                if len(keep) < len(active):
                    idx = torch.tensor(keep, device=decoder.device)
                    cache.batch_select_indices(idx)
                    attention, next_pos, tokens = attention[idx], next_pos[idx], tokens[idx]
                    active = [active[b] for b in keep]
                attention = torch.cat([attention, attention.new_ones((len(active), 1))], dim=1)
                logits = decoder.next_token_logits(tokens[:, None], attention, next_pos[:, None], cache)
                next_pos = next_pos + 1
                kind, fed = "decode", len(active)

        return [
            GenerationResult(
                token_ids=out_ids[i],
                log_probs=out_lp[i],
                finish_reason=finish[i] or "length",
                stop_string=stop_hit[i],
            )
            for i in range(n)
        ]
