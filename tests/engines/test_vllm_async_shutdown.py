"""Shutting the async vLLM engine down is quiet: no false engine death, no task left pending."""

from __future__ import annotations

import asyncio
import importlib.util
import logging

import pytest

from agentrl.engines.base import SamplingParams

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
]


def test_shutdown_reports_no_dead_engine_and_leaves_no_task_pending(tiny_dir, capfd, caplog):
    from agentrl.engines.vllm_async import AsyncVLLMEngine

    # eager: the shutdown does not depend on compiled graphs, which cost ~28 s a start on CPU
    engine = AsyncVLLMEngine(
        tiny_dir, max_batch_size=4, dtype="float32", max_model_len=256, enforce_eager=True
    )
    result = asyncio.run(engine.generate([5, 6, 7], SamplingParams(max_new_tokens=4, greedy=True)))
    assert result.token_ids
    loop = engine._loop  # the engine's own loop: what is still scheduled there after shutdown
    capfd.readouterr()
    with caplog.at_level(logging.WARNING):
        engine.shutdown()
    printed = capfd.readouterr()
    said = printed.out + printed.err + caplog.text
    assert "EngineDeadError" not in said
    assert "Task was destroyed" not in said
    assert not asyncio.all_tasks(loop), "tasks left pending on the engine's loop"
    engine.shutdown()  # a second call is a no-op
