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
ends early stops costing compute.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import DynamicCache

from agentrl.engines.base import FinishReason, GenerationResult, SamplingParams
from agentrl.engines.batching import BatchingEngine
from agentrl.engines.continuous import ContinuousBatcher
from agentrl.engines.requests import check_prompt_fits
from agentrl.engines.sampling import select_tokens
from agentrl.engines.stopping import StopStringMatcher
from agentrl.engines.weights import WeightStream, named_tensors


def _eos_ids_of(model: nn.Module, tokenizer: Any) -> set[int]:
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


class HFEngine(BatchingEngine):
    """Token-in/token-out generation with a transformers causal LM.

    Args:
        model: a ``*ForCausalLM`` module; shared, not copied. Its train/eval mode is
            restored after each generation.
        tokenizer: used to decode continuations for stop strings and for the pad/eos ids.
        max_batch_size: most sequences in one forward (coalescing and ``generate_batch``).
        device: where inputs go; defaults to the device of the model's parameters.
            Passing a different device moves the (shared) model there.
        eos_token_ids: ids that end a sequence with ``finish_reason="eos"``; defaults to
            the tokenizer's eos plus ``model.generation_config.eos_token_id``.
        continuous: ``generate`` requests join and leave one running batch at every decode
            step (``continuous.py``); False (the default until it measures faster, see
            ``benchmarks/rollout_throughput.py``) coalesces them into batches run to completion
            (``batching.py``). ``generate_batch`` (lockstep) always runs its batch at once.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        max_batch_size: int = 64,
        device: str | torch.device | None = None,
        eos_token_ids: Iterable[int] | None = None,
        continuous: bool = False,
    ) -> None:
        super().__init__(max_batch_size)
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch nn.Module, got {type(model).__name__}")
        self.model = model
        self.tokenizer = tokenizer
        param = next(model.parameters())
        if device is not None and torch.device(device) != param.device:
            model.to(device)
        self.device = torch.device(device) if device is not None else param.device
        self.eos_token_ids = (
            set(eos_token_ids) if eos_token_ids is not None else _eos_ids_of(model, tokenizer)
        )
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else 0  # pad positions are masked anyway
        config = getattr(model, "config", None)
        self.vocab_size = int(getattr(config, "vocab_size", 0)) or None
        self.max_positions = getattr(config, "max_position_embeddings", None)
        self._supports_logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._continuous = ContinuousBatcher(self) if continuous else None
        self._released_shapes: dict[str, torch.Size] | None = None  # set while asleep without weights
        self._awaiting_weights = False  # woke from such a sleep; update_weights not yet called

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

    def metrics(self) -> dict[str, float]:
        metrics = super().metrics()
        if self._continuous is not None:
            metrics["engine/decode_steps"] = float(self._continuous.decode_steps)
        return metrics

    # ------------------------------------------------------------------ decoding
    def _validate_prompt(self, prompt_ids: list[int]) -> None:
        if self._released_shapes is not None or self._awaiting_weights:
            raise RuntimeError(
                "HFEngine released its weights in sleep(release_weights=True): "
                "call wake_up() and then update_weights() before generating"
            )
        super()._validate_prompt(prompt_ids)
        check_prompt_fits(
            prompt_ids, self.vocab_size, self.max_positions, "the model's max_position_embeddings"
        )

    @contextmanager
    def _eval_mode(self):
        was_training = self.model.training
        self.model.eval()
        try:
            yield
        finally:
            self.model.train(was_training)

    def _forward(self, input_ids, attention_mask, position_ids, cache, last_only: bool) -> torch.Tensor:
        kwargs: dict[str, Any] = {}
        if last_only and self._supports_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            **kwargs,
        )
        return out.logits[:, -1, :]

    def left_padded(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``input_ids``, ``attention_mask`` and ``position_ids`` of left-padded prompts, on the
        engine's device; positions count real tokens only, so padding does not shift a row."""
        n, width = len(prompts), max(len(p) for p in prompts)
        input_ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((n, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[i, width - len(p) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        return input_ids, attention, (attention.cumsum(-1) - 1).clamp(min=0)

    def row_generator(self, seed: int) -> torch.Generator:
        """A row's own sampling generator: on the GPU when the engine is there, else on the CPU."""
        device = self.device if self.device.type == "cuda" else torch.device("cpu")
        return torch.Generator(device=device).manual_seed(seed)

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

    @torch.inference_mode()
    def _generate_rows(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int]
    ) -> list[GenerationResult]:
        n = len(prompts)
        dev = self.device
        input_ids, attention, positions = self.left_padded(prompts)
        next_pos = positions[:, -1] + 1
        budget = [self.token_budget(p, params) for p in prompts]
        generators = [self.row_generator(s) for s in seeds]
        matchers = [StopStringMatcher(self.tokenizer, params.stop) for _ in range(n)]
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lp: list[list[float]] = [[] for _ in range(n)]
        finish: list[FinishReason | None] = [None] * n
        stop_hit: list[str | None] = [None] * n
        active = list(range(n))  # original row index of each batch row still running

        with self._eval_mode():
            cache = DynamicCache(config=getattr(self.model, "config", None))
            logits = self._forward(input_ids, attention, positions, cache, last_only=True)
            while True:
                tokens, log_probs = select_tokens(logits, params, [generators[r] for r in active])
                tok_list, lp_list = tokens.tolist(), log_probs.tolist()
                keep: list[int] = []
                for b, row in enumerate(active):
                    tok = tok_list[b]
                    out_ids[row].append(tok)
                    out_lp[row].append(lp_list[b])
                    produced = len(out_ids[row])
                    finish[row], stop_hit[row] = self.finish_of(tok, matchers[row], produced, budget[row])
                    if finish[row] is None:
                        keep.append(b)
                if not keep:
                    break
                if len(keep) < len(active):
                    idx = torch.tensor(keep, device=dev)
                    cache.batch_select_indices(idx)
                    attention, next_pos, tokens = attention[idx], next_pos[idx], tokens[idx]
                    active = [active[b] for b in keep]
                attention = torch.cat([attention, attention.new_ones((len(active), 1))], dim=1)
                logits = self._forward(tokens[:, None], attention, next_pos[:, None], cache, last_only=True)
                next_pos = next_pos + 1

        return [
            GenerationResult(
                token_ids=out_ids[i],
                log_probs=out_lp[i],
                finish_reason=finish[i] or "length",
                stop_string=stop_hit[i],
            )
            for i in range(n)
        ]
