"""Generation engines behind one token-in/token-out interface (see ``base.py``).

``build_engine("hf", model=..., tokenizer=...)`` wraps an in-memory model (shared with
the trainer); ``build_engine("hf", model_path=...)``, ``build_engine("vllm", model_path=...)``
(coalesced batches on vLLM's offline ``LLM``) or ``build_engine("vllm-async", model_path=...)``
(one request per turn on vLLM's ``AsyncLLM``) load from a directory. vLLM is imported only
when asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

from agentrl.config.schema import EngineKind
from agentrl.engines.base import Engine, FinishReason, GenerationResult, SamplingParams

ENGINE_KINDS: tuple[str, ...] = get_args(EngineKind)

__all__ = ["ENGINE_KINDS", "Engine", "FinishReason", "GenerationResult", "SamplingParams", "build_engine"]


def build_engine(
    kind: str,
    *,
    model_path: str | Path | None = None,
    model: Any = None,
    tokenizer: Any = None,
    **kwargs: Any,
) -> Engine:
    """Construct an engine by name.

    ``hf``: pass ``model`` and ``tokenizer`` (shared objects) or ``model_path``; other
    keyword arguments go to ``HFEngine`` (``max_batch_size``, ``device``, ...).
    ``vllm`` / ``vllm-async``: pass ``model_path``; other keyword arguments go to
    ``VLLMEngine`` / ``AsyncVLLMEngine``.
    """
    if kind == "hf":
        from agentrl.engines.hf import HFEngine

        if model is not None:
            if tokenizer is None:
                raise ValueError("build_engine('hf', model=...) also needs tokenizer=")
            return HFEngine(model, tokenizer, **kwargs)
        if model_path is None:
            raise ValueError("build_engine('hf') needs either model= and tokenizer=, or model_path=")
        return HFEngine.from_pretrained(model_path, **kwargs)
    if kind in ("vllm", "vllm-async"):
        if model is not None:
            raise ValueError(f"build_engine({kind!r}) loads its own copy: pass model_path=, not model=")
        if model_path is None:
            raise ValueError(f"build_engine({kind!r}) needs model_path=")
        if kind == "vllm-async":
            from agentrl.engines.vllm_async import AsyncVLLMEngine

            return AsyncVLLMEngine(model_path, **kwargs)
        from agentrl.engines.vllm_engine import VLLMEngine

        return VLLMEngine(model_path, **kwargs)
    raise ValueError(f"engine kind must be one of {ENGINE_KINDS}, got {kind!r}")
