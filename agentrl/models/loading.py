"""Loading models and tokenizers from local directories, and the critic (value model).

Everything loads from a local path: no model hub is reachable, so ``local_files_only``
is always on and a missing directory fails here with the path in the message instead
of as a network error deep inside transformers.

Critic: ``ValueModel`` is the causal LM's backbone (the decoder without its LM head)
plus ``nn.Linear(hidden, 1)``, giving one value per token ``(B, T)``. The head starts at
zero so a fresh critic predicts 0 everywhere -- no random value noise in the first
GAE estimates -- and its gradient is still non-zero (it is the hidden state).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from agentrl.config.schema import DtypeName

# The compute dtypes of a role (config ``actor.compute_dtype`` / ``critic.compute_dtype``).
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in get_args(DtypeName)}
VALUE_HEAD_FILE = "value_head.safetensors"
VALUE_MODEL_MARKER = "agentrl_value_model.json"


def _resolve_dir(path: str | Path, what: str) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"{what}: expected a local model directory, {str(p)!r} is not a directory")
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"{what}: {str(p)!r} has no config.json (not a Hugging Face model directory)")
    return p


def _resolve_dtype(dtype: torch.dtype | str) -> torch.dtype | str:
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    resolved = getattr(torch, str(dtype), None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"dtype must be a torch dtype, its name (e.g. 'bfloat16') or 'auto', got {dtype!r}")
    return resolved


def load_causal_lm(
    path: str | Path, dtype: torch.dtype | str = torch.float32, device: str | torch.device = "cpu"
) -> PreTrainedModel:
    """Load a ``*ForCausalLM`` from a local directory onto ``device``.

    Defaults to float32 because CPU training here is fp32; pass ``"auto"`` to keep the
    checkpoint's dtype or ``"bfloat16"`` on GPU.
    """
    p = _resolve_dir(path, "load_causal_lm")
    model = AutoModelForCausalLM.from_pretrained(p, dtype=_resolve_dtype(dtype), local_files_only=True)
    return model.to(device)


def load_tokenizer(path: str | Path, padding_side: str = "left") -> Any:
    """Load the tokenizer of a local model directory.

    Padding is on the left by default: batches of prompts are left-padded so that every
    row's last prompt token sits in the same column and generation/response tokens
    follow it directly (the layout the rollout and the trainer use). If the tokenizer
    has no pad token, eos is used as pad -- harmless because masks in agentrl come from
    segment labels, never from ``token == pad``.
    """
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"load_tokenizer: {str(p)!r} is not a directory")
    tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
    tok.padding_side = padding_side
    if tok.pad_token is None:
        if tok.eos_token is None:
            raise ValueError(f"tokenizer at {str(p)!r} has neither a pad nor an eos token")
        tok.pad_token = tok.eos_token
    return tok


class ValueModel(nn.Module):
    """Critic: a causal LM's backbone + a scalar head, one value per token.

    ``forward(input_ids, attention_mask, position_ids=None) -> (B, T)`` values in float32.
    Saved as a directory: the backbone as an ordinary HF model (``save_pretrained``)
    plus ``value_head.safetensors``; reload with ``load_value_model``.
    """

    def __init__(self, backbone: PreTrainedModel, head_init_std: float = 0.0) -> None:
        super().__init__()
        if head_init_std < 0:
            raise ValueError(f"head_init_std must be >= 0, got {head_init_std}")
        self.backbone = backbone
        self.config = backbone.config
        hidden = backbone.config.hidden_size
        self.value_head = nn.Linear(hidden, 1, dtype=torch.float32)
        with torch.no_grad():
            if head_init_std == 0:
                self.value_head.weight.zero_()
            else:
                self.value_head.weight.normal_(0.0, head_init_std)
            self.value_head.bias.zero_()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if attention_mask is not None and position_ids is None:
            # Left padding must not shift positions (same rule as the engines).
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        out = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        )
        hidden = out.last_hidden_state
        return self.value_head(hidden.float()).squeeze(-1)

    def save_pretrained(self, out_dir: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> Path:
        """Write the critic; ``state_dict`` (e.g. gathered from FSDP shards) replaces the module's own."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if state_dict is None:
            self.backbone.save_pretrained(out)
            head = self.value_head.state_dict()
        else:
            backbone = {
                k.removeprefix("backbone."): v for k, v in state_dict.items() if k.startswith("backbone.")
            }
            plain_model(self.config, backbone, AutoModel).save_pretrained(out)
            head = {
                k.removeprefix("value_head."): v for k, v in state_dict.items() if k.startswith("value_head.")
            }
        save_file({k: v.detach().cpu().contiguous() for k, v in head.items()}, out / VALUE_HEAD_FILE)
        (out / VALUE_MODEL_MARKER).write_text(json.dumps({"head": VALUE_HEAD_FILE}) + "\n")
        return out


def plain_model(
    config: Any, state_dict: dict[str, torch.Tensor], model_cls: Any = AutoModelForCausalLM
) -> Any:
    """An ordinary (unsharded, unwrapped) HF model holding ``state_dict``, built without
    allocating weights twice: what a gathered FSDP state is saved through."""
    with torch.device("meta"):
        model = model_cls.from_config(config)
    model.load_state_dict(state_dict, strict=False, assign=True)
    missing = [n for n, p in model.named_parameters() if p.is_meta]
    if missing:
        raise ValueError(
            f"state dict lacks {len(missing)} parameter(s) of {type(model).__name__}, e.g. {missing[0]}"
        )
    return model


def build_value_model(
    path: str | Path,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    head_init_std: float = 0.0,
) -> ValueModel:
    """A critic from a causal-LM (or saved critic) directory.

    From a causal LM directory: its backbone weights, LM head dropped, fresh value head
    (zero-init by default; ``head_init_std > 0`` for a small random init). From a
    directory written by ``ValueModel.save_pretrained``: the saved head is restored.
    """
    p = _resolve_dir(path, "build_value_model")
    backbone = AutoModel.from_pretrained(p, dtype=_resolve_dtype(dtype), local_files_only=True)
    model = ValueModel(backbone, head_init_std=head_init_std)
    head_file = p / VALUE_HEAD_FILE
    if head_file.is_file():
        model.value_head.load_state_dict(load_file(head_file))
    return model.to(device)


def model_config(path: str | Path) -> Any:
    """The config of a local model directory (cheap: no weights are read)."""
    return AutoConfig.from_pretrained(_resolve_dir(path, "model_config"), local_files_only=True)
