"""LoRA adapters on a causal LM, through ``peft``: attach, merge for the engine, save and restore.

With ``actor.lora.rank > 0`` the actor trains low-rank adapters and its base weights stay frozen:

* the policy is ``W + ΔW`` with ``ΔW = (alpha / rank) · B A`` on each target linear layer
  (``B`` starts at zero, so the adapted model starts as the base model);
* the **reference** is the same module with the adapters disabled (``peft``'s
  ``disable_adapter``): exactly the starting policy, and no second model copy;
* the **rollout engine** gets plain merged weights, ``W + ΔW`` under the base model's own
  parameter names (:func:`merged_tensors`), so every engine serves the policy unchanged;
* a **checkpoint** holds the merged policy as an ordinary HF directory (what evaluation and
  serving read) and the adapters apart (``adapter/``, what a resumed run loads).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentrl.config.schema import LoraConfig

__all__ = ["ADAPTER_DIR", "add_lora", "is_lora", "load_adapters", "merged_tensors", "save_adapters"]

ADAPTER_DIR = "adapter"


def add_lora(model: nn.Module, config: LoraConfig) -> nn.Module:
    """Wrap ``model`` with fresh adapters on ``config.target_modules``; only adapters train."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    peft_config = PeftLoraConfig(
        r=config.rank,
        lora_alpha=config.alpha,
        lora_dropout=config.dropout,
        target_modules=list(config.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, peft_config)
    except ValueError as error:  # e.g. no module matches target_modules
        raise ValueError(f"actor.lora.target_modules={list(config.target_modules)}: {error}") from None


def is_lora(model: nn.Module) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def merged_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The merged policy one tensor at a time, under the plain model's names: each adapted
    weight is ``W + ΔW`` (computed on the fly, the module is not changed); other tensors as held."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    adapter = model.active_adapter
    adapted = {f"{name}.weight": m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
    with torch.no_grad():
        for name, tensor in base.state_dict().items():
            if ".lora_" in name:
                continue
            plain = name.replace(".base_layer.", ".")
            layer = adapted.get(plain)
            if layer is not None and adapter in layer.lora_A:
                tensor = tensor + layer.get_delta_weight(adapter).to(tensor.dtype)
            yield plain, tensor.detach()


def save_adapters(model: nn.Module, directory: str | Path) -> Path:
    """The adapters alone (``adapter_config.json`` + weights), under ``directory/adapter``."""
    out = Path(directory) / ADAPTER_DIR
    model.save_pretrained(out)
    return out


def load_adapters(model: nn.Module, directory: str | Path) -> None:
    """Load adapters saved by :func:`save_adapters` into ``model`` (same rank and targets)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(directory) / ADAPTER_DIR / "adapter_model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"no LoRA adapters at {path} (was the checkpoint written with actor.lora?)")
    result: Any = set_peft_model_state_dict(model, load_file(str(path)))
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ValueError(f"{path}: adapter weights the model has no place for, e.g. {unexpected[0]}")
