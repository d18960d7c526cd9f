"""Plain Hugging Face weights out of a training model: as a tensor stream, or as a directory.

A training model is held in one of three forms, and what leaves it is always the plain model
under its ordinary parameter names:

* **LoRA** (``actor.lora.rank > 0``, dp only): the merged policy ``W + ΔW`` (``lora.merged_tensors``),
  and in a directory also the adapters apart (``adapter/``, what a resumed run loads);
* **sharded** (``resources.strategy=fsdp``): the full weights gathered from the shards, a
  collective every rank of the group must join;
* **plain** (dp): the module's own weights, which it saves itself.

``plain_weights`` streams them one tensor at a time (what a rollout engine with its own copy
is sent); ``export_hf_dir`` writes them where evaluation and serving read them: the actor's
``actor/`` (a causal LM and its tokenizer) and the critic's ``critic/`` (a ``ValueModel``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentrl.models.loading import ValueModel, plain_model
from agentrl.models.lora import merged_tensors, save_adapters
from agentrl.models.sharding import full_state_dict, stream_full_tensors


def plain_weights(model: nn.Module, lora: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
    """The plain model's weights one tensor at a time: merged when ``lora``, else gathered from
    the shards as the consumer reaches each tensor (a collective under fsdp: every rank must
    consume the whole stream, in order), else as held."""
    return merged_tensors(model) if lora else stream_full_tensors(model)


def export_hf_dir(
    model: nn.Module,
    out: str | Path,
    *,
    rank: int,
    sharded: bool,
    lora: bool = False,
    tokenizer: Any = None,
) -> None:
    """Write ``model`` as a plain HF directory at ``out`` on rank 0 (with ``tokenizer`` when
    given, and the adapters in ``adapter/`` when ``lora``). Every rank calls it: gathering a
    ``sharded`` model is a collective; only rank 0 receives the tensors and writes."""
    out = Path(out)
    state = None  # the model saves itself, unless it is wrapped (adapters) or sharded
    if lora:
        state = dict(merged_tensors(model)) if rank == 0 else None
    elif sharded:
        state = full_state_dict(model)  # a collective; rank 0 receives the tensors
    if rank != 0:
        return
    if state is None:
        model.save_pretrained(out)
    elif isinstance(model, ValueModel):  # the critic writes its backbone and head from the state
        model.save_pretrained(out, state_dict=state)
    else:
        plain = plain_model(model.config, state)
        plain.generation_config = model.generation_config
        plain.save_pretrained(out)
    if lora:
        save_adapters(model, out)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
