"""Which engine serves the actor's rollout, and building it: the one place that choice is made.

Three cases, decided once from the run's settings (``choose_engine``):

* ``hf`` **sharing the training module** (dp, no one-step-off, no LoRA): the engine generates
  with the very module the optimiser steps, so it never needs a weight sync;
* ``hf`` **with its own copy**, loaded from the model directory in the compute dtype: under
  fsdp (every sharded forward is a collective, and ranks generate different numbers of tokens),
  under one-step-off (the rollout runs during the update and must not see weights change
  under it), and with LoRA (the engine serves plain merged weights, not the adapter wrapper);
* ``vllm`` / ``vllm-async``: always a copy of its own, loaded from the model directory.

An engine with its own copy is refreshed by streaming (``link.EngineLink``). It may also sleep
between rollouts (``actor.rollout.free_engine_memory``), except under one-step-off, where it
runs during the update and keeps its memory.

A rollout on resources of its own (``resources.rollout_workers``, ``workers/rollout.py``) has a
fourth: the transformers engine over that worker's own module, which is never trained there and
takes the actor's weights between two decode steps, so it never sleeps (``rollout_role_engine``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.config.schema import PartialRollout, RolloutConfig
from agentrl.engines import build_engine
from agentrl.engines.base import Engine
from agentrl.models.loading import load_causal_lm


@dataclass(frozen=True)
class EngineChoice:
    """The rollout's engine: its ``kind``, whether it holds ``own_copy`` of the weights (else it
    shares the training module), whether it ``sleeps`` between rollouts, and whether it
    ``recomputes`` the sequences it is decoding when new weights arrive (the transformers engine's
    running batch re-prefilled under them: ``trainer.partial_rollout: recompute``)."""

    kind: str
    own_copy: bool
    sleeps: bool
    recomputes: bool = False

    @property
    def syncs_before_first_rollout(self) -> bool:
        """The transformers engine's own copy is streamed the training weights before its first
        rollout; vLLM serves the model directory's weights until the first update."""
        return self.kind == "hf" and self.own_copy

    def build(
        self,
        rollout: RolloutConfig,
        *,
        model: torch.nn.Module,
        tokenizer: Any,
        model_path: str | Path,
        dtype: torch.dtype,
        device: torch.device,
    ) -> Engine:
        """The engine: around ``model`` itself when it shares the training module, else loaded
        from ``model_path`` (the transformers engine in ``dtype`` on ``device``)."""
        if self.kind != "hf":
            return build_engine(
                self.kind,
                model_path=model_path,
                max_batch_size=rollout.max_batch_size,
                gpu_memory_utilization=rollout.gpu_memory_utilization,
                enforce_eager=rollout.enforce_eager,
                tensor_parallel_size=rollout.tensor_parallel_size,
            )
        if self.own_copy:
            model = load_causal_lm(model_path, dtype=dtype, device=device)
        return build_engine(
            "hf",
            model=model,
            tokenizer=tokenizer,
            max_batch_size=rollout.max_batch_size,
            continuous=rollout.continuous_batching,
            recompute_on_new_weights=self.recomputes,
        )


def choose_engine(
    rollout: RolloutConfig,
    *,
    strategy: str,
    overlap_rollout: bool,
    lora: bool,
    partial_rollout: PartialRollout = "off",
) -> EngineChoice:
    """The engine of ``rollout.engine`` for a run with this ``strategy`` (dp | fsdp), with the next
    rollout overlapping the update (one-step-off) or not, training LoRA adapters or not, and what
    a rollout in flight does with new weights (``partial_rollout``)."""
    own_copy = rollout.engine != "hf" or strategy == "fsdp" or overlap_rollout or lora
    return EngineChoice(
        kind=rollout.engine,
        own_copy=own_copy,
        sleeps=rollout.free_engine_memory and not overlap_rollout,
        recomputes=partial_rollout == "recompute",
    )


def rollout_role_engine(rollout: RolloutConfig, partial_rollout: PartialRollout = "off") -> EngineChoice:
    """The engine of a rollout worker (module docstring): the transformers engine around the
    worker's own module, awake between rollouts (one may always be generating)."""
    if rollout.engine != "hf":
        raise ValueError(
            f"a rollout worker (resources.rollout_workers > 0) runs the transformers engine; "
            f"actor.rollout.engine is {rollout.engine!r}"
        )
    return EngineChoice(kind="hf", own_copy=False, sleeps=False, recomputes=partial_rollout == "recompute")
