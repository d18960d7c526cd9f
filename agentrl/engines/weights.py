"""Streaming weight sync: policy weights travel to an engine tensor by tensor, in bounded buckets.

An engine's ``update_weights`` accepts a ``WeightStream``: a state dict, or any iterable of
``(hf_name, tensor)`` pairs -- typically a generator that produces one tensor at a time (under
FSDP, each parameter is gathered only when the stream reaches it). The engine consumes it in
buckets of at most ``bucket_bytes``, so neither side ever holds a second full copy of the
model: the peak is one bucket (or one tensor when a single tensor is larger).

vLLM's side of the stream (``begin_reload`` / ``load_bucket`` / ``finish_reload``) runs in
the vLLM worker through ``collective_rpc``: the first arms vLLM's layer-wise in-place reload,
each bucket goes through the model's own ``load_weights`` (HF names onto vLLM's fused layout),
and the last re-runs post-load processing. These functions take the worker as their first
argument and must stay importable by name (the multiprocess engine core unpickles them).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch

WeightStream = Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]

DEFAULT_BUCKET_BYTES = 256 * 2**20


def named_tensors(weights: WeightStream) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` pairs of a state dict or a stream, detached, checked as they pass."""
    pairs = weights.items() if isinstance(weights, Mapping) else weights
    for item in pairs:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], torch.Tensor)):
            raise TypeError(
                "update_weights expects a state dict or an iterable of (name, tensor) pairs, "
                f"got an item of type {type(item).__name__}"
            )
        name, tensor = item
        if not isinstance(name, str):
            raise TypeError(f"update_weights: a weight name must be a str, got {type(name).__name__}")
        yield name, tensor.detach()


def buckets(
    weights: WeightStream, bucket_bytes: int = DEFAULT_BUCKET_BYTES
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive groups of the stream, each at most ``bucket_bytes`` (one tensor if larger).

    Tensors are moved to the CPU as they join a bucket (vLLM's workers receive them pickled)."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named_tensors(weights):
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor.cpu()))
        size += nbytes
    if bucket:
        yield bucket


def reload_calls(
    weights: WeightStream, bucket_bytes: int, packed: bool = False
) -> Iterator[tuple[Callable[..., Any], tuple[Any, ...]]]:
    """The ``collective_rpc`` calls that load a stream into a vLLM worker, in order:
    ``begin_reload``, ``load_bucket`` per bucket (as ``pack_bucket`` bytes when ``packed``, for
    the multiprocess engine core), ``finish_reload``. Buckets are cut as the calls are taken."""
    yield begin_reload, ()
    for bucket in buckets(weights, bucket_bytes):
        yield load_bucket, (pack_bucket(bucket) if packed else bucket,)
    yield finish_reload, ()


# --- run inside the vLLM worker (collective_rpc) ------------------------------------------


def _worker_model(worker: Any) -> torch.nn.Module:
    return worker.model_runner.get_model()


def begin_reload(worker: Any) -> None:
    """Arm vLLM's layer-wise in-place reload (its weight loaders are dropped after the first load)."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload.layerwise import initialize_layerwise_reload

    with set_current_vllm_config(worker.vllm_config):
        initialize_layerwise_reload(_worker_model(worker))


def pack_bucket(bucket: list[tuple[str, torch.Tensor]]) -> bytes:
    """A bucket as bytes, for the multiprocess engine core: it hands utility arguments on to its
    worker processes by pickling, and tensors it received zero-copy cannot be pickled again."""
    buffer = io.BytesIO()
    torch.save(bucket, buffer)
    return buffer.getvalue()


def load_bucket(worker: Any, bucket: list[tuple[str, torch.Tensor]] | bytes) -> int:
    """Load one bucket of HF-named tensors (or its ``pack_bucket`` bytes); returns how many
    names vLLM consumed."""
    from vllm.config import set_current_vllm_config

    if isinstance(bucket, bytes):
        bucket = torch.load(io.BytesIO(bucket), weights_only=True)

    with set_current_vllm_config(worker.vllm_config):
        loaded = _worker_model(worker).load_weights(iter(bucket))
    return len(loaded) if loaded is not None else len(bucket)


def finish_reload(worker: Any) -> None:
    """Post-load processing of every reloaded layer, then drop caches computed from old weights."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload.layerwise import finalize_layerwise_reload

    with set_current_vllm_config(worker.vllm_config):
        finalize_layerwise_reload(_worker_model(worker), worker.vllm_config.model_config)
    runner = worker.model_runner
    for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):
        if hasattr(runner, reset):
            getattr(runner, reset)()
