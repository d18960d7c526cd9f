"""One engine suite, run against every engine.

``engine_factory`` is parametrized over engine kinds: ``hf`` (continuous batching) and
``hf-coalescing`` always run; ``vllm`` (offline, coalesced) and ``vllm-async`` (one request
per turn) are marked ``vllm`` and skipped when vLLM is not importable. Each factory builds
an engine over the same tiny model directory, so the teacher-forced reference below (plain
HF forward) applies to all.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from agentrl.models.loading import load_causal_lm, load_tokenizer
from agentrl.models.tiny import make_tiny_model_dir

HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "seed0", seed=0)


@pytest.fixture(scope="session")
def tiny_dir_other_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Same tokenizer and shapes as ``tiny_dir`` (BPE training is deterministic), new weights."""
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "seed1", seed=1)


@pytest.fixture(scope="session")
def tokenizer(tiny_dir: Path):
    return load_tokenizer(tiny_dir)


@pytest.fixture(scope="session")
def reference_model(tiny_dir: Path) -> torch.nn.Module:
    return load_causal_lm(tiny_dir).eval()


# Eager: on CPU, vLLM's compiled graphs cost ~28 s a start (37.6 s vs 9.5 s for the tiny model,
# measured) and the contract does not depend on them. Module scope: in-process vLLM owns this
# process's default torch.distributed group until it shuts down, and later test modules create
# their own.
@pytest.fixture(scope="module")
def _vllm_engine(tiny_dir: Path) -> Iterator[object]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    from agentrl.engines.vllm_engine import VLLMEngine

    engine = VLLMEngine(tiny_dir, max_batch_size=16, dtype="float32", max_model_len=512, enforce_eager=True)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def _vllm_async_engine(tiny_dir: Path) -> Iterator[object]:
    from agentrl.engines.vllm_async import AsyncVLLMEngine

    engine = AsyncVLLMEngine(
        tiny_dir, max_batch_size=16, dtype="float32", max_model_len=512, enforce_eager=True
    )
    yield engine
    engine.shutdown()


EngineFactory = Callable[..., object]
VLLM_MARKS = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(not HAS_VLLM, reason="vllm is not installed"),
]


@pytest.fixture(
    params=[
        "hf",
        "hf-coalescing",
        pytest.param("vllm", marks=VLLM_MARKS),
        pytest.param("vllm-async", marks=VLLM_MARKS),
    ]
)
def engine_factory(request: pytest.FixtureRequest, tiny_dir: Path, tokenizer) -> EngineFactory:
    """``engine_factory(eos_token_ids=None, max_batch_size=16)`` -> a fresh-enough engine.

    HF engines are cheap and built per call; each vLLM engine is started once per
    module (minutes otherwise) and its eos override is per request.
    """
    kind = request.param
    if kind.startswith("hf"):
        from agentrl.engines.hf import HFEngine

        def make_hf(eos_token_ids=None, max_batch_size: int = 16):
            return HFEngine(
                load_causal_lm(tiny_dir),
                tokenizer,
                max_batch_size=max_batch_size,
                eos_token_ids=eos_token_ids,
                continuous=kind == "hf",
            )

        return make_hf
    engine = request.getfixturevalue("_vllm_engine" if kind == "vllm" else "_vllm_async_engine")

    def make_vllm(eos_token_ids=None, max_batch_size: int = 16):
        engine.eos_token_ids = None if eos_token_ids is None else set(eos_token_ids)
        return engine

    return make_vllm
